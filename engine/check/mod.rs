//! Check: [`RawWorkflow`] -> [`Workflow`].
//!
//! Validates the document against the format's schema, then its meaning: stage ids, one action
//! per stage, every reference to a stage, input or environment variable, the graph (cycles name
//! every stage in them), templates and expressions compile, `stages.X.output.a.b` paths against
//! X's output schema, schemas compile, built-in arguments against the built-in's schema. Every
//! problem is collected; a `Workflow` exists only when there was no error, so `run` never checks
//! again what was proven here.
//!
//! The passes, in the order they run, one file each:
//!
//! - `format_errors`: the document against the format's schema, when it does not read as typed;
//! - `gather`: every template source queued under its typed [`key::TemplateKey`], and the rules
//!   of a stage that need no template (`with_args` checks a built-in's arguments, `schemas`
//!   finds output schemas);
//! - `write_paths`: paths written without a template against the `[workflow] writes` roots;
//! - `compile`: the queued sources into templates and expressions;
//! - `foreach`: what each `foreach` loops over, typed by the upstream schema or input type;
//! - `references`: every name a template reads, and the edges they add;
//! - `flows` (from `references`): what a template reads through the names it binds, its
//!   regex patterns, orderings across types, unguarded reads of a stage that may be skipped;
//! - `literals`: quoted strings compared with values whose possible values are known, and the
//!   template files a tag loads;
//! - `graph`: the order the stages run in, or the cycles;
//! - `assemble`: the typed [`Stage`]s of the [`Workflow`] (the handoff types, in `workflow`);
//! - `spans`: where a problem inside a template points.

mod assemble;
mod compile;
mod flows;
mod foreach;
mod format_errors;
mod gather;
mod graph;
mod kept;
mod key;
mod late_writes;
mod literals;
mod names;
mod references;
mod schemas;
mod spans;
mod with_args;
mod workflow;
mod write_paths;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use serde::Deserialize;

use crate::diag::{Diagnostic, DiagnosticKind};
use crate::format::WorkflowFile;
use crate::library::SearchPath;
use crate::load::{pointer_segment, RawWorkflow};
use crate::schema::Schema;

use gather::Pending;
pub(crate) use kept::KeptChecks;
use key::{DurationKey, SizeKey};
/// What `stages.X.status` and `run.status` can be, as check compares quoted strings with them
/// (run's tests hold them to the statuses a run gives).
#[cfg(test)]
pub(crate) use literals::{RUN_STATUSES, STAGE_STATUSES};
use schemas::SchemaOf;
pub(crate) use workflow::{
    Action, CacheSpec, CheckedLock, GuardTexts, ProcessAction, ProcessOptions, PromptAction,
    StageExtras, StageText, WithTree, DEFAULT_MAX_OUTPUT,
};
pub use workflow::{Stage, Workflow};

/// Check a loaded workflow. Sub-workflows are loaded and checked through `search`.
pub(crate) fn check(
    raw: RawWorkflow,
    search: &SearchPath,
    cwd: &Path,
) -> Result<Workflow, Vec<Diagnostic>> {
    let mut visiting = Vec::new();
    let shown = raw.name.clone();
    check_inner(raw, search, cwd, &mut visiting, &shown).map_err(in_file_order)
}

/// A workflow being checked, with the sub-workflows it is inside of: the chain a cycle of
/// sub-workflows is found in and named by.
pub(crate) struct Visit {
    /// The file it was read from (resolved, so two names of one file are one workflow).
    file: String,
    /// How it was called: its name or path as written.
    shown: String,
}

/// What a workflow's file is known by in a cycle search: its real path, where it has one.
fn visit_key(raw: &RawWorkflow) -> String {
    let path = &raw.file().path;
    std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.clone())
        .display()
        .to_string()
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
    visiting: &mut Vec<Visit>,
    shown: &str,
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
    if !parsed.as_ref().is_ok_and(format_errors::within_bounds) {
        raw.need_document();
        let rejected = format_errors::validate_format(&raw, &mut diags);
        format_failed = !rejected.is_empty() || diags.iter().any(Diagnostic::is_error);
        for pointer in &rejected {
            format_errors::remove_pointer(&mut raw.doc, pointer);
        }
        parsed = WorkflowFile::deserialize(&raw.doc);
    }
    let mut file: WorkflowFile = match parsed {
        Ok(file) => file,
        Err(_) if format_failed => return Err(diags),
        Err(error) => {
            return Err(vec![Diagnostic::error(DiagnosticKind::InvalidWorkflow(
                error.to_string(),
            ))
            .at(raw.file(), 0..0)]);
        }
    };
    visiting.push(Visit {
        file: visit_key(&raw),
        shown: shown.to_string(),
    });
    let mut checker = Checker {
        raw: &raw,
        file: &file,
        search,
        cwd,
        diags,
        sources: Vec::new(),
        schemas: HashMap::new(),
        globals: HashSet::new(),
        items: Vec::new(),
        durations: HashMap::new(),
        sizes: HashMap::new(),
        unguarded: Vec::new(),
    };
    // Each definition's hash stands alone (its JSON, about a kilobyte a stage, hashed), and so
    // do the files' (a megabyte of text at 10,000 stages): a thread hashes them while the
    // checker reads the templates and references.
    let mut file_hashes = Vec::new();
    let result = std::thread::scope(|scope| {
        let hashing = scope.spawn(|| (definition_hashes(&file), hashes_of_files(&raw)));
        checker.run(visiting, || {
            let (definitions, files) = hashing.join().unwrap_or_default();
            file_hashes = files;
            definitions
        })
    });
    visiting.pop();
    let Checker {
        mut diags,
        schemas,
        durations,
        sizes,
        ..
    } = checker;
    // The definitions go to the assembly, which frees each once its stage is built: the two
    // together were `check`'s peak memory (6 MB each at 10,000 stages).
    let parts = result
        .filter(|_| !format_failed && !diags.iter().any(Diagnostic::is_error))
        .and_then(|unassembled| {
            let definitions = std::mem::take(&mut file.stages);
            assemble::assemble(
                &file,
                definitions,
                unassembled.actions,
                unassembled.pendings,
                unassembled.templates,
                &unassembled.deps,
                unassembled.order,
                &schemas,
                unassembled.definition_hashes,
                &durations,
                &sizes,
            )
        });
    match parts {
        Some(parts) => {
            let warnings = std::mem::take(&mut diags);
            // The merged document has been read into `file`; locations come from `origins`.
            // Freed here (beside the run, for a large one), it does not add to a long run's peak
            // memory.
            let mut raw = raw;
            let doc = std::mem::take(&mut raw.doc);
            let WorkflowFile {
                workflow, inputs, ..
            } = file;
            if parts.stages.len() > 1_000 {
                std::thread::spawn(move || drop(doc));
            } else {
                drop(doc);
            }
            Ok(Workflow {
                name: raw.name.clone(),
                description: workflow.description,
                inputs,
                env: workflow.env,
                always_exit_zero: workflow.always_exit_zero,
                hook: workflow.hook,
                records: workflow.records,
                budget_usd: workflow.budget_usd,
                max_output: parts.max_output,
                raw,
                stages: parts.stages,
                order: parts.order,
                dependents: parts.dependents,
                outputs: parts.outputs,
                child_env: parts.child_env,
                writes: parts.writes,
                lock: parts.lock,
                records_project: parts.records_project,
                records_keep_size: parts.records_keep_size,
                records_max_size: parts.records_max_size,
                file_hashes,
                warnings,
            })
        }
        _ => Err(diags),
    }
}

/// Each file the workflow was read from, with the hash of its text.
fn hashes_of_files(raw: &RawWorkflow) -> Vec<(String, String)> {
    raw.sources
        .iter()
        .map(|s| {
            (
                s.path.display().to_string(),
                crate::floor::hash::sha256_hex(s.text.as_bytes()),
            )
        })
        .collect()
}

/// Each stage's definition hash, in the order of the stages.
fn definition_hashes(file: &WorkflowFile) -> Vec<[u8; 32]> {
    file.stages
        .values()
        .map(crate::floor::hash::sha256_json_digest)
        .collect()
}

/// The state the passes share while one workflow is checked.
struct Checker<'a> {
    raw: &'a RawWorkflow,
    file: &'a WorkflowFile,
    search: &'a SearchPath,
    cwd: &'a Path,
    diags: Vec<Diagnostic>,
    /// Template sources queued by gather, in the order they were found.
    sources: Vec<Pending>,
    schemas: HashMap<String, Option<Arc<Schema>>>,
    /// Names the template environment defines (functions and globals).
    globals: HashSet<String>,
    /// What is known of each stage's `foreach` items.
    items: Vec<foreach::ItemOf>,
    /// The durations gather parsed.
    durations: HashMap<DurationKey, Duration>,
    /// The sizes gather parsed.
    sizes: HashMap<SizeKey, u64>,
    /// Reads of a stage that may be skipped that no template guard covers, waiting for the
    /// graph.
    unguarded: Vec<flows::Unguarded>,
}

/// `^[a-z][a-z0-9_]*$`, without compiling a regex for it.
fn is_stage_id(id: &str) -> bool {
    let mut bytes = id.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

impl Checker<'_> {
    fn error(&mut self, kind: DiagnosticKind, pointer: &str) -> &mut Diagnostic {
        let location = self.raw.locate(pointer);
        self.diags.push(Diagnostic::error(kind).at_opt(location));
        self.diags.last_mut().expect("just pushed")
    }

    fn error_key(&mut self, kind: DiagnosticKind, pointer: &str) -> &mut Diagnostic {
        let location = self.raw.locate_key(pointer);
        self.diags.push(Diagnostic::error(kind).at_opt(location));
        self.diags.last_mut().expect("just pushed")
    }

    /// The passes, in order; `None` when any found an error.
    fn run(
        &mut self,
        visiting: &mut Vec<Visit>,
        definition_hashes: impl FnOnce() -> Vec<[u8; 32]>,
    ) -> Option<Unassembled> {
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
                self.error_key(
                    DiagnosticKind::InvalidStageId(id.clone()),
                    &stage_pointer(id),
                )
                .help = Some(help);
            }
        }

        let actions = self.gather(visiting);
        self.check_write_paths();
        let pendings = std::mem::take(&mut self.sources);
        let templates = self.compile(&pendings);
        let schemas: Vec<SchemaOf> = actions
            .iter()
            .zip(self.file.stages.values())
            .map(|(action, def)| self.schema_of(action.as_ref(), def))
            .collect();
        self.items = self.check_foreach(&schemas);
        let deps = self.references(&ids, &index, &pendings, &templates, &schemas);
        self.report_unguarded(&deps);
        self.check_literals(&pendings, &templates, &schemas);
        for problem in crate::finally::problems(self.file, &deps) {
            let diagnostic = if problem.key {
                self.error_key(problem.message, &problem.pointer)
            } else {
                self.error(problem.message, &problem.pointer)
            };
            diagnostic.help = Some(problem.help);
        }
        self.late_writes(&ids, &pendings, &templates, &actions, &deps);
        let order = self.order(&deps, &ids);
        if self.diags.iter().any(Diagnostic::is_error) {
            return None;
        }
        Some(Unassembled {
            actions,
            pendings,
            templates,
            deps,
            order,
            definition_hashes: definition_hashes(),
        })
    }
}

/// A stage's dependencies, ascending, each once: a sorted slice rather than a set, since a
/// set of even one allocated a B-tree leaf of eleven (a megabyte over 10,000 stages).
pub(crate) type Deps = Box<[usize]>;

/// What a check that found no error assembles the stages from, with the definitions (which
/// [`check_inner`] then hands over, so that each is freed as its stage is built).
struct Unassembled {
    actions: Vec<Option<gather::PendingAction>>,
    pendings: Vec<Pending>,
    templates: Vec<Option<crate::template::Tmpl>>,
    deps: Vec<Deps>,
    order: Vec<usize>,
    definition_hashes: Vec<[u8; 32]>,
}

pub(crate) fn stage_pointer(id: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::Deps;
    use std::path::Path;

    use serde::Deserialize;
    use serde_json::Value;

    use super::format_errors::within_bounds;
    use super::graph::in_order_of_the_file;
    use super::references::{bound_locally, called};
    use crate::diag::SourceFile;
    use crate::format::WorkflowFile;
    use crate::load;

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
        let deps = |edges: &[&[usize]]| -> Vec<Deps> {
            edges
                .iter()
                .map(|e| e.to_vec().into_boxed_slice())
                .collect()
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
            .map(crate::diag::Diagnostic::message)
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
    fn only_a_stage_that_sets_an_extra_keeps_them() {
        let dir = tempfile::tempdir().expect("a temp dir");
        std::fs::write(
            dir.path().join("w.toml"),
            "[stages.plain]\ncommand = [\"true\"]\ncache = true\n\
             [stages.timed]\ncommand = [\"true\"]\ntimeout = \"5s\"\n\
             [stages.backoff]\ncommand = [\"true\"]\nretries = 2\nretry_backoff = \"1s\"\n",
        )
        .expect("write the workflow");
        let engine = crate::Engine::new(&[], dir.path());
        let workflow = engine.load("w.toml").expect("the workflow checks");
        let kept: Vec<bool> = workflow.stages.iter().map(|s| s.extras.is_some()).collect();
        assert_eq!(kept, [false, true, true]);
        // A stage without them reads the format's defaults.
        let plain = workflow.stages[0].extras();
        assert_eq!((plain.retries, plain.repair), (0, 1));
        assert_eq!(plain.retry_backoff, std::time::Duration::from_secs(1));
        assert_eq!(
            workflow.stages[1].extras().timeout,
            Some(std::time::Duration::from_secs(5))
        );
        assert_eq!(workflow.stages[2].extras().retries, 2);
    }

    #[test]
    fn sizes_are_parsed_by_gather_and_handed_over() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let write = |text: &str| std::fs::write(dir.path().join("w.toml"), text).expect("write");
        let engine = crate::Engine::new(&[], dir.path());
        write(
            "[workflow]\nmax_output = \"2KiB\"\n\
             [stages.a]\nmax_output = \"3KB\"\ncommand = [\"true\"]\n\
             [stages.b]\ncommand = [\"true\"]\n",
        );
        let workflow = engine.load("w.toml").expect("the workflow checks");
        assert_eq!(workflow.max_output, 2048);
        let sizes: Vec<Option<u64>> = workflow
            .stages
            .iter()
            .map(|s| s.extras().max_output)
            .collect();
        assert_eq!(sizes, [Some(3000), None]);

        write("[stages.a]\ncommand = [\"true\"]\n");
        let workflow = engine.load("w.toml").expect("the workflow checks");
        assert_eq!(workflow.max_output, super::DEFAULT_MAX_OUTPUT);

        // A bad size is an error at its own line, never a size dropped in silence.
        write(
            "[workflow]\nmax_output = \"1.5MB\"\n\
             [stages.a]\ncommand = [\"true\"]\nmax_output = \"lots\"\n",
        );
        let diags = engine.load("w.toml").expect_err("bad sizes are errors");
        let found: Vec<(usize, &str)> = diags
            .iter()
            .map(|d| (d.line_col().map_or(0, |(line, _)| line), d.message()))
            .collect();
        assert_eq!(
            found,
            [
                (2, "`1.5MB` is not a size: a whole number of bytes, or one with B, KB, MB, GB, KiB, MiB or GiB"),
                (5, "`lots` is not a size: a whole number of bytes, or one with B, KB, MB, GB, KiB, MiB or GiB"),
            ]
        );
    }

    #[test]
    fn each_problem_has_its_kind_with_typed_fields() {
        use crate::diag::DiagnosticKind as K;
        let dir = tempfile::tempdir().expect("a temp dir");
        std::fs::write(
            dir.path().join("w.toml"),
            "[stages.a]\ncommand = [\"true\"]\nshell = \"echo\"\nafter = [\"a\"]\n\
             [stages.b]\nprompt = { inline = \"{{ stages.zz.output }}\" }\n\
             [stages.c]\nuses = \"nope\"\n",
        )
        .expect("write the workflow");
        let engine = crate::Engine::new(&[], dir.path());
        let diags = engine.load("w.toml").expect_err("the workflow has errors");
        let kinds: Vec<&K> = diags.iter().map(crate::diag::Diagnostic::kind).collect();
        assert_eq!(
            kinds,
            [
                &K::SeveralActions {
                    stage: "a".into(),
                    actions: vec!["command".into(), "shell".into()],
                },
                &K::AfterItself("a".into()),
                &K::NoModel("b".into()),
                &K::UnknownStage("zz".into()),
                &K::UnknownBuiltin("nope".into()),
            ]
        );
        for diagnostic in &diags {
            assert_eq!(diagnostic.message(), diagnostic.kind().to_string());
        }
    }

    #[test]
    fn a_template_under_a_key_with_a_slash_is_located_at_its_line() {
        // The pointer of a stage's template is built segment by segment, `/` and `~` escaped.
        let dir = tempfile::tempdir().expect("a temp dir");
        std::fs::write(
            dir.path().join("w.toml"),
            "[stages.a]\ncommand = [\"true\"]\n\n[stages.a.env]\n\"A/B~C\" = \"{{ inputs.nope }}\"\n",
        )
        .expect("write the workflow");
        let engine = crate::Engine::new(&[], dir.path());
        let diags = engine.load("w.toml").expect_err("an unknown input");
        let found: Vec<(Option<(usize, usize)>, &str)> =
            diags.iter().map(|d| (d.line_col(), d.message())).collect();
        assert_eq!(found, [(Some((5, 15)), "unknown input `nope`")]);
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
        assert!(!bound_locally("{% settings total %}", "total"));
        assert!(!bound_locally(
            "{% set total_sum = 1 %}{{ total }}",
            "total"
        ));
        assert!(bound_locally("{%set x, (é, total) = t %}", "total"));
    }

    #[test]
    fn a_call_is_a_name_followed_by_a_parenthesis_not_after_a_dot_or_a_word() {
        assert!(called("{{ fmt(1) }}", "fmt"));
        assert!(called("{{fmt (1)}}", "fmt"));
        assert!(called("{{ a ~ fmt\n(1) }}", "fmt"));
        assert!(!called("{{ x.fmt(1) }}", "fmt"));
        assert!(!called("{{ reformat(1) }}", "format"));
        assert!(!called("{{ fmts(1) }}", "fmt"));
        assert!(!called("{{ fmt }}", "fmt"));
    }
}
