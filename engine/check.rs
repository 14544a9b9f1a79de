//! Check: [`RawWorkflow`] -> [`Workflow`].
//!
//! Validates the document against the format's schema, then its meaning: stage ids, one action
//! per stage, every reference to a stage, input or environment variable, the graph (cycles name
//! every stage in them), templates and expressions compile, `stages.X.output.a.b` paths against
//! X's output schema, schemas compile, built-in arguments against the built-in's schema. Every
//! problem is collected; a `Workflow` exists only when there was no error, so `run` never checks
//! again what was proven here.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use minijinja::Environment;
use petgraph::graph::{DiGraph, NodeIndex};
use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

use crate::builtins::{self, Builtin};
use crate::diag::{did_you_mean, Diagnostic, Location, SourceFile};
use crate::format::{
    CacheDef, OnError, OutputFormat, StageDef, TemplateRef, WorkflowFile, ACTION_KEYS,
};
use crate::library::{SearchPath, Shelf};
use crate::load::{self, pointer_segment, RawWorkflow};
use crate::schema::{self, Schema};
use crate::template::{self, compiled, Tmpl};

/// A checked workflow: every reference resolved, every template and schema compiled.
pub struct Workflow {
    pub name: String,
    pub file: WorkflowFile,
    pub raw: RawWorkflow,
    pub stages: Vec<Stage>,
    /// Stage indexes in a topological order.
    pub order: Vec<usize>,
    /// For each stage, the stages that wait for it.
    pub dependents: Vec<Vec<usize>>,
    pub outputs: Vec<(String, Tmpl)>,
    pub child_env: Vec<(String, Tmpl)>,
    pub writes: Vec<Tmpl>,
    pub lock: Option<CheckedLock>,
    /// SHA-256 of every file of the chain, top first.
    pub file_hashes: Vec<(String, String)>,
    /// Warnings found while checking.
    pub warnings: Vec<Diagnostic>,
}

impl std::fmt::Debug for Workflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workflow")
            .field("name", &self.name)
            .finish()
    }
}

pub struct CheckedLock {
    pub path: Tmpl,
    pub busy: crate::format::Busy,
    pub stale_after: Option<Duration>,
    pub message: Option<Tmpl>,
}

/// One checked stage.
pub struct Stage {
    pub id: String,
    pub index: usize,
    pub def: Arc<StageDef>,
    pub action: Action,
    /// The stages that must finish first (explicit `after` and inferred references), sorted.
    pub deps: Vec<usize>,
    pub if_: Option<Tmpl>,
    pub exit_if: Option<Tmpl>,
    pub exit_message: Option<Tmpl>,
    pub asserts: Vec<(Tmpl, Option<Tmpl>)>,
    pub foreach: Option<Tmpl>,
    pub format: OutputFormat,
    pub schema: Option<Arc<Schema>>,
    pub output_path: Option<Tmpl>,
    pub set_state: Vec<(String, Tmpl)>,
    pub cache: Option<CacheSpec>,
    pub timeout: Option<Duration>,
    pub retries: u32,
    pub retry_backoff: Duration,
    pub repair: u32,
    pub on_error: OnError,
    /// SHA-256 of the stage's definition as written (after overlays).
    pub definition_hash: String,
}

pub struct CacheSpec {
    pub key: Option<Tmpl>,
    pub ttl: Option<Duration>,
}

/// What a stage does.
pub enum Action {
    None,
    Command(ProcessAction),
    Shell(ProcessAction),
    Prompt {
        prompt: Tmpl,
        system: Option<Tmpl>,
        model: String,
    },
    Template(Tmpl),
    Uses {
        builtin: &'static Builtin,
        with: WithTree,
    },
    Workflow {
        workflow: Arc<Workflow>,
        with: Vec<(String, WithTree)>,
    },
}

impl Action {
    pub fn kind(&self) -> &'static str {
        match self {
            Action::None => "none",
            Action::Command(_) => "command",
            Action::Shell(_) => "shell",
            Action::Prompt { .. } => "prompt",
            Action::Template(_) => "template",
            Action::Uses { .. } => "uses",
            Action::Workflow { .. } => "workflow",
        }
    }
}

/// `command` and `shell`: argv templates (a shell is `sh -c <script>`), stdin, cwd, env.
pub struct ProcessAction {
    pub argv: Vec<Tmpl>,
    pub stdin: Option<Tmpl>,
    pub cwd: Option<Tmpl>,
    pub env: Vec<(String, Tmpl)>,
    pub ok_codes: Vec<i32>,
}

/// A `with` value: literals stay literals, strings are templates, tables and arrays recurse.
pub enum WithTree {
    Literal(Value),
    Template(Tmpl),
    Array(Vec<WithTree>),
    Object(Vec<(String, WithTree)>),
}

/// Check a loaded workflow. Sub-workflows are loaded and checked through `search`.
pub fn check(
    raw: RawWorkflow,
    search: &SearchPath,
    cwd: &Path,
) -> Result<Workflow, Vec<Diagnostic>> {
    let mut visiting = Vec::new();
    check_inner(raw, search, cwd, &mut visiting).map_err(in_file_order)
}

/// Problems are found phase by phase; a reader wants them in the order of the file.
fn in_file_order(mut diags: Vec<Diagnostic>) -> Vec<Diagnostic> {
    diags.sort_by_key(|d| {
        d.location
            .as_ref()
            .map(|l| (l.source.path.clone(), l.span.start))
    });
    diags
}

fn check_inner(
    raw: RawWorkflow,
    search: &SearchPath,
    cwd: &Path,
    visiting: &mut Vec<String>,
) -> Result<Workflow, Vec<Diagnostic>> {
    let mut diags = Vec::new();
    // The typed reading is as strict as the format's schema but for the bounds in
    // `within_bounds`, so a document that reads and is within them is valid: the schema (whose
    // compiled validator is large and slow to build) is consulted only to explain a document
    // that is not. Checking then goes on with what is left after the format errors, so one pass
    // reports every problem: the offending keys are dropped from a copy, and a `Workflow` is
    // never built from it.
    let mut raw = raw;
    let mut format_failed = false;
    let mut parsed = match raw.typed.take() {
        Some(file) => Ok(*file),
        None => WorkflowFile::deserialize(&raw.doc),
    };
    if !parsed.as_ref().is_ok_and(within_bounds) {
        raw.need_document();
        let rejected = validate_format(&raw, &mut diags);
        format_failed = !rejected.is_empty() || diags.iter().any(Diagnostic::is_error);
        for pointer in &rejected {
            remove_pointer(&mut raw.doc, pointer);
        }
        parsed = WorkflowFile::deserialize(&raw.doc);
    }
    let file: WorkflowFile = match parsed {
        Ok(file) => file,
        Err(_) if format_failed => return Err(diags),
        Err(error) => {
            return Err(vec![Diagnostic::error(format!(
                "invalid workflow: {error}"
            ))
            .at(raw.file(), 0..0)]);
        }
    };
    visiting.push(raw.name.clone());
    let mut checker = Checker {
        raw: &raw,
        file: &file,
        search,
        cwd,
        diags,
        sources: Vec::new(),
        schemas: HashMap::new(),
        globals: HashSet::new(),
    };
    // Each definition's hash stands alone (its JSON, about a kilobyte a stage, hashed): a
    // thread hashes them while the checker reads the templates and references.
    let result = std::thread::scope(|scope| {
        let hashing = scope.spawn(|| definition_hashes(&file));
        checker.run(visiting, move || hashing.join().unwrap_or_default())
    });
    visiting.pop();
    let mut diags = checker.diags;
    match result {
        Some(parts) if !format_failed && !diags.iter().any(Diagnostic::is_error) => {
            let file_hashes = raw
                .sources
                .iter()
                .map(|s| {
                    (
                        s.path.display().to_string(),
                        schema::sha256_hex(s.text.as_bytes()),
                    )
                })
                .collect();
            let warnings = std::mem::take(&mut diags);
            // The merged document has been read into `file`; locations come from `origins`.
            // Freed here, it does not add to a long run's peak memory.
            let mut raw = raw;
            raw.doc = Value::Null;
            Ok(Workflow {
                name: raw.name.clone(),
                file,
                raw,
                stages: parts.stages,
                order: parts.order,
                dependents: parts.dependents,
                outputs: parts.outputs,
                child_env: parts.child_env,
                writes: parts.writes,
                lock: parts.lock,
                file_hashes,
                warnings,
            })
        }
        _ => Err(diags),
    }
}

/// The stages in an order that runs each after what it depends on, and otherwise in the order
/// of the file: stages that can start together start as they were written (Kahn's algorithm,
/// first in first out). `None` when there is a cycle.
fn in_order_of_the_file(deps: &[BTreeSet<usize>]) -> Option<Vec<usize>> {
    let mut waiting: Vec<usize> = deps.iter().map(BTreeSet::len).collect();
    let mut dependents = vec![Vec::new(); deps.len()];
    for (i, ds) in deps.iter().enumerate() {
        for &d in ds {
            dependents[d].push(i);
        }
    }
    let mut order: Vec<usize> = (0..deps.len()).filter(|&i| waiting[i] == 0).collect();
    let mut next = 0;
    while let Some(&i) = order.get(next) {
        next += 1;
        for &j in &dependents[i] {
            waiting[j] -= 1;
            if waiting[j] == 0 {
                order.push(j);
            }
        }
    }
    (order.len() == deps.len()).then_some(order)
}

/// Each stage's definition hash, in the order of the stages.
fn definition_hashes(file: &WorkflowFile) -> Vec<String> {
    file.stages
        .values()
        .map(crate::builtins::paths::sha256_json)
        .collect()
}

/// The format's constraints that the typed reading does not enforce by itself.
fn within_bounds(file: &WorkflowFile) -> bool {
    file.stages
        .values()
        .all(|stage| stage.concurrency != Some(0))
}

/// Validate the document against the format's JSON Schema, one diagnostic per problem.
/// Returns the pointers of the values that broke the format, for `check_inner` to drop.
fn validate_format(raw: &RawWorkflow, diags: &mut Vec<Diagnostic>) -> Vec<String> {
    let mut rejected = Vec::new();
    static VALIDATOR: OnceLock<Option<jsonschema::Validator>> = OnceLock::new();
    let Some(validator) = VALIDATOR
        .get_or_init(|| jsonschema::validator_for(&crate::format::workflow_schema()).ok())
        .as_ref()
    else {
        diags.push(Diagnostic::error(
            "the workflow format's schema does not compile",
        ));
        return rejected;
    };
    let schema_value = crate::format::workflow_schema();
    for error in validator.iter_errors(&raw.doc) {
        let pointer = error.instance_path().to_string();
        use jsonschema::error::ValidationErrorKind as K;
        match &error.kind() {
            K::AdditionalProperties { unexpected } => {
                let allowed = allowed_keys(&schema_value, &pointer);
                for key in unexpected {
                    let key_pointer = format!("{pointer}/{}", pointer_segment(key));
                    rejected.push(key_pointer.clone());
                    let help =
                        did_you_mean(key, allowed.iter().map(String::as_str)).or_else(|| {
                            (!allowed.is_empty())
                                .then(|| format!("known keys: {}", allowed.join(", ")))
                        });
                    diags.push(
                        Diagnostic::error(format!("unknown key `{key}`{}", where_(&pointer)))
                            .at_opt(raw.locate_key(&key_pointer))
                            .with_help_opt(help),
                    );
                }
            }
            _ => {
                let message = describe_schema_error(&error, &pointer);
                diags.push(Diagnostic::error(message).at_opt(raw.locate(&pointer)));
                rejected.push(pointer);
            }
        }
    }
    rejected
}

/// Remove the value at a JSON pointer (a missing one is fine).
fn remove_pointer(doc: &mut Value, pointer: &str) {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return;
    };
    let key = last.replace("~1", "/").replace("~0", "~");
    match doc.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.shift_remove(&key);
        }
        Some(Value::Array(items)) => {
            if let Ok(index) = key.parse::<usize>() {
                if index < items.len() {
                    items[index] = Value::Null;
                }
            }
        }
        _ => {}
    }
}

fn where_(pointer: &str) -> String {
    if pointer.is_empty() {
        " at the top level".to_string()
    } else {
        format!(" in `{}`", pointer_to_dotted(pointer))
    }
}

fn pointer_to_dotted(pointer: &str) -> String {
    pointer
        .trim_start_matches('/')
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect::<Vec<_>>()
        .join(".")
}

fn describe_schema_error(error: &jsonschema::ValidationError<'_>, pointer: &str) -> String {
    use jsonschema::error::ValidationErrorKind as K;
    let at = pointer_to_dotted(pointer);
    match &error.kind() {
        K::Type { kind } => {
            let expected = match kind {
                jsonschema::error::TypeKind::Single(t) => t.to_string(),
                // An optional key's schema also admits null, which TOML cannot write; name the
                // one type a user can mean.
                jsonschema::error::TypeKind::Multiple(types) => {
                    let named: Vec<String> = types
                        .iter()
                        .filter(|t| *t != jsonschema::JsonType::Null)
                        .map(|t| t.to_string())
                        .collect();
                    match named.as_slice() {
                        [one] => one.clone(),
                        _ => return format!("`{at}`: {error}"),
                    }
                }
            };
            format!(
                "`{at}` must be {}, not {}",
                article(&expected),
                json_type(error.instance())
            )
        }
        K::Enum { options } => format!("`{at}` must be one of {options}, not {}", error.instance()),
        K::Required { property } => format!("`{at}` is missing the required key {property}"),
        K::AnyOf { .. } | K::OneOfNotValid { .. } => {
            format!(
                "`{at}` has the wrong shape ({})",
                json_type(error.instance())
            )
        }
        _ => format!("`{at}`: {error}"),
    }
}

fn article(kind: &str) -> String {
    match kind {
        "array" | "object" | "integer" => format!("an {kind}"),
        other => format!("a {other}"),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a float",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "a table",
    }
}

/// The keys the format allows at a pointer (for suggestions).
fn allowed_keys(schema: &Value, pointer: &str) -> Vec<String> {
    let defs = schema.get("$defs");
    let resolve = |node: &Value| -> Value {
        let mut node = node.clone();
        for _ in 0..4 {
            let Some(reference) = node.get("$ref").and_then(Value::as_str) else {
                break;
            };
            let name = reference.rsplit('/').next().unwrap_or_default();
            match defs.and_then(|d| d.get(name)) {
                Some(target) => node = target.clone(),
                None => break,
            }
        }
        node
    };
    let mut node = resolve(schema);
    let segments: Vec<&str> = pointer
        .trim_start_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    for segment in segments {
        let next = node
            .get("properties")
            .and_then(|p| p.get(segment))
            .cloned()
            .or_else(|| {
                node.get("additionalProperties")
                    .filter(|a| a.is_object())
                    .cloned()
            })
            .or_else(|| {
                node.get("anyOf")
                    .and_then(Value::as_array)
                    .and_then(|alts| {
                        alts.iter()
                            .map(&resolve)
                            .find(|a| a.get("properties").is_some())
                    })
            });
        match next {
            Some(next) => node = resolve(&next),
            None => return Vec::new(),
        }
    }
    if node.get("properties").is_none() {
        if let Some(alt) = node
            .get("anyOf")
            .and_then(Value::as_array)
            .and_then(|alts| {
                alts.iter()
                    .map(&resolve)
                    .find(|a| a.get("properties").is_some())
            })
        {
            node = alt;
        }
    }
    node.get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

struct Parts {
    stages: Vec<Stage>,
    order: Vec<usize>,
    dependents: Vec<Vec<usize>>,
    outputs: Vec<(String, Tmpl)>,
    child_env: Vec<(String, Tmpl)>,
    writes: Vec<Tmpl>,
    lock: Option<CheckedLock>,
}

/// A template source waiting to be compiled, and where it was written.
struct Pending {
    name: String,
    source: String,
    native: bool,
    /// Where the template text lives: a pointer in the workflow, or a template file.
    at: At,
}

#[derive(Clone)]
enum At {
    Pointer(String),
    File(SourceFile),
}

/// Which names a template may read.
#[derive(Clone, Copy, PartialEq)]
enum Context {
    Plain,
    Item,
    Output,
}

struct Checker<'a> {
    raw: &'a RawWorkflow,
    file: &'a WorkflowFile,
    search: &'a SearchPath,
    cwd: &'a Path,
    diags: Vec<Diagnostic>,
    sources: Vec<Pending>,
    schemas: HashMap<String, Option<Arc<Schema>>>,
    /// Names the template environment defines (functions and globals).
    globals: HashSet<String>,
}

/// `^[a-z][a-z0-9_]*$`, without compiling a regex for it.
fn is_stage_id(id: &str) -> bool {
    let mut bytes = id.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

impl<'a> Checker<'a> {
    fn error(&mut self, message: impl Into<String>, pointer: &str) -> &mut Diagnostic {
        let location = self.raw.locate(pointer);
        self.diags.push(Diagnostic::error(message).at_opt(location));
        self.diags.last_mut().expect("just pushed")
    }

    fn error_key(&mut self, message: impl Into<String>, pointer: &str) -> &mut Diagnostic {
        let location = self.raw.locate_key(pointer);
        self.diags.push(Diagnostic::error(message).at_opt(location));
        self.diags.last_mut().expect("just pushed")
    }

    fn run(
        &mut self,
        visiting: &mut Vec<String>,
        definition_hashes: impl FnOnce() -> Vec<String>,
    ) -> Option<Parts> {
        let ids: Vec<String> = self.file.stages.keys().cloned().collect();
        let index: HashMap<&str, usize> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect();

        self.check_inputs();
        for id in &ids {
            if !is_stage_id(id) {
                let help = format!(
                    "stage ids match ^[a-z][a-z0-9_]*$, e.g. `{}`",
                    suggest_id(id)
                );
                self.error_key(format!("invalid stage id `{id}`"), &stage_pointer(id))
                    .help = Some(help);
            }
        }

        // Pass 1: gather every template source, resolve template files, compile schemas.
        let mut stage_actions: Vec<Option<PendingAction>> = Vec::with_capacity(ids.len());
        self.sources.reserve(2 * ids.len());
        for (id, def) in &self.file.stages {
            stage_actions.push(self.gather_stage(id, def, visiting));
        }
        for (name, source) in &self.file.outputs {
            self.pending_value(
                format!("outputs.{name}"),
                source,
                At::Pointer(format!("/outputs/{}", pointer_segment(name))),
            );
        }
        for (name, source) in &self.file.workflow.child_env {
            self.pending_text(
                format!("workflow.child_env.{name}"),
                source,
                At::Pointer(format!("/workflow/child_env/{}", pointer_segment(name))),
            );
        }
        for (i, source) in self.file.workflow.writes.iter().enumerate() {
            self.pending_text(
                format!("workflow.writes.{i}"),
                source,
                At::Pointer(format!("/workflow/writes/{i}")),
            );
        }
        if let Some(lock) = &self.file.workflow.lock {
            self.pending_text(
                "workflow.lock.path".into(),
                &lock.path,
                At::Pointer("/workflow/lock/path".into()),
            );
            if let Some(message) = &lock.message {
                self.pending_text(
                    "workflow.lock.message".into(),
                    message,
                    At::Pointer("/workflow/lock/message".into()),
                );
            }
        }

        // Compile: add every text template to one environment, then leak it.
        let mut env = template::environment();
        let loader_search = self.search.clone();
        let loader_library = self.raw.library.clone();
        env.set_loader(move |name| {
            Ok(loader_search
                .find_file(&loader_library, Shelf::Templates, name)
                .map(|source| source.text.to_string()))
        });
        let mut compiled: HashMap<String, Tmpl> = HashMap::new();
        let mut failed: HashSet<String> = HashSet::new();
        // Templates that are only text and lookups never reach minijinja's compiler.
        let mut interpolated: Vec<Option<compiled::Interpolation>> = self
            .sources
            .iter()
            .map(|p| compiled::Interpolation::parse(&p.name, &p.source, p.native))
            .collect();
        for (pending, plain) in self.sources.iter().zip(&interpolated) {
            if plain.is_some() || pending.native || !compiled::has_syntax(&pending.source) {
                continue;
            }
            if let Err(error) = env.add_template_owned(pending.name.clone(), pending.source.clone())
            {
                failed.insert(pending.name.clone());
                let diagnostic = template_error(self.raw, &pending.at, &pending.source, &error);
                self.diags.push(diagnostic);
            }
        }
        self.globals = env.globals().map(|(name, _)| name.to_string()).collect();
        let env: &'static Environment<'static> = Box::leak(Box::new(env));
        let pendings = std::mem::take(&mut self.sources);
        for (pending, plain) in pendings.iter().zip(&mut interpolated) {
            if failed.contains(&pending.name) {
                continue;
            }
            let result = if let Some(interpolation) = plain.take() {
                Ok(Tmpl::Interpolated(Box::new(interpolation)))
            } else if pending.native {
                Tmpl::expression(env, &pending.source)
            } else if !compiled::has_syntax(&pending.source) {
                Ok(Tmpl::Literal(pending.source.clone()))
            } else if let Some(expression) = compiled::single_expression(&pending.source)
                .filter(|_| pending.name.starts_with("value:"))
            {
                Tmpl::expression(env, expression)
            } else {
                Tmpl::text(env, &pending.name)
            };
            match result {
                Ok(tmpl) => {
                    compiled.insert(clean_name(&pending.name), tmpl);
                }
                Err(error) => {
                    let diagnostic = template_error(self.raw, &pending.at, &pending.source, &error);
                    self.diags.push(diagnostic);
                }
            }
        }
        // Each compiled name -> the pending it came from (the last one, should two share a name).
        let at_of: HashMap<String, usize> = pendings
            .iter()
            .enumerate()
            .map(|(k, p)| (clean_name(&p.name), k))
            .collect();
        // Each stage's template names, found in one pass over the names rather than one pass per
        // stage: `stages.<id>.<key>`, with `value:` before it for native values.
        let mut names_of: Vec<Vec<&str>> = vec![Vec::new(); ids.len()];
        for name in compiled.keys() {
            let bare = name.strip_prefix("value:").unwrap_or(name);
            let Some(rest) = bare.strip_prefix("stages.") else {
                continue;
            };
            for (dot, _) in rest.match_indices('.') {
                if let Some(&i) = index.get(&rest[..dot]) {
                    names_of[i].push(name.as_str());
                }
            }
        }

        // Pass 2: references, edges, types.
        let mut deps: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); ids.len()];
        let mut reference_checks: Vec<(usize, &str, Context, usize, String)> = Vec::new();
        for (i, (id, def)) in self.file.stages.iter().enumerate() {
            for (position, after) in def.after.iter().enumerate() {
                let pointer = || format!("{}/after/{position}", stage_pointer(id));
                match index.get(after.as_str()) {
                    Some(&j) if j == i => {
                        self.error(format!("stage `{id}` cannot run after itself"), &pointer());
                    }
                    Some(&j) => {
                        deps[i].insert(j);
                    }
                    None => self.unknown_stage(after, &pointer(), &ids),
                }
            }
            let names = &mut names_of[i];
            names.sort_unstable();
            for &name in names.iter() {
                let pending = at_of[name];
                let context = context_of(&pendings[pending].name);
                for reference in compiled[name].references() {
                    reference_checks.push((i, name, context, pending, reference));
                }
            }
        }
        // Workflow-level templates.
        let mut top_names: Vec<&str> = compiled
            .keys()
            .filter(|n| !n.contains("stages."))
            .map(String::as_str)
            .collect();
        top_names.sort_unstable();
        for name in top_names {
            let pending = at_of[name];
            for reference in compiled[name].references() {
                reference_checks.push((usize::MAX, name, Context::Plain, pending, reference));
            }
        }
        let stage_schemas: Vec<SchemaOf> = stage_actions
            .iter()
            .zip(self.file.stages.values())
            .map(|(action, def)| self.schema_of(action.as_ref(), def))
            .collect();
        for (i, name, context, pending, reference) in reference_checks {
            let own = (i != usize::MAX).then_some(i);
            let Pending { at, source, .. } = &pendings[pending];
            if let Some(target) = self.check_reference(
                own,
                name,
                context,
                at,
                source,
                &reference,
                &index,
                &ids,
                &stage_schemas,
            ) {
                if let Some(own) = own {
                    if target == own {
                        // `stages.<self>` inside its own templates: only `output` makes sense.
                        self.diag_at(at, source, &reference, format!("stage `{}` refers to its own result; use `output` in `exit_if` and `assert`", ids[own]));
                    } else {
                        deps[own].insert(target);
                    }
                } else if name.starts_with("value:outputs.") {
                    // Outputs read stages after the run; no edge needed.
                }
            }
        }

        // The graph.
        let order = match in_order_of_the_file(&deps) {
            Some(order) => order,
            None => {
                let mut graph: DiGraph<usize, ()> = DiGraph::new();
                let nodes: Vec<NodeIndex> = (0..ids.len()).map(|i| graph.add_node(i)).collect();
                for (i, ds) in deps.iter().enumerate() {
                    for &d in ds {
                        graph.add_edge(nodes[d], nodes[i], ());
                    }
                }
                for component in petgraph::algo::tarjan_scc(&graph) {
                    if component.len() > 1 {
                        let mut members: Vec<usize> = component.iter().map(|n| graph[*n]).collect();
                        members.sort();
                        let cycle = cycle_path(&members, &deps, &ids);
                        let first = &ids[members[0]];
                        self.error_key(format!("dependency cycle: {cycle}"), &stage_pointer(first))
                            .help = Some("a stage cannot depend, directly or through others, on itself; remove one of the edges (an `after` entry or a `stages.X` reference)".into());
                    }
                }
                Vec::new()
            }
        };
        if self.diags.iter().any(Diagnostic::is_error) {
            return None;
        }

        // Assemble.
        let mut definition_hashes = definition_hashes().into_iter();
        let mut take = |name: &str| compiled.remove(name);
        let mut stages = Vec::with_capacity(ids.len());
        for (i, ((id, def), pending)) in self.file.stages.iter().zip(stage_actions).enumerate() {
            let prefix = format!("stages.{id}.");
            let get = |take: &mut dyn FnMut(&str) -> Option<Tmpl>, key: &str| {
                take(&[prefix.as_str(), key].concat())
            };
            // A template is queued only for a key the stage has (`gather_stage`): the keys it
            // does not have are not looked for.
            let get_if = |take: &mut dyn FnMut(&str) -> Option<Tmpl>, has: bool, key: &str| {
                has.then(|| get(take, key)).flatten()
            };
            let action = match pending {
                None | Some(PendingAction::None) => Action::None,
                Some(PendingAction::Process {
                    shell,
                    argc,
                    env_keys,
                    ok_codes,
                }) => {
                    let mut argv = Vec::new();
                    if shell {
                        argv.push(Tmpl::Literal("sh".into()));
                        argv.push(Tmpl::Literal("-c".into()));
                        argv.push(
                            get(&mut take, "shell.sh").unwrap_or(Tmpl::Literal(String::new())),
                        );
                    } else {
                        for a in 0..argc {
                            argv.push(
                                get(&mut take, &format!("command.{a}"))
                                    .unwrap_or(Tmpl::Literal(String::new())),
                            );
                        }
                    }
                    let env = env_keys
                        .iter()
                        .filter_map(|k| get(&mut take, &format!("env.{k}")).map(|t| (k.clone(), t)))
                        .collect();
                    let process = ProcessAction {
                        argv,
                        stdin: get_if(&mut take, def.stdin.is_some(), "stdin"),
                        cwd: get_if(&mut take, def.cwd.is_some(), "cwd"),
                        env,
                        ok_codes,
                    };
                    if shell {
                        Action::Shell(process)
                    } else {
                        Action::Command(process)
                    }
                }
                Some(PendingAction::Prompt { model }) => Action::Prompt {
                    prompt: get(&mut take, "prompt").unwrap_or(Tmpl::Literal(String::new())),
                    system: get(&mut take, "system"),
                    model,
                },
                Some(PendingAction::Template) => Action::Template(
                    get(&mut take, "template").unwrap_or(Tmpl::Literal(String::new())),
                ),
                Some(PendingAction::Uses { builtin }) => Action::Uses {
                    builtin,
                    with: build_with(
                        &mut take,
                        &format!("value:{prefix}with"),
                        &Value::Object(def.with.clone().unwrap_or_default().into_iter().collect()),
                    ),
                },
                Some(PendingAction::Workflow { workflow }) => Action::Workflow {
                    workflow,
                    with: def
                        .with
                        .clone()
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| {
                            let tree =
                                build_with(&mut take, &format!("value:{prefix}with.{k}"), &v);
                            (k, tree)
                        })
                        .collect(),
                },
            };
            let schema = match &stage_schemas[i] {
                SchemaOf::Known(schema) => Some(schema.clone()),
                _ => None,
            }
            .filter(|_| {
                def.output
                    .as_ref()
                    .and_then(|o| o.schema.as_ref())
                    .is_some()
            });
            let format = def
                .output
                .as_ref()
                .map(|o| o.format)
                .unwrap_or(match &action {
                    Action::Uses { .. } | Action::Workflow { .. } => OutputFormat::Json,
                    _ => OutputFormat::Text,
                });
            let mut asserts = Vec::new();
            for a in 0..def.assert.len() {
                if let Some(that) = take(&format!("{prefix}assert.{a}.that")) {
                    asserts.push((that, take(&format!("{prefix}assert.{a}.message"))));
                }
            }
            let set_state = def
                .set_state
                .keys()
                .filter_map(|k| {
                    take(&format!("value:{prefix}set_state.{k}")).map(|t| (k.clone(), t))
                })
                .collect();
            let cache = def.cache.as_ref().and_then(|c| match &**c {
                CacheDef::Enabled(false) => None,
                CacheDef::Enabled(true) => Some(CacheSpec {
                    key: None,
                    ttl: None,
                }),
                CacheDef::Keyed(k) => Some(CacheSpec {
                    key: take(&[prefix.as_str(), "cache.key"].concat()),
                    ttl: k
                        .ttl
                        .as_deref()
                        .and_then(|t| template::functions::parse_duration(t).ok()),
                }),
            });
            stages.push(Stage {
                id: id.clone(),
                index: i,
                def: def.clone(),
                action,
                deps: deps[i].iter().copied().collect(),
                if_: get_if(&mut take, def.if_.is_some(), "if"),
                exit_if: get_if(&mut take, def.exit_if.is_some(), "exit_if"),
                exit_message: get_if(&mut take, def.exit_message.is_some(), "exit_message"),
                asserts,
                foreach: get_if(&mut take, def.foreach.is_some(), "foreach"),
                format,
                schema,
                output_path: get_if(
                    &mut take,
                    def.output.as_ref().is_some_and(|o| o.path.is_some()),
                    "output.path",
                ),
                set_state,
                cache,
                timeout: def
                    .timeout
                    .as_deref()
                    .and_then(|t| template::functions::parse_duration(t).ok()),
                retries: def.retries.unwrap_or(0),
                retry_backoff: def
                    .retry_backoff
                    .as_deref()
                    .and_then(|t| template::functions::parse_duration(t).ok())
                    .unwrap_or(Duration::from_secs(1)),
                repair: def.repair.unwrap_or(1),
                on_error: def.on_error.unwrap_or_default(),
                definition_hash: definition_hashes.next().unwrap_or_default(),
            });
        }
        let mut dependents = vec![Vec::new(); stages.len()];
        for stage in &stages {
            for &d in &stage.deps {
                dependents[d].push(stage.index);
            }
        }
        let outputs = self
            .file
            .outputs
            .keys()
            .filter_map(|k| take(&format!("value:outputs.{k}")).map(|t| (k.clone(), t)))
            .collect();
        let child_env = self
            .file
            .workflow
            .child_env
            .keys()
            .filter_map(|k| take(&format!("workflow.child_env.{k}")).map(|t| (k.clone(), t)))
            .collect();
        let writes = (0..self.file.workflow.writes.len())
            .filter_map(|i| take(&format!("workflow.writes.{i}")))
            .collect();
        let lock = match &self.file.workflow.lock {
            Some(lock) => Some(CheckedLock {
                path: take("workflow.lock.path")?,
                busy: lock.busy,
                stale_after: lock
                    .stale_after
                    .as_deref()
                    .and_then(|t| template::functions::parse_duration(t).ok()),
                message: take("workflow.lock.message"),
            }),
            None => None,
        };
        Some(Parts {
            stages,
            order,
            dependents,
            outputs,
            child_env,
            writes,
            lock,
        })
    }

    fn check_inputs(&mut self) {
        for (name, decl) in &self.file.inputs {
            if let Some(default) = &decl.default {
                if !decl.kind.admits(default) {
                    self.error(
                        format!(
                            "the default of input `{name}` is {}, but its type is {}",
                            json_type(default),
                            decl.kind.name()
                        ),
                        &format!("/inputs/{}/default", pointer_segment(name)),
                    );
                }
            }
        }
    }

    fn unknown_stage(&mut self, name: &str, pointer: &str, ids: &[String]) {
        if let Some(origin) = self.raw.disabled.get(name) {
            let source = &self.raw.sources[origin.source()];
            let (line, _) = source.line_col(origin.key().start);
            self.error(
                format!(
                    "stage `{name}` is disabled by {}:{line}",
                    source.path.display()
                ),
                pointer,
            )
            .help = Some(format!("remove the reference to `{name}`, or re-enable it"));
            return;
        }
        let help = did_you_mean(name, ids.iter().map(String::as_str));
        self.error(format!("unknown stage `{name}`"), pointer).help = help;
    }

    fn diag_at(&mut self, at: &At, source: &str, needle: &str, message: String) {
        let diagnostic = match at {
            At::Pointer(pointer) => {
                let location = self.raw.locate(pointer).map(|l| narrow(l, source, needle));
                Diagnostic::error(message).at_opt(location)
            }
            At::File(file) => {
                let span = find_span(&file.text, needle).unwrap_or(0..0);
                Diagnostic::error(message).at(file, span)
            }
        };
        self.diags.push(diagnostic);
    }

    /// `stages.X.output.<path>` (or `output.<path>` in X's own predicates) against what X can
    /// produce; the error points at the first segment of the path.
    fn check_output_path(
        &mut self,
        schema: &SchemaOf,
        path: &[&str],
        stage: &str,
        at: &At,
        source: &str,
        reference: &str,
    ) {
        if let Err((message, help)) = schema.check_path(path, stage) {
            self.diag_at(
                at,
                source,
                path.first().copied().unwrap_or(reference),
                message,
            );
            self.diags.last_mut().expect("pushed").help = help;
        }
    }

    fn pending_text(&mut self, name: String, source: &str, at: At) {
        self.sources.push(Pending {
            name,
            source: source.to_string(),
            native: false,
            at,
        });
    }

    /// A template whose value is kept native when it is a single expression.
    fn pending_value(&mut self, name: String, source: &str, at: At) {
        self.sources.push(Pending {
            name: format!("value:{name}"),
            source: source.to_string(),
            native: false,
            at,
        });
    }

    fn pending_expr(&mut self, name: String, source: &str, at: At) {
        self.sources.push(Pending {
            name,
            source: source.to_string(),
            native: true,
            at,
        });
    }

    fn template_ref(&mut self, name: String, tref: &TemplateRef, pointer: &str) {
        match tref {
            TemplateRef::Inline(inline) => {
                self.pending_text(
                    name,
                    &inline.inline,
                    At::Pointer(format!("{pointer}/inline")),
                );
            }
            TemplateRef::File(path) => {
                match self
                    .search
                    .find_file(&self.raw.library, Shelf::Templates, path)
                {
                    Some(file) => {
                        let source = file.text.to_string();
                        self.pending_text(name, &source, At::File(file));
                    }
                    None => {
                        self.error(format!("template `{path}` not found"), pointer).help = Some(format!(
                            "templates are looked up under `templates/` in {} and along the search path; for inline text write {{ inline = \"...\" }}",
                            self.raw.library.display()
                        ));
                    }
                }
            }
        }
    }

    fn gather_stage(
        &mut self,
        id: &str,
        def: &StageDef,
        visiting: &mut Vec<String>,
    ) -> Option<PendingAction> {
        let sp = stage_pointer(id);
        let prefix = format!("stages.{id}.");
        let has = |key: &str| def.has(key);
        let actions: Vec<&str> = ACTION_KEYS.iter().copied().filter(|k| has(k)).collect();
        if actions.len() > 1 {
            self.error_key(
                format!(
                    "stage `{id}` has {} actions ({}); a stage has one action, or none",
                    actions.len(),
                    actions.join(", ")
                ),
                &format!("{sp}/{}", actions[1]),
            )
            .help = Some("split it into stages ordered with `after`".into());
        }
        let p = |k: &str| format!("{sp}/{k}");
        if let Some(source) = &def.if_ {
            self.stage_source(id, &["if"], "", source, Kind::Expr);
        }
        if let Some(source) = &def.exit_if {
            self.stage_source(id, &["exit_if"], "#output", source, Kind::Expr);
        }
        if let Some(source) = &def.exit_message {
            self.stage_source(id, &["exit_message"], "#output", source, Kind::Text);
        }
        if def.exit_message.is_some()
            && def.exit_if.is_none()
            && def.on_error != Some(OnError::Exit)
        {
            self.diags.push(
                Diagnostic::warning(format!("stage `{id}` has `exit_message` but no `exit_if`"))
                    .at_opt(self.raw.locate_key(&p("exit_message"))),
            );
        }
        for (a, assertion) in def.assert.iter().enumerate() {
            let a = a.to_string();
            self.stage_source(
                id,
                &["assert", &a, "that"],
                "#output",
                &assertion.that,
                Kind::Expr,
            );
            if let Some(message) = &assertion.message {
                self.stage_source(
                    id,
                    &["assert", &a, "message"],
                    "#output",
                    message,
                    Kind::Text,
                );
            }
        }
        if let Some(source) = &def.foreach {
            self.stage_source(id, &["foreach"], "", source, Kind::Expr);
        } else {
            for (key, set) in [
                ("concurrency", def.concurrency.is_some()),
                ("on_item_error", def.on_item_error.is_some()),
            ] {
                if set {
                    self.diags.push(
                        Diagnostic::warning(format!("stage `{id}` has `{key}` but no `foreach`"))
                            .at_opt(self.raw.locate_key(&p(key))),
                    );
                }
            }
        }
        let item = if def.foreach.is_some() { "#item" } else { "" };
        if let Some(output) = &def.output {
            if let Some(path) = &output.path {
                self.stage_source(id, &["output", "path"], item, path, Kind::Text);
                if self.file.workflow.writes.is_empty() {
                    self.error(format!("stage `{id}` writes its output to a file, but `[workflow] writes` is empty"), &p("output/path"))
                        .help = Some("list the folders the workflow may write in `[workflow] writes`".into());
                }
            }
            if let Some(schema_name) = &output.schema {
                self.load_schema(schema_name, &p("output/schema"));
                if output.format != OutputFormat::Json {
                    self.error(
                        format!("stage `{id}` has an output schema but its format is not json"),
                        &p("output/schema"),
                    )
                    .help = Some("set `output = { format = \"json\", schema = ... }`".into());
                }
            }
        }
        for (key, source) in &def.set_state {
            self.stage_source(id, &["set_state", key], "#output", source, Kind::Value);
        }
        if let Some(CacheDef::Keyed(keyed)) = def.cache.as_deref() {
            if let Some(key) = &keyed.key {
                self.stage_source(id, &["cache", "key"], item, key, Kind::Text);
            }
            if let Some(ttl) = &keyed.ttl {
                self.duration(ttl, &p("cache/ttl"));
            }
        }
        for (key, pointer) in [
            (&def.timeout, "timeout"),
            (&def.retry_backoff, "retry_backoff"),
        ] {
            if let Some(text) = key {
                self.duration(text, &p(pointer));
            }
        }
        let process_keys = ["stdin", "cwd", "env", "ok_codes"];
        let prompt_keys = ["model", "system", "temperature", "max_tokens", "repair"];
        let action = actions.first().copied();
        let stray = |keys: &[&'static str], allowed: &[&str]| -> Vec<&'static str> {
            if action.is_some_and(|a| allowed.contains(&a)) {
                return Vec::new();
            }
            keys.iter().copied().filter(|k| has(k)).collect()
        };
        let mut strays = stray(&process_keys, &["command", "shell"]);
        strays.extend(stray(&prompt_keys, &["prompt"]));
        strays.extend(stray(&["with"], &["uses", "workflow"]));
        for key in strays {
            self.error_key(
                format!(
                    "`{key}` does not apply to a stage whose action is {}",
                    action.map_or("none".to_string(), |a| format!("`{a}`"))
                ),
                &p(key),
            );
        }

        let pending = match action {
            None => PendingAction::None,
            Some("command") | Some("shell") => {
                let shell = action == Some("shell");
                let mut argc = 0;
                if shell {
                    if let Some(script) = &def.shell {
                        // The `.sh` name turns on shell-quoting of every printed value.
                        self.stage_source(
                            id,
                            &["shell"],
                            &format!("{item}.sh"),
                            script,
                            Kind::Text,
                        );
                    }
                } else if let Some(argv) = &def.command {
                    if argv.is_empty() {
                        self.error(
                            format!("stage `{id}` has an empty `command`"),
                            &p("command"),
                        );
                    }
                    argc = argv.len();
                    for (a, arg) in argv.iter().enumerate() {
                        self.stage_source(id, &["command", &a.to_string()], item, arg, Kind::Text);
                    }
                }
                if let Some(stdin) = &def.stdin {
                    self.stage_source(id, &["stdin"], item, stdin, Kind::Text);
                }
                if let Some(cwd) = &def.cwd {
                    self.stage_source(id, &["cwd"], item, cwd, Kind::Text);
                }
                for (k, v) in &def.env {
                    self.stage_source(id, &["env", k], item, v, Kind::Text);
                }
                PendingAction::Process {
                    shell,
                    argc,
                    env_keys: def.env.keys().cloned().collect(),
                    ok_codes: def.ok_codes.clone().unwrap_or_else(|| vec![0]),
                }
            }
            Some("prompt") => {
                if let Some(prompt) = &def.prompt {
                    self.template_ref(format!("{prefix}prompt{item}"), prompt, &p("prompt"));
                }
                if let Some(system) = &def.system {
                    self.template_ref(format!("{prefix}system{item}"), system, &p("system"));
                }
                let model = match &def.model {
                    Some(model) => model.clone(),
                    None => {
                        self.error_key(format!("prompt stage `{id}` names no `model`"), &sp)
                            .help = Some(
                            "add `model = \"haiku\"` (an alias from the model configuration)"
                                .into(),
                        );
                        String::new()
                    }
                };
                PendingAction::Prompt { model }
            }
            Some("template") => {
                if let Some(template) = &def.template {
                    self.template_ref(format!("{prefix}template{item}"), template, &p("template"));
                }
                PendingAction::Template
            }
            Some("uses") => {
                let name = def.uses.clone().unwrap_or_default();
                let Some(builtin) =
                    builtins::lookup(&name).or_else(|| crate::run::locks::lookup(&name))
                else {
                    let mut names: Vec<&str> = builtins::all().iter().map(|b| b.name).collect();
                    names.push(crate::run::locks::LOCK_ACQUIRE);
                    let help = did_you_mean(&name, names.iter().copied())
                        .unwrap_or_else(|| format!("built-ins: {}", names.join(", ")));
                    self.error(format!("unknown built-in `{name}`"), &p("uses"))
                        .help = Some(help);
                    return Some(PendingAction::None);
                };
                self.check_with(id, builtin, def);
                if let Some(with) = &def.with {
                    for (k, v) in with.iter() {
                        self.gather_with(
                            &format!("{prefix}with.{k}{item}"),
                            v,
                            &p(&format!("with/{}", pointer_segment(k))),
                        );
                    }
                }
                if builtin.writes && self.file.workflow.writes.is_empty() {
                    self.error(format!("stage `{id}` uses `{}`, which writes, but `[workflow] writes` is empty", builtin.name), &p("uses"))
                        .help = Some("list the folders the workflow may write in `[workflow] writes`".into());
                }
                PendingAction::Uses { builtin }
            }
            Some("workflow") => {
                let name = def.workflow.clone().unwrap_or_default();
                if visiting.contains(&name) {
                    self.error(
                        format!(
                            "workflow `{name}` calls itself: {} -> {name}",
                            visiting.join(" -> ")
                        ),
                        &p("workflow"),
                    );
                    return Some(PendingAction::None);
                }
                let sub = load::load(self.search, &name, self.cwd)
                    .and_then(|raw| check_inner(raw, self.search, self.cwd, visiting));
                let workflow = match sub {
                    Ok(workflow) => Arc::new(workflow),
                    Err(diags) => {
                        let count = diags.iter().filter(|d| d.is_error()).count();
                        self.error(
                            format!("sub-workflow `{name}` does not check ({count} error(s))"),
                            &p("workflow"),
                        );
                        self.diags.extend(diags);
                        return Some(PendingAction::None);
                    }
                };
                let given = def.with.clone().unwrap_or_default();
                for key in given.keys() {
                    if !workflow.file.inputs.contains_key(key) {
                        let help =
                            did_you_mean(key, workflow.file.inputs.keys().map(String::as_str));
                        self.error_key(
                            format!("workflow `{name}` has no input `{key}`"),
                            &p(&format!("with/{}", pointer_segment(key))),
                        )
                        .help = help;
                    }
                }
                for (key, decl) in &workflow.file.inputs {
                    if decl.default.is_none() && !given.contains_key(key) {
                        self.error_key(
                            format!("workflow `{name}` needs input `{key}`"),
                            &p("workflow"),
                        );
                    }
                }
                for (k, v) in given.iter() {
                    self.gather_with(
                        &format!("{prefix}with.{k}{item}"),
                        v,
                        &p(&format!("with/{}", pointer_segment(k))),
                    );
                }
                PendingAction::Workflow { workflow }
            }
            Some(_) => PendingAction::None,
        };
        Some(pending)
    }

    /// Queue one template of stage `id`: `path` is where it sits in the stage
    /// (`["assert", "0", "that"]`), which gives both its name and its pointer; `mark` says what
    /// it may read (`#item`, `#output`, or nothing).
    fn stage_source(&mut self, id: &str, path: &[&str], mark: &str, source: &str, kind: Kind) {
        let name = format!("stages.{id}.{}{mark}", path.join("."));
        let segments: Vec<String> = path.iter().map(|s| pointer_segment(s)).collect();
        let at = At::Pointer(format!("{}/{}", stage_pointer(id), segments.join("/")));
        match kind {
            Kind::Text => self.pending_text(name, source, at),
            Kind::Value => self.pending_value(name, source, at),
            Kind::Expr => self.pending_expr(name, source, at),
        }
    }

    fn gather_with(&mut self, name: &str, value: &Value, pointer: &str) {
        match value {
            Value::String(source) => {
                self.pending_value(name.to_string(), source, At::Pointer(pointer.to_string()))
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.gather_with(&format!("{name}.{i}"), item, &format!("{pointer}/{i}"));
                }
            }
            Value::Object(map) => {
                for (k, v) in map {
                    self.gather_with(
                        &format!("{name}.{k}"),
                        v,
                        &format!("{pointer}/{}", pointer_segment(k)),
                    );
                }
            }
            _ => {}
        }
    }

    /// `with` against the built-in's schema: unknown and missing keys, and literal values.
    fn check_with(&mut self, id: &str, builtin: &Builtin, def: &StageDef) {
        let schema = (builtin.with_schema)();
        let sp = stage_pointer(id);
        let with = def.with.clone().unwrap_or_default();
        let properties = schema
            .get("properties")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for key in with.keys() {
            if !properties.contains_key(key) {
                let help = did_you_mean(key, properties.keys().map(String::as_str)).or_else(|| {
                    Some(format!(
                        "`{}` takes: {}",
                        builtin.name,
                        properties.keys().cloned().collect::<Vec<_>>().join(", ")
                    ))
                });
                self.error_key(
                    format!("`{}` has no argument `{key}`", builtin.name),
                    &format!("{sp}/with/{}", pointer_segment(key)),
                )
                .help = help;
            }
        }
        for required in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(required) = required.as_str() else {
                continue;
            };
            if !with.contains_key(required) {
                let pointer = if def.with.is_some() {
                    format!("{sp}/with")
                } else {
                    format!("{sp}/uses")
                };
                self.error(
                    format!("`{}` needs the argument `{required}`", builtin.name),
                    &pointer,
                );
            }
        }
        for (key, value) in with.iter() {
            let Some(property) = properties.get(key) else {
                continue;
            };
            if value.as_str().is_some_and(compiled::has_syntax) {
                continue;
            }
            if let Ok(validator) = jsonschema::validator_for(property) {
                if let Some(error) = validator.iter_errors(value).next() {
                    self.error(
                        format!("argument `{key}` of `{}`: {error}", builtin.name),
                        &format!("{sp}/with/{}", pointer_segment(key)),
                    );
                }
            }
        }
    }

    fn duration(&mut self, text: &str, pointer: &str) {
        if let Err(error) = template::functions::parse_duration(text) {
            self.error(error, pointer).help =
                Some("durations look like \"500ms\", \"30s\", \"10m\", \"2h\", \"7d\"".into());
        }
    }

    fn load_schema(&mut self, name: &str, pointer: &str) -> Option<Arc<Schema>> {
        if let Some(cached) = self.schemas.get(name) {
            return cached.clone();
        }
        let result = match self
            .search
            .find_file(&self.raw.library, Shelf::Schemas, name)
        {
            None => {
                self.error(format!("schema `{name}` not found"), pointer)
                    .help = Some(format!(
                    "schemas are looked up under `schemas/` in {} and along the search path",
                    self.raw.library.display()
                ));
                None
            }
            Some(file) => match Schema::compile(&file) {
                Ok(schema) => Some(Arc::new(schema)),
                Err(diagnostic) => {
                    self.diags.push(*diagnostic);
                    self.error(format!("schema `{name}` does not compile"), pointer);
                    None
                }
            },
        };
        self.schemas.insert(name.to_string(), result.clone());
        result
    }

    fn schema_of(&mut self, action: Option<&PendingAction>, def: &StageDef) -> SchemaOf {
        if def.foreach.is_some() {
            return SchemaOf::List;
        }
        if let Some(name) = def.output.as_ref().and_then(|o| o.schema.as_ref()) {
            return match self.schemas.get(name).cloned().flatten() {
                Some(schema) => SchemaOf::Known(schema),
                None => SchemaOf::Unknown,
            };
        }
        let format = def.output.as_ref().map(|o| o.format);
        match (action, format) {
            (Some(PendingAction::Uses { builtin }), _) => {
                match Schema::from_value((builtin.output_schema)(), builtin.name) {
                    Ok(schema) => SchemaOf::Known(Arc::new(schema)),
                    Err(_) => SchemaOf::Unknown,
                }
            }
            (Some(PendingAction::Workflow { workflow }), _) => {
                SchemaOf::Keys(workflow.file.outputs.keys().cloned().collect())
            }
            (_, Some(OutputFormat::Json)) => SchemaOf::Unknown,
            (_, Some(OutputFormat::Lines)) => SchemaOf::List,
            (Some(PendingAction::None), _) => SchemaOf::Nothing,
            _ => SchemaOf::Text,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn check_reference(
        &mut self,
        own: Option<usize>,
        name: &str,
        context: Context,
        at: &At,
        source: &str,
        reference: &str,
        index: &HashMap<&str, usize>,
        ids: &[String],
        schemas: &[SchemaOf],
    ) -> Option<usize> {
        let parts: Vec<&str> = reference.split('.').collect();
        let root = parts[0];
        let stage_name = own.map(|i| ids[i].as_str()).unwrap_or("");
        match root {
            "inputs" => {
                if let Some(input) = parts.get(1) {
                    if !self.file.inputs.contains_key(*input) {
                        let help = did_you_mean(input, self.file.inputs.keys().map(String::as_str));
                        self.diag_at(at, source, reference, format!("unknown input `{input}`"));
                        self.diags.last_mut().expect("pushed").help =
                            help.or(Some("declare it under `[inputs]`".into()));
                    }
                }
                None
            }
            "env" => {
                if let Some(var) = parts.get(1) {
                    if !self.file.workflow.env.iter().any(|e| e == var) {
                        self.diag_at(
                            at,
                            source,
                            reference,
                            format!("environment variable `{var}` is not in `[workflow] env`"),
                        );
                        self.diags.last_mut().expect("pushed").help = Some(format!(
                            "templates read only the variables listed in `[workflow] env`; add \"{var}\" there{}",
                            did_you_mean(var, self.file.workflow.env.iter().map(String::as_str)).map(|h| format!(", or {h}")).unwrap_or_default()
                        ));
                    }
                }
                None
            }
            "stages" => {
                let target = parts.get(1)?;
                let Some(&target_index) = index.get(*target) else {
                    if self.raw.disabled.contains_key(*target) {
                        let origin = &self.raw.disabled[*target];
                        let file = &self.raw.sources[origin.source()];
                        let (line, _) = file.line_col(origin.key().start);
                        self.diag_at(
                            at,
                            source,
                            reference,
                            format!(
                                "stage `{target}` is disabled by {}:{line}",
                                file.path.display()
                            ),
                        );
                    } else {
                        let help = did_you_mean(target, ids.iter().map(String::as_str));
                        self.diag_at(at, source, reference, format!("unknown stage `{target}`"));
                        self.diags.last_mut().expect("pushed").help = help;
                    }
                    return None;
                };
                match parts.get(2) {
                    None | Some(&"status") | Some(&"error") => {}
                    Some(&"output") => {
                        self.check_output_path(
                            &schemas[target_index],
                            &parts[3..],
                            target,
                            at,
                            source,
                            reference,
                        );
                    }
                    Some(other) => {
                        self.diag_at(
                            at,
                            source,
                            reference,
                            format!("`stages.{target}` has `output`, `status` and `error`, not `{other}`"),
                        );
                        self.diags.last_mut().expect("pushed").help =
                            did_you_mean(other, ["output", "status", "error"]);
                    }
                }
                Some(target_index)
            }
            "output" => {
                if context != Context::Output {
                    self.diag_at(at, source, reference, "`output` is only bound in `exit_if`, `exit_message`, `assert` and `set_state`".to_string());
                    self.diags.last_mut().expect("pushed").help = own.map(|_| format!("read another stage's result as `stages.<id>.output`; this is stage `{stage_name}`"));
                } else if let Some(own) = own {
                    self.check_output_path(
                        &schemas[own],
                        &parts[1..],
                        stage_name,
                        at,
                        source,
                        reference,
                    );
                }
                None
            }
            "item" | "index" => {
                if context != Context::Item {
                    let message = match own {
                        Some(i) if self.file.stages[i].foreach.is_some() => format!(
                            "`{root}` is bound in the action of a `foreach` stage, not in `{}`",
                            name.rsplit('.').next().unwrap_or(name)
                        ),
                        _ => format!("`{root}` is only bound in a stage with `foreach`"),
                    };
                    self.diag_at(at, source, reference, message);
                }
                None
            }
            "state" | "run" => None,
            // Functions and globals of the template environment (`now`, `range`, ...).
            other if self.globals.contains(other) => None,
            // Bound inside the template itself (a `set` or `for` the analysis did not follow,
            // such as a `set` inside an `if`).
            other if bound_locally(source, other) => None,
            other => {
                let roots = compiled::known_roots();
                let help = did_you_mean(other, roots.iter().copied()).unwrap_or_else(|| {
                    "templates see inputs, env, stages, state, run, item, index and output".into()
                });
                self.diag_at(at, source, other, format!("undefined variable `{other}`"));
                self.diags.last_mut().expect("pushed").help = Some(help);
                None
            }
        }
    }
}

/// How a queued template source is compiled.
#[derive(Clone, Copy)]
enum Kind {
    /// Rendered to text.
    Text,
    /// Rendered to text, or kept native when it is a single `{{ expression }}`.
    Value,
    /// A bare expression.
    Expr,
}

enum PendingAction {
    None,
    Process {
        shell: bool,
        argc: usize,
        env_keys: Vec<String>,
        ok_codes: Vec<i32>,
    },
    Prompt {
        model: String,
    },
    Template,
    Uses {
        builtin: &'static Builtin,
    },
    Workflow {
        workflow: Arc<Workflow>,
    },
}

/// What is statically known of a stage's output.
enum SchemaOf {
    Known(Arc<Schema>),
    Keys(Vec<String>),
    Text,
    List,
    Nothing,
    Unknown,
}

type PathError = (String, Option<String>);

impl SchemaOf {
    fn check_path(&self, path: &[&str], stage: &str) -> Result<(), PathError> {
        let Some(first) = path.first() else {
            return Ok(());
        };
        match self {
            SchemaOf::Known(schema) => schema.check_path(path),
            SchemaOf::Keys(keys) => {
                if keys.iter().any(|k| k == first) {
                    Ok(())
                } else {
                    Err((
                        format!("the sub-workflow of stage `{stage}` has no output `{first}`"),
                        did_you_mean(first, keys.iter().map(String::as_str)),
                    ))
                }
            }
            SchemaOf::Text => Err((
                format!("the output of stage `{stage}` is text; it has no field `{first}`"),
                Some(
                    "give the stage `output = { format = \"json\", schema = ... }` to read fields"
                        .into(),
                ),
            )),
            SchemaOf::List => Err((
                format!("the output of stage `{stage}` is a list; it has no field `{first}`"),
                Some("index it (`[0]`) or loop over it".into()),
            )),
            SchemaOf::Nothing => Err((
                format!("stage `{stage}` has no action, so no output; it has no field `{first}`"),
                None,
            )),
            SchemaOf::Unknown => Ok(()),
        }
    }
}

fn build_with(take: &mut dyn FnMut(&str) -> Option<Tmpl>, name: &str, value: &Value) -> WithTree {
    match value {
        Value::String(_) => match take(name) {
            Some(tmpl) => WithTree::Template(tmpl),
            None => WithTree::Literal(value.clone()),
        },
        Value::Array(items) => WithTree::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| build_with(take, &format!("{name}.{i}"), item))
                .collect(),
        ),
        Value::Object(map) => WithTree::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), build_with(take, &format!("{name}.{k}"), v)))
                .collect(),
        ),
        other => WithTree::Literal(other.clone()),
    }
}

/// Whether a template binds `name` itself with `{% set %}`, `{% for %}` or `{% macro %}`.
fn bound_locally(source: &str, name: &str) -> bool {
    let pattern = format!(
        r"\{{%-?\s*(?:set|for|macro)\s+(?:[\w\s,(]*[\s,(])?{}\b",
        regex::escape(name)
    );
    Regex::new(&pattern).is_ok_and(|re| re.is_match(source))
}

/// A pending template's name without its context marks.
fn clean_name(name: &str) -> String {
    if !name.contains('#') {
        return name.to_string();
    }
    name.replace("#output", "").replace("#item", "")
}

fn context_of(name: &str) -> Context {
    if name.contains("#output") {
        Context::Output
    } else if name.contains("#item") {
        Context::Item
    } else {
        Context::Plain
    }
}

fn stage_pointer(id: &str) -> String {
    format!("/stages/{}", pointer_segment(id))
}

fn suggest_id(id: &str) -> String {
    let mut out: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if !out.starts_with(|c: char| c.is_ascii_lowercase()) {
        out.insert(0, 's');
    }
    out
}

/// One cycle through `members`, as `a -> b -> a`.
fn cycle_path(members: &[usize], deps: &[BTreeSet<usize>], ids: &[String]) -> String {
    let set: HashSet<usize> = members.iter().copied().collect();
    let start = members[0];
    let mut path = vec![start];
    let mut current = start;
    let mut seen = HashSet::new();
    seen.insert(start);
    loop {
        let next = deps[current]
            .iter()
            .copied()
            .find(|d| set.contains(d) && (*d == start || !seen.contains(d)));
        match next {
            Some(next) if next == start => break,
            Some(next) => {
                path.push(next);
                seen.insert(next);
                current = next;
            }
            None => break,
        }
    }
    // deps point backwards (a stage depends on its predecessor); print in run order.
    path.reverse();
    let mut names: Vec<&str> = path.iter().map(|i| ids[*i].as_str()).collect();
    let missing: Vec<&str> = members
        .iter()
        .filter(|m| !path.contains(m))
        .map(|i| ids[*i].as_str())
        .collect();
    names.push(names[0]);
    let mut text = names.join(" -> ");
    if !missing.is_empty() {
        text.push_str(&format!(" (also in the cycle: {})", missing.join(", ")));
    }
    text
}

/// Narrow a location to the first occurrence of `needle` inside the located value.
fn narrow(location: Location, _source: &str, needle: &str) -> Location {
    let text = &location.source.text[location.span.clone()];
    match find_span(text, needle) {
        Some(found) => Location {
            span: location.span.start + found.start..location.span.start + found.end,
            source: location.source,
        },
        None => location,
    }
}

fn find_span(text: &str, needle: &str) -> Option<std::ops::Range<usize>> {
    if needle.is_empty() {
        return None;
    }
    let last = needle.rsplit('.').next().unwrap_or(needle);
    text.find(needle)
        .map(|start| start..start + needle.len())
        .or_else(|| {
            let dotted = format!(".{last}");
            text.find(&dotted)
                .map(|start| start + 1..start + dotted.len())
        })
        .or_else(|| text.find(last).map(|start| start..start + last.len()))
}

fn template_error(
    raw: &RawWorkflow,
    at: &At,
    source: &str,
    error: &minijinja::Error,
) -> Diagnostic {
    let detail = error
        .detail()
        .map(str::to_string)
        .unwrap_or_else(|| error.kind().to_string());
    let message = format!("template does not compile: {detail}");
    let line = error.line();
    match at {
        At::File(file) => {
            let span = line_span(&file.text, line.unwrap_or(1));
            Diagnostic::error(message).at(file, span)
        }
        At::Pointer(pointer) => {
            let location = raw.locate(pointer).map(|location| {
                // The template's own line inside the TOML string.
                let in_value = line_span(source, line.unwrap_or(1));
                let value_text = &location.source.text[location.span.clone()];
                let needle = &source[in_value.clone()];
                match value_text.find(needle.trim()) {
                    Some(offset) if !needle.trim().is_empty() => Location {
                        span: location.span.start + offset
                            ..location.span.start + offset + needle.trim().len(),
                        source: location.source,
                    },
                    _ => location,
                }
            });
            Diagnostic::error(message).at_opt(location)
        }
    }
}

fn line_span(text: &str, line: usize) -> std::ops::Range<usize> {
    let mut start = 0;
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            return start..start + l.trim_end().len();
        }
        start += l.len();
    }
    0..0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> Value {
        let source = SourceFile::new("w.toml", text);
        load::parse_document(&source, 0, true)
            .expect("valid TOML")
            .0
    }

    fn schema_errors(doc: &Value) -> usize {
        let validator = jsonschema::validator_for(&crate::format::workflow_schema())
            .expect("the format schema compiles");
        validator.iter_errors(doc).count()
    }

    /// Whether `check` would skip the schema for this document.
    fn reads_cleanly(doc: &Value) -> bool {
        WorkflowFile::deserialize(doc).is_ok_and(|file| within_bounds(&file))
    }

    #[test]
    fn a_document_that_reads_cleanly_is_valid_against_the_schema() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/check/workflows");
        let mut texts: Vec<String> = std::fs::read_dir(fixtures)
            .expect("the check fixtures")
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .collect();
        texts.extend(
            [
                "[stages.a]\nforeach = \"inputs.xs\"\nconcurrency = 0\ncommand = [\"true\"]",
                "[stages.a]\nforeach = \"inputs.xs\"\nconcurrency = 2\ncommand = [\"true\"]",
                "[stages.a]\nretries = -1\ncommand = [\"true\"]",
                "[stages.a]\nmax_tokens = 1.5\nprompt = \"p\"",
                "[stages.a]\ncache = { key = \"k\", ttl = 3 }\ncommand = [\"true\"]",
                "[stages.a]\non_error = \"ignore\"\ncommand = [\"true\"]",
                "[workflow]\nlock = { path = \"l\", busy = \"later\" }",
                "[inputs.n]\ntype = \"float\"",
                "[stages.a]\ntemplate = { inline = \"x\", extra = 1 }",
                "[stages.a]\noutput = { format = \"yaml\" }\ntemplate = \"t\"",
                "[stages.a]\nassert = [{ that = \"true\", because = \"x\" }]",
                "[outputs]\nx = 1",
            ]
            .map(String::from),
        );
        let mut clean = 0;
        for text in &texts {
            let Ok((doc, _)) =
                load::parse_document(&SourceFile::new("w.toml", text.as_str()), 0, true)
            else {
                continue;
            };
            if reads_cleanly(&doc) {
                clean += 1;
                assert_eq!(
                    schema_errors(&doc),
                    0,
                    "reads cleanly but is invalid:\n{text}"
                );
            }
        }
        assert!(clean >= 2, "some documents read cleanly");
    }

    #[test]
    fn stages_are_ordered_by_their_dependencies_then_by_the_file() {
        let deps = |edges: &[&[usize]]| -> Vec<BTreeSet<usize>> {
            edges.iter().map(|e| e.iter().copied().collect()).collect()
        };
        // 0 and 2 wait for 3; 1 and 3 wait for nothing.
        assert_eq!(
            in_order_of_the_file(&deps(&[&[3], &[], &[3], &[]])),
            Some(vec![1, 3, 0, 2])
        );
        // Independent stages keep the order they were written in.
        assert_eq!(
            in_order_of_the_file(&deps(&[&[], &[], &[], &[]])),
            Some(vec![0, 1, 2, 3])
        );
        assert_eq!(in_order_of_the_file(&deps(&[&[1], &[2], &[0], &[]])), None);
    }

    #[test]
    fn item_settings_without_foreach_are_warned_about() {
        let dir = tempfile::tempdir().expect("a temp dir");
        std::fs::write(
            dir.path().join("w.toml"),
            "[stages.a]\non_item_error = \"continue\"\ncommand = [\"true\"]\n",
        )
        .expect("write the workflow");
        let engine = crate::Engine::new(&[], dir.path());
        let workflow = engine.load("w.toml").expect("a warning, not an error");
        let messages: Vec<&str> = workflow
            .warnings
            .iter()
            .map(|d| d.message.as_str())
            .collect();
        assert_eq!(messages, ["stage `a` has `on_item_error` but no `foreach`"]);
        assert_eq!(
            workflow.warnings[0]
                .location
                .as_ref()
                .map(|l| l.span.clone()),
            Some(11..24)
        );
    }

    #[test]
    fn zero_concurrency_is_left_to_the_schema() {
        let d = doc("[stages.a]\nforeach = \"inputs.xs\"\nconcurrency = 0\ncommand = [\"true\"]");
        assert!(WorkflowFile::deserialize(&d).is_ok());
        assert!(!reads_cleanly(&d));
        assert!(schema_errors(&d) > 0);
    }

    #[test]
    fn references_belong_to_the_stage_that_wrote_them() {
        // `s1` is a prefix of `s10`: the edge inferred from `s10`'s template must land on `s10`.
        let dir = tempfile::tempdir().expect("a temp dir");
        std::fs::write(
            dir.path().join("w.toml"),
            "[stages.s0]\ncommand = [\"true\"]\n\
             [stages.s1]\ncommand = [\"true\"]\n\
             [stages.s10]\ncommand = [\"echo\", \"{{ stages.s0.output }}\"]\n",
        )
        .expect("write the workflow");
        let engine = crate::Engine::new(&[], dir.path());
        let workflow = engine.load("w.toml").expect("the workflow checks");
        let deps: Vec<(&str, Vec<usize>)> = workflow
            .stages
            .iter()
            .map(|s| (s.id.as_str(), s.deps.clone()))
            .collect();
        assert_eq!(deps, vec![("s0", vec![]), ("s1", vec![]), ("s10", vec![0])]);
    }

    #[test]
    fn names_bound_by_the_template_itself_are_recognised() {
        assert!(bound_locally(
            "{% if x %}{% set total = 1 %}{% endif %}{{ total }}",
            "total"
        ));
        assert!(bound_locally(
            "{%- for a, b in pairs %}{{ b }}{% endfor %}",
            "b"
        ));
        assert!(bound_locally(
            "{% macro row(cell) %}{{ cell }}{% endmacro %}",
            "row"
        ));
        assert!(!bound_locally("{{ total }}", "total"));
        assert!(!bound_locally("{% set subtotal = 1 %}{{ total }}", "total"));
    }
}
