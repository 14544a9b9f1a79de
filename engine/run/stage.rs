//! One stage's execution: `if`, `foreach`, rendering, the fingerprint, resume and cache reuse,
//! the action (with retries, timeouts and model repair), output parsing and validation,
//! `output.path`, `assert`, `exit_if` and `set_state`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{json, Map, Value};

use super::cache::Cache;
use super::record::{FingerprintDocument, ModelCall, StageStatus};
use super::stage_error::{Part, PromptError, RenderError, StageError, WithProblem};
use super::{Reporter, RunOptions, RunStatus, Runtime};
use crate::builtins::{ask, BuiltinCtx, WriteRoots};
use crate::check::{Action, ProcessAction, Stage, WithTree, Workflow};
use crate::floor::hash::{sha256_hex, sha256_json, Sha256Hex};
use crate::floor::json;
use crate::floor::process::{self, Interrupt, ProcessSpec};
use crate::floor::retry::{AfterFailure, RetryPolicy};
use crate::format::{OnItemError, OutputFormat};
use crate::models::{extract_json, ModelRequest};
use crate::template::{Scope, Tmpl};

/// One unit's result, its attempts, its model calls and the stderr of its last attempt's
/// process.
type UnitResult = (Result<Value, StageError>, u32, Vec<ModelCall>, String);

/// How much of a successful process's stderr a stage record keeps: the end of it.
const STDERR_KEPT: usize = 8 * 1024;

/// Bump when the meaning of a stored output changes.
pub(crate) const CACHE_VERSION: &str = "stagegraph-cache-1";

/// What every stage of a run shares, computed once.
pub(crate) struct Prepared {
    pub writes: WriteRoots,
    pub child_env: Vec<(String, String)>,
    /// The locks `lock.acquire` took in this run, released when the run is done with them.
    pub locks: super::locks::HeldLocks,
}

impl Prepared {
    pub(crate) fn new(
        workflow: &Workflow,
        base: &minijinja::Value,
        cwd: &Path,
    ) -> Result<Self, RenderError> {
        let writes = super::write_roots(workflow, base, cwd)?;
        let mut child_env = Vec::new();
        for (name, tmpl) in &workflow.child_env {
            let value = tmpl
                .render(base)
                .map_err(|e| Part::ChildEnv(name.clone()).failed(e))?;
            child_env.push((name.clone(), value));
        }
        Ok(Prepared {
            writes,
            child_env,
            locks: Default::default(),
        })
    }
}

/// What a stage did.
#[derive(Debug, Clone)]
pub(crate) struct StageOutcome {
    pub status: StageStatus,
    pub output: Option<Value>,
    pub error: Option<String>,
    pub reason: Option<String>,
    pub exit: Option<String>,
    pub fingerprint: Option<Sha256Hex>,
    /// Boxed, as the record keeps it: an outcome is moved several times on its way there.
    pub fingerprint_parts: Option<Box<super::record::FingerprintParts>>,
    /// The output's SHA-256, when it is already known (a cache entry stores it).
    pub output_sha256: Option<[u8; 32]>,
    pub explain: Option<String>,
    pub attempts: u32,
    pub items: Option<usize>,
    /// `foreach` items that failed under `on_item_error = "continue"`.
    pub failed_items: usize,
    /// `foreach` items whose output came from the resumed run.
    pub reused_items: usize,
    /// Each `foreach` item that ran or was reused: when, how long, how it ended.
    pub item_runs: Vec<super::record::ItemRun>,
    /// A sub-workflow stage's run, how its stages ended.
    pub sub_run: Option<Box<super::record::SubRun>>,
    pub reused_from: Option<Cow<'static, str>>,
    pub model_calls: Vec<ModelCall>,
    pub assumed: bool,
    pub duration: Duration,
    pub set_state: Vec<(String, Value)>,
    /// Lines for the trace (dry-run command lines, rendered prompts).
    pub notes: Vec<String>,
    /// A failure that fails the run.
    pub fatal: bool,
    /// The end of what its process wrote on stderr, when it succeeded.
    pub stderr: Option<String>,
    /// Asked to finish only without work ([`StageRunner::run_if_reused`]).
    reuse_only: bool,
    /// It has work to do, left for [`StageRunner::run`].
    deferred: bool,
}

impl StageOutcome {
    fn new() -> Self {
        StageOutcome {
            status: StageStatus::Succeeded,
            output: None,
            error: None,
            reason: None,
            exit: None,
            fingerprint: None,
            fingerprint_parts: None,
            output_sha256: None,
            explain: None,
            attempts: 0,
            items: None,
            failed_items: 0,
            reused_items: 0,
            item_runs: Vec::new(),
            sub_run: None,
            reused_from: None,
            model_calls: Vec::new(),
            assumed: false,
            duration: Duration::ZERO,
            set_state: Vec::new(),
            notes: Vec::new(),
            reuse_only: false,
            deferred: false,
            fatal: false,
            stderr: None,
        }
    }

    pub(crate) fn status_mark(&self) -> &'static str {
        match self.status {
            StageStatus::Succeeded if self.exit.is_some() => "⏹",
            StageStatus::Succeeded => "✓",
            StageStatus::Cached => "≡",
            StageStatus::Skipped => "↷",
            StageStatus::Failed => "✗",
            StageStatus::Running | StageStatus::NotRun => "·",
        }
    }
}

/// An action with every template rendered: what runs, and what the fingerprint covers.
enum Rendered {
    None,
    Process(ProcessSpec),
    Prompt(ModelRequest),
    Template(String),
    Builtin(Value),
    Workflow(Map<String, Value>),
}

/// What the fingerprint covers of a rendered action, as JSON written straight from it (a
/// prompt's hash covers its text, a command's its argv, stdin hash, cwd and env).
impl Serialize for Rendered {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Rendered::None => serializer.serialize_unit(),
            Rendered::Process(spec) => {
                let mut map = serializer.serialize_map(Some(4))?;
                map.serialize_entry("argv", &spec.argv)?;
                map.serialize_entry("stdin", &spec.stdin.as_ref().map(|s| sha256_hex(s)))?;
                map.serialize_entry("cwd", &spec.cwd)?;
                map.serialize_entry("env", &spec.env)?;
                map.end()
            }
            Rendered::Prompt(request) => {
                let mut map = serializer.serialize_map(Some(5))?;
                map.serialize_entry("model", &request.alias)?;
                map.serialize_entry("system", &request.system)?;
                // Only when set, so that fingerprints of stages without one do not change.
                if let Some(prefix) = &request.prefix {
                    map.serialize_entry("prefix", prefix)?;
                }
                map.serialize_entry("prompt", &request.prompt)?;
                map.serialize_entry("temperature", &request.temperature)?;
                map.serialize_entry("max_tokens", &request.max_tokens)?;
                map.end()
            }
            Rendered::Template(text) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("text", text)?;
                map.end()
            }
            Rendered::Builtin(args) => args.serialize(serializer),
            Rendered::Workflow(inputs) => inputs.serialize(serializer),
        }
    }
}

impl Rendered {
    /// The compact JSON its `Serialize` writes: a command's and a template's by hand
    /// ([`crate::floor::json`]), the rest by serde_json. Stops where serde_json would fail.
    fn write(&self, out: &mut Vec<u8>) -> Result<(), ()> {
        match self {
            Rendered::None => out.extend_from_slice(b"null"),
            Rendered::Process(spec) => {
                let mut map = json::Object::new(out);
                json::strings(map.key("argv"), spec.argv.iter().map(String::as_str));
                let stdin = spec.stdin.as_ref().map(|s| sha256_hex(s));
                map.opt_string("stdin", stdin.as_deref());
                match &spec.cwd {
                    None => map.opt_string("cwd", None),
                    Some(cwd) => match cwd.to_str() {
                        Some(cwd) => map.string("cwd", cwd),
                        None => json::serde(map.key("cwd"), cwd)?,
                    },
                }
                let env = map.key("env");
                env.push(b'[');
                for (i, (name, value)) in spec.env.iter().enumerate() {
                    if i > 0 {
                        env.push(b',');
                    }
                    json::strings(env, [name.as_str(), value.as_str()]);
                }
                env.push(b']');
                map.end();
            }
            Rendered::Template(text) => {
                let mut map = json::Object::new(out);
                map.string("text", text);
                map.end();
            }
            Rendered::Prompt(_) | Rendered::Builtin(_) | Rendered::Workflow(_) => {
                json::serde(out, self)?;
            }
        }
        Ok(())
    }

    /// SHA-256 of a stage's rendered actions as a JSON array (what `sha256_json` of the slice
    /// gives), through `buffer`.
    fn sha256_of(rendered: &[Rendered], buffer: &mut Vec<u8>) -> Sha256Hex {
        buffer.clear();
        buffer.push(b'[');
        let written = rendered.iter().enumerate().try_for_each(|(i, action)| {
            if i > 0 {
                buffer.push(b',');
            }
            action.write(buffer)
        });
        if written.is_ok() {
            buffer.push(b']');
        }
        Sha256Hex::Bytes(crate::floor::hash::sha256_digest(buffer))
    }

    /// What a dry-run says this unit would do, after `prefix`; written into one string, since a
    /// dry-run of 10,000 stages says it 10,000 times.
    fn describe(&self, prefix: &str) -> Option<String> {
        match self {
            Rendered::Process(spec) => {
                let words: usize = spec.argv.iter().map(|a| a.len() + 3).sum();
                let mut line = String::with_capacity(prefix.len() + 2 + words);
                line.push_str(prefix);
                line.push_str("$ ");
                for (i, word) in spec.argv.iter().enumerate() {
                    if i > 0 {
                        line.push(' ');
                    }
                    crate::template::functions::push_shell_quoted(&mut line, word);
                }
                Some(line)
            }
            Rendered::Builtin(args) => Some(format!("{prefix}with {args}")),
            _ => None,
        }
    }
}

pub(crate) struct StageRunner<'a> {
    pub workflow: &'a Workflow,
    pub runtime: &'a Runtime<'a>,
    pub options: &'a RunOptions,
    pub prepared: &'a Prepared,
    pub base_scope: &'a Scope,
    pub reuse: &'a super::Reuse,
    /// The `foreach` items the resumed run finished.
    pub items: &'a super::journal::FinishedItems,
    /// Where this run notes its finished items and its processes.
    pub journal: &'a super::journal::Journal,
    /// The run whose outputs `reuse` holds when this is a dry-run rehearsing its path.
    pub rehearsal: Option<&'a str>,
    pub reporter: &'a Reporter,
    pub cache: Cache,
    pub table: std::sync::Arc<crate::template::StageTable>,
    /// A command's stdout that is not UTF-8, by stage and item, for its `output.path`: the
    /// file gets the bytes exactly (the output itself is text, the bad bytes replaced).
    pub raw_stdout: RawStdout,
    /// The stages (and items) whose stdout was not UTF-8, for the note that says the output
    /// had bytes replaced.
    pub lossy_stdout: std::sync::Mutex<Vec<(String, Option<usize>)>>,
    /// How the sub-workflow a stage ran (not per item) ended, by stage id, until its outcome
    /// takes it.
    pub sub_runs: std::sync::Mutex<HashMap<String, super::record::SubRun>>,
    /// When the run started: `foreach` items are timed on the run's clock.
    pub run_started: Instant,
}

/// See [`StageRunner::raw_stdout`].
pub(crate) type RawStdout = std::sync::Mutex<HashMap<(String, Option<usize>), Vec<u8>>>;

impl StageRunner<'_> {
    /// The stage's outcome when it needs no work here: its `if` is false, or its output is
    /// reused from the cache or a resumed run (and so are dry-run assumptions). `None` when it
    /// has work to do, which [`StageRunner::run`] does.
    pub(crate) fn run_if_reused(&self, index: usize) -> Option<StageOutcome> {
        if !self.may_need_no_work(&self.workflow.stages[index]) {
            // It would only be rendered and fingerprinted here, then again on its worker.
            return None;
        }
        let outcome = self.run_with(index, true);
        (!outcome.deferred).then_some(outcome)
    }

    /// Whether anything can spare the stage its work: an `if`, a cache, a resumed run's output,
    /// a dry-run's assumption.
    fn may_need_no_work(&self, stage: &Stage) -> bool {
        stage.extras().if_.is_some()
            || (stage.cache.is_some() && !self.options.no_cache)
            || self.options.dry_run
            || self.options.given.contains_key(&stage.id)
            || self.options.left_out.contains(&stage.id)
            || self.reuse.get(&stage.id).is_some()
    }

    pub(crate) fn run(&self, index: usize) -> StageOutcome {
        self.run_with(index, false)
    }

    fn run_with(&self, index: usize, reuse_only: bool) -> StageOutcome {
        let started = Instant::now();
        let stage = &self.workflow.stages[index];
        let _span = tracing::info_span!("stage", id = %stage.id).entered();
        let mut outcome = StageOutcome::new();
        outcome.reuse_only = reuse_only;
        // Its templates stop at the run's interrupt and at the stage's `timeout`.
        let cancel = crate::floor::cancel::Cancel::after(stage.extras().timeout);
        let result = crate::template::stop::within(cancel, || self.run_inner(stage, &mut outcome));
        if let Err(error) = result {
            let error = error.to_string();
            outcome.status = StageStatus::Failed;
            outcome.output = None;
            outcome.set_state.clear();
            outcome.exit = None;
            match stage.on_error {
                crate::format::OnError::Fail => outcome.fatal = true,
                crate::format::OnError::Continue => {}
                crate::format::OnError::Exit => outcome.exit = Some(error.clone()),
            }
            if Interrupt::global().is_set() {
                outcome.fatal = true;
            }
            outcome.error = Some(error);
        }
        outcome.sub_run = self
            .sub_runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&stage.id)
            .map(Box::new);
        outcome.duration = started.elapsed();
        if !outcome.deferred {
            tracing::info!(
                status = outcome.status.as_str(),
                reused_from = outcome.reused_from.as_deref(),
                duration_ms = outcome.duration.as_millis() as u64,
                error = outcome.error.as_deref(),
                "stage finished"
            );
        }
        outcome
    }

    fn run_inner(&self, stage: &Stage, outcome: &mut StageOutcome) -> Result<(), StageError> {
        let base = self.base_scope.to_value();
        // An output given by the caller (a test case): the stage's action does not run, and
        // what follows its output (assertions, `output.path`, `set_state`, `exit_if`) does.
        if self.options.left_out.contains(&stage.id) {
            outcome.status = StageStatus::Skipped;
            outcome.reason = Some("not selected (--only, --from, --until)".into());
            if self.options.explain {
                outcome.explain = Some("skipped: not selected".into());
            }
            return Ok(());
        }
        let given = self.options.given.get(&stage.id);
        if let Some(condition) = stage.extras().if_.as_ref().filter(|_| given.is_none()) {
            let value = condition.eval(&base).map_err(|e| Part::If.failed(e))?;
            if !value.is_true() {
                outcome.status = StageStatus::Skipped;
                if self.options.explain {
                    outcome.explain = Some("skipped: `if` is false".into());
                }
                outcome.reason = stage.text.if_().map(|c| format!("`if` is false: {c}"));
                return Ok(());
            }
        }

        // One unit per `foreach` item, or one unit.
        let units: Cow<[Scope]> = match &stage.extras().foreach {
            None => Cow::Borrowed(std::slice::from_ref(self.base_scope)),
            Some(list) => {
                let value = list.eval(&base).map_err(|e| Part::Foreach.failed(e))?;
                if value.is_none() || value.is_undefined() {
                    Cow::Owned(Vec::new())
                } else {
                    let items = value
                        .try_iter()
                        .map_err(|_| RenderError::NotAList(value.kind()))?;
                    items
                        .enumerate()
                        .map(|(i, item)| self.base_scope.with_item(item, i))
                        .collect()
                }
            }
        };
        if stage.extras().foreach.is_some() {
            outcome.items = Some(units.len());
        }
        let rendered: Vec<Rendered> = match &stage.extras().foreach {
            // The one unit's scope is the base scope, already built.
            None => vec![self.render(stage, &base)?],
            Some(_) => units
                .iter()
                .map(|unit| self.render(stage, &unit.to_value()))
                .collect::<Result<_, _>>()?,
        };
        let (digest, parts) = self.fingerprint(stage, &rendered);
        let fingerprint = Sha256Hex::Bytes(digest);
        outcome.fingerprint = Some(fingerprint.clone());

        let cache_id = match &stage.cache {
            Some(spec) => {
                let key = match &spec.key {
                    Some(key) => Some(
                        key.render(&units.first().map(Scope::to_value).unwrap_or(base.clone()))
                            .map_err(|e| Part::CacheKey.failed(e))?,
                    ),
                    None => None,
                };
                Some(Cache::entry_id(&digest, key.as_deref()))
            }
            None => None,
        };

        // Resume reuses work (commands, model calls, writes, sub-workflows), not observations:
        // templates and read-only built-ins are cheap and read the world as it is now.
        // Looked up only where it is used: a rehearsal's outputs are read at the first lookup.
        let recorded = || {
            self.reuse
                .get(&stage.id)
                .filter(|p| fingerprint == *p.fingerprint && is_work(stage))
        };
        let resumed = || self.rehearsal.is_none().then(recorded).flatten();
        tracing::debug!(
            fingerprint = %fingerprint,
            cache = cache_id.is_some() && !self.options.no_cache,
            resumed = resumed().is_some(),
            given = given.is_some(),
            "stage rendered"
        );
        let output = if let Some(given) = given {
            // What the stage's action would have to give: a given output its schema refuses
            // would test a run that cannot happen.
            // A `foreach` stage's schema is each item's.
            if let Some(schema) = &stage.schema {
                let items = match (&stage.extras().foreach, given) {
                    (Some(_), Value::Array(items)) => items.as_slice(),
                    _ => std::slice::from_ref(given),
                };
                for item in items {
                    schema
                        .validate(item)
                        .map_err(|errors| StageError::Schema(schema_failure(schema, &errors)))?;
                }
            }
            outcome.status = StageStatus::Cached;
            outcome.reused_from = Some(
                self.options
                    .given_from
                    .as_ref()
                    .map_or(Cow::Borrowed("given"), |run| {
                        Cow::Owned(format!("run {run}"))
                    }),
            );
            given.clone()
        } else if let Some(previous) = resumed() {
            outcome.status = StageStatus::Cached;
            outcome.reused_from = Some(Cow::Borrowed("resumed run"));
            if self.options.explain {
                outcome.explain =
                    Some("reused: the resumed run recorded an identical execution".into());
            }
            previous.output.clone()
        } else if let Some((stored, sha256)) = cache_id
            .as_ref()
            .filter(|_| !self.options.no_cache)
            .and_then(|id| self.cache.get(id, stage.cache.as_ref().and_then(|c| c.ttl)))
        {
            outcome.status = StageStatus::Cached;
            outcome.reused_from = Some(Cow::Borrowed("cache"));
            outcome.output_sha256 = Some(sha256);
            if self.options.dry_run {
                outcome.notes.push(
                    "(dry-run) output from the cache, whose entry has this fingerprint".into(),
                );
            }
            if self.options.explain {
                outcome.explain = Some("reused: the cache holds an identical execution".into());
            }
            stored
        } else if let Some((previous, run)) = self
            .rehearsal
            .filter(|_| self.options.dry_run && self.has_side_effects(stage, &rendered))
            .and_then(|run| Some((recorded()?, run)))
        {
            // A rehearsal follows the real path: the last real run's output, not an assumed one.
            // A real run would still execute the stage (it has no cache entry), as explain says.
            outcome.status = StageStatus::Cached;
            outcome.reused_from = Some(Cow::Owned(format!("run {run}")));
            outcome.notes.push(format!(
                "(dry-run) output of run {run}, whose fingerprint was the same"
            ));
            if self.options.explain {
                outcome.explain = Some(self.explain_miss(stage, &parts));
            }
            previous.output.clone()
        } else if self.options.dry_run && self.has_side_effects(stage, &rendered) {
            if self.options.explain {
                outcome.explain = Some(self.explain_miss(stage, &parts));
            }
            for unit in &rendered {
                if let Some(line) = unit.describe("(dry-run) would run ") {
                    outcome.notes.push(line);
                }
                if let Rendered::Prompt(request) = unit {
                    outcome.notes.push(format!(
                        "(dry-run) would ask `{}` ({} bytes of prompt)",
                        request.alias,
                        request.prompt.len()
                    ));
                    if self.options.show_prompts {
                        outcome.notes.push(format!(
                            "---- prompt ----\n{}\n---- end ----",
                            request.prompt
                        ));
                    }
                }
            }
            outcome.assumed = true;
            self.assumed_output(stage, units.len())
        } else if outcome.reuse_only {
            // Not reusable: the caller hands the stage to a worker.
            outcome.deferred = true;
            return Ok(());
        } else {
            if self.options.dry_run && self.options.show_prompts {
                for unit in &rendered {
                    if let Rendered::Prompt(request) = unit {
                        outcome.notes.push(format!(
                            "---- prompt ----\n{}\n---- end ----",
                            request.prompt
                        ));
                    }
                }
            }
            let output = self.execute(stage, &rendered, outcome, &parts);
            self.note_lossy_stdout(stage, outcome);
            let output = output?;
            self.check_size(stage, &output)?;
            // An output with failed items is not kept: the next run tries them again.
            if let Some(id) = cache_id.as_ref().filter(|_| outcome.failed_items == 0) {
                if !self.options.dry_run {
                    if let Err(error) = self.cache.put(id, &output) {
                        outcome
                            .notes
                            .push(format!("warning: cannot store cache entry: {error}"));
                    }
                }
            }
            output
        };

        if matches!(&stage.action, Action::Uses { builtin, .. } if builtin.name == ask::NAME) {
            self.record_answers(stage, &rendered, &output, outcome);
        }

        // The scope with `output`, built only for a stage that reads it.
        let with_output_cell = std::cell::OnceCell::new();
        let with_output = || {
            with_output_cell.get_or_init(|| {
                self.base_scope
                    .with_output(minijinja::Value::from_serialize(&output))
                    .to_value()
            })
        };
        for (position, (that, message)) in stage.extras().asserts.iter().enumerate() {
            let held = that
                .eval(with_output())
                .map_err(|e| Part::Assert.failed(e))?;
            if !held.is_true() {
                let message = match message {
                    Some(message) => Some(
                        message
                            .render(with_output())
                            .map_err(|e| Part::AssertMessage.failed(e))?,
                    ),
                    None => None,
                };
                return Err(StageError::Assertion {
                    that: stage.text.asserts()[position].clone(),
                    message,
                });
            }
        }
        // `output.path`: the artifact also written where the workflow asked, once it passed
        // validation and every assertion.
        if let Some(path) = &stage.extras().output_path {
            let per_unit: Vec<(&Scope, Value)> = if stage.extras().foreach.is_some() {
                units
                    .iter()
                    .zip(output.as_array().cloned().unwrap_or_default())
                    .collect()
            } else {
                units.iter().map(|u| (u, output.clone())).collect()
            };
            for (index, (unit, value)) in per_unit.into_iter().enumerate() {
                let target = path
                    .render(&unit.to_value())
                    .map_err(|e| Part::OutputPath.failed(e))?;
                let target = self.runtime.cwd.join(target);
                let target = self.prepared.writes.check(&target)?;
                let item = stage.extras().foreach.as_ref().map(|_| index);
                let raw = self
                    .raw_stdout
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .remove(&(stage.id.clone(), item));
                let bytes = raw.unwrap_or_else(|| artifact_bytes(&value, stage.format));
                if self.options.dry_run {
                    outcome
                        .notes
                        .push(format!("(dry-run) would write {}", target.display()));
                } else {
                    crate::builtins::paths::write_atomic(&target, &bytes).map_err(|error| {
                        StageError::WriteOutput {
                            path: target.clone(),
                            error,
                        }
                    })?;
                }
            }
        }

        for (name, tmpl) in &stage.extras().set_state {
            let value = tmpl
                .eval(with_output())
                .map_err(|e| Part::SetState(name.clone()).failed(e))?;
            outcome.set_state.push((
                name.clone(),
                serde_json::to_value(&value).unwrap_or(Value::Null),
            ));
        }
        if let Some(exit_if) = &stage.extras().exit_if {
            let exits = exit_if
                .eval(with_output())
                .map_err(|e| Part::ExitIf.failed(e))?;
            if exits.is_true() {
                let message = match &stage.extras().exit_message {
                    Some(message) => message
                        .render(with_output())
                        .map_err(|e| Part::ExitMessage.failed(e))?,
                    None => format!(
                        "stage `{}`: `{}` is true",
                        stage.id,
                        stage.text.exit_if().unwrap_or("")
                    ),
                };
                outcome.exit = Some(message.trim().to_string());
            }
        }
        if self.options.explain && outcome.explain.is_none() {
            outcome.explain = Some(match stage.action {
                Action::None => "evaluated: no action".into(),
                _ => "runs: read-only, so a dry-run runs it too".into(),
            });
        }
        outcome.fingerprint_parts = Some(Box::new(parts));
        outcome.output = Some(output);
        Ok(())
    }

    /// An `ask` stage's questions and answers, in its record (`reason`) and its trace.
    fn record_answers(
        &self,
        stage: &Stage,
        rendered: &[Rendered],
        output: &Value,
        outcome: &mut StageOutcome,
    ) {
        let source = self
            .options
            .answers
            .source(&stage.id, self.options.dry_run)
            .describe();
        let answers: Vec<&Value> = match (&stage.extras().foreach, output) {
            (Some(_), Value::Array(items)) => items.iter().collect(),
            _ => vec![output],
        };
        let mut lines = Vec::new();
        for (unit, answer) in rendered.iter().zip(answers) {
            let Rendered::Builtin(args) = unit else {
                continue;
            };
            let question = args.get("question").and_then(Value::as_str).unwrap_or("");
            let answer = answer.as_str().unwrap_or("");
            lines.push(format!("asked {question:?}: `{answer}` ({source})"));
        }
        outcome.reason = Some(lines.join("; "));
        outcome.notes.extend(lines);
    }

    fn has_side_effects(&self, stage: &Stage, rendered: &[Rendered]) -> bool {
        match &stage.action {
            Action::None | Action::Template(_) | Action::Workflow { .. } => false,
            Action::Uses { builtin, .. } => builtin.writes,
            Action::Prompt(_) => !self.options.replay,
            Action::Command(_) | Action::Shell(_) => !rendered.is_empty(),
        }
    }

    /// The output a dry-run assumes: `dry_run_output`, else from the schema, else empty.
    fn assumed_output(&self, stage: &Stage, units: usize) -> Value {
        if let Some(value) = &stage.extras().dry_run_output {
            return (**value).clone();
        }
        let one = match (&stage.schema, &stage.action) {
            (Some(schema), _) => schema.synthesize(),
            (None, Action::Uses { builtin, .. }) => {
                crate::schema::Schema::from_value((builtin.output_schema)(), builtin.name)
                    .map_or(Value::Null, |s| s.synthesize())
            }
            _ => match stage.format {
                OutputFormat::Text => Value::String(String::new()),
                OutputFormat::Json => json!({}),
                OutputFormat::Lines => json!([]),
            },
        };
        if stage.extras().foreach.is_some() {
            Value::Array(vec![one; units])
        } else {
            one
        }
    }

    fn render(&self, stage: &Stage, scope: &minijinja::Value) -> Result<Rendered, RenderError> {
        let render = |tmpl: &Tmpl, part: Part| tmpl.render(scope).map_err(|e| part.failed(e));
        Ok(match &stage.action {
            Action::None => Rendered::None,
            Action::Command(process) | Action::Shell(process) => {
                Rendered::Process(self.render_process(stage, process, scope)?)
            }
            Action::Prompt(prompt) => Rendered::Prompt(ModelRequest {
                alias: prompt.model.clone(),
                system: match &prompt.system {
                    Some(system) => Some(render(system, Part::System)?),
                    None => None,
                },
                prefix: match &prompt.prefix {
                    Some(prefix) => Some(render(prefix, Part::PromptPrefix)?),
                    None => None,
                },
                prompt: render(&prompt.prompt, Part::Prompt)?,
                temperature: stage.extras().temperature,
                max_tokens: stage.extras().max_tokens,
                timeout: stage.extras().timeout,
                env: self.prepared.child_env.clone(),
                schema: match (&stage.schema, stage.format) {
                    (Some(schema), OutputFormat::Json) => {
                        Some(std::sync::Arc::new(schema.value.clone()))
                    }
                    _ => None,
                },
                corrections: Vec::new(),
            }),
            Action::Template(template) => Rendered::Template(render(template, Part::Template)?),
            Action::Uses { with, .. } => Rendered::Builtin(eval_with(with, scope)?),
            Action::Workflow { with, .. } => {
                let mut inputs = Map::new();
                for (name, tree) in with {
                    inputs.insert(name.clone(), eval_with(tree, scope)?);
                }
                Rendered::Workflow(inputs)
            }
        })
    }

    fn render_process(
        &self,
        stage: &Stage,
        process: &ProcessAction,
        scope: &minijinja::Value,
    ) -> Result<ProcessSpec, RenderError> {
        // A script `sh` reads (a `shell` stage's, or the one a `command` hands to a shell
        // with `-c`) gets its values through the environment, never as script text.
        use crate::template::shell;
        let stdin_values = process
            .stdin()
            .is_some_and(|stdin| !matches!(stdin, Tmpl::Literal(_)));
        let mut argv = Vec::with_capacity(process.argv.len());
        let mut script_env = Vec::new();
        let mut script_at = matches!(stage.action, Action::Shell(_)).then_some(2);
        // The arguments whose values were bound or checked as a script or code.
        let mut handled = Vec::new();
        for (i, arg) in process.argv.iter().enumerate() {
            let failed = |e: minijinja::Error| Part::Argument(i + 1).failed(e);
            if script_at == Some(i) {
                let script = shell::render_script(arg, scope, stdin_values).map_err(failed)?;
                argv.push(script.text);
                script_env = script.env;
                handled.push(i);
                continue;
            }
            if let Some(interpreter) = shell::code_argument(&argv) {
                // Code for another interpreter cannot reference variables in one way for all:
                // a value printed into it is refused.
                let code = shell::render_script(arg, scope, false).map_err(failed)?;
                if !code.env.is_empty() {
                    return Err(RenderError::IntoCode {
                        position: i + 1,
                        interpreter: interpreter.to_string(),
                    });
                }
                argv.push(code.text);
                handled.push(i);
                continue;
            }
            let text = arg.render(scope).map_err(failed)?;
            if let Some(at) = text.find('\0') {
                return Err(failed(shell::nul_in_value(at)));
            }
            argv.push(text);
            if script_at.is_none() {
                script_at = shell::script_argument(&argv);
            }
        }
        if matches!(stage.action, Action::Command(_)) {
            // A shell or interpreter further in (behind `timeout`, `env`, `sudo`, ...) may run
            // an argument, or its input, as code: a value there is refused.
            let words: Vec<shell::Word> = argv
                .iter()
                .zip(&process.argv)
                .enumerate()
                .map(|(k, (text, tmpl))| {
                    shell::Word::argument(text, k, !matches!(tmpl, Tmpl::Literal(_)))
                })
                .collect();
            let mut findings = Vec::new();
            shell::analyze(&words, process.stdin().is_some(), &mut findings);
            for finding in findings {
                let shell::Use::Code(_) = &finding.usage else {
                    continue;
                };
                if finding.value.is_none() && !stdin_values || handled.contains(&finding.at) {
                    continue;
                }
                let message = finding.usage.message(finding.value.is_some(), None);
                return Err(Part::Argument(finding.at + 1).failed(shell::script_error(&message)));
            }
        }
        let stdin = match process.stdin() {
            Some(stdin) => Some(
                stdin
                    .render(scope)
                    .map_err(|e| Part::Stdin.failed(e))?
                    .into_bytes(),
            ),
            None => None,
        };
        let cwd = match process.cwd() {
            Some(cwd) => {
                let text = cwd.render(scope).map_err(|e| Part::Cwd.failed(e))?;
                if let Some(at) = text.find('\0') {
                    return Err(Part::Cwd.failed(shell::nul_in_value(at)));
                }
                Some(self.runtime.cwd.join(text))
            }
            None => Some(self.runtime.cwd.clone()),
        };
        let mut env = self.prepared.child_env.clone();
        env.extend(script_env);
        for (name, value) in process.env() {
            let failed = |e: minijinja::Error| Part::Env(name.clone()).failed(e);
            let text = value.render(scope).map_err(failed)?;
            if let Some(at) = text.find('\0') {
                return Err(failed(shell::nul_in_value(at)));
            }
            env.push((name.clone(), text));
        }
        Ok(ProcessSpec {
            argv,
            stdin,
            cwd,
            env,
            timeout: None,
            max_stdout: None,
        })
    }

    /// The fingerprint (its digest), and the hashes of what it covers, part by part.
    fn fingerprint(
        &self,
        stage: &Stage,
        rendered: &[Rendered],
    ) -> ([u8; 32], super::record::FingerprintParts) {
        let slots = self.table.read();
        let stages = &self.workflow.stages;
        let deps = |visit: &mut dyn FnMut(&str, Option<&str>)| {
            let mut digits = [0u8; 64];
            for &d in &stage.deps {
                let sha256 = slots
                    .get(d)
                    .and_then(Option::as_ref)
                    .map(|s| s.sha256.as_str(&mut digits));
                visit(stages[d].id.as_str(), sha256);
            }
        };
        let model = match &stage.action {
            Action::Prompt(prompt) => self.runtime.models.identity(&prompt.model),
            _ => None,
        };
        let sub = match &stage.action {
            Action::Workflow { workflow, .. } => Some(sha256_json(&workflow.file_hashes)),
            _ => None,
        };
        // Both documents hashed here are written by hand (`floor::json`).
        let mut buffer = Vec::with_capacity(512);
        let parts = super::record::FingerprintParts::new(
            Sha256Hex::Bytes(stage.definition_hash),
            Rendered::sha256_of(rendered, &mut buffer),
            stage.schema.as_ref().map(|s| s.sha256.as_str().into()),
            model.map(String::into_boxed_str),
            sub.map(String::into_boxed_str),
        );
        drop(buffer);
        let digest = FingerprintDocument::of(&parts, &deps, &mut [[0; 64]; 2]).digest();
        (digest, parts)
    }

    /// Why an execution would not be reused: the parts that differ from the last run's.
    fn explain_miss(&self, stage: &Stage, parts: &super::record::FingerprintParts) -> String {
        let assumed: Vec<&str> = stage
            .deps
            .iter()
            .filter(|&&d| self.table.get(d).is_some_and(|slot| slot.assumed))
            .map(|&d| self.workflow.stages[d].id.as_str())
            .collect();
        let previous = self.runtime.previous.as_ref().and_then(|record| {
            record
                .stages
                .get(stage.id.as_str())
                .and_then(|s| s.fingerprint_parts.clone())
                .map(|p| (record, p))
        });
        let Some((record, before)) = previous else {
            return "runs: no earlier run recorded this stage".into();
        };
        let mut reasons = Vec::new();
        if before.version != parts.version {
            reasons.push("the engine's cache version changed".to_string());
        }
        if before.definition != parts.definition {
            reasons.push("its definition changed".to_string());
        }
        if before.schema() != parts.schema() {
            reasons.push("its output schema changed".to_string());
        }
        if before.model() != parts.model() {
            reasons.push("the model behind its alias changed".to_string());
        }
        if before.sub_workflow() != parts.sub_workflow() {
            reasons.push("its sub-workflow's files changed".to_string());
        }
        for &d in &stage.deps {
            let id = self.workflow.stages[d].id.as_str();
            if assumed.contains(&id) {
                reasons.push(format!(
                    "upstream `{id}` runs first, so its output is not known yet"
                ));
                continue;
            }
            // What the fingerprint took from it: its output hash, or its status without one.
            let now = self.table.get(d).map(|slot| slot.sha256.to_string());
            let then = record.stages.get(id).map(|s| {
                s.output_sha256
                    .as_ref()
                    .map_or_else(|| s.status.as_str().to_string(), ToString::to_string)
            });
            if now != then {
                reasons.push(format!("the output of upstream `{id}` changed"));
            }
        }
        if before.action != parts.action && reasons.is_empty() {
            reasons
                .push("its rendered action changed (inputs, state or template output)".to_string());
        }
        if reasons.is_empty() {
            if stage.cache.is_some() {
                reasons.push(format!("unchanged since run {}, but no cache entry is stored (expired or never stored)", record.run_id));
            } else {
                reasons.push(format!(
                    "unchanged since run {}, but the stage has no `cache`",
                    record.run_id
                ));
            }
        }
        format!("runs: {}", reasons.join("; "))
    }

    /// What one `foreach` item executes: the stage's parts with the item's rendered action in
    /// place of all of them. Upstream outputs are left out: an item's execution reads nothing
    /// but what was rendered into it, so an item a resume finds unchanged is reused even when
    /// the list around it changed.
    fn item_fingerprint(parts: &super::record::FingerprintParts, unit: &Rendered) -> String {
        sha256_json(&json!({
            "version": parts.version,
            "definition": parts.definition,
            "item": sha256_json(unit),
            "schema": parts.schema(),
            "model": parts.model(),
            "sub_workflow": parts.sub_workflow(),
        }))
    }

    /// The largest output the stage may produce, in bytes (`max_output`).
    fn max_output(&self, stage: &Stage) -> u64 {
        stage
            .extras()
            .max_output
            .unwrap_or(self.workflow.max_output)
    }

    /// The message for an output past the stage's limit.
    fn too_large(&self, stage: &Stage, what: &str) -> String {
        let limit = self.max_output(stage);
        let suggestion = crate::floor::size::format_size(limit.saturating_mul(4)).replace(' ', "");
        format!(
            "stage `{}`: {what} the output limit of {} (max_output); raise it with \
             `max_output = \"{suggestion}\"` on the stage or in [workflow]",
            stage.id,
            crate::floor::size::format_size(limit),
        )
    }

    /// Fail a stage whose output, as JSON, is larger than its limit.
    fn check_size(&self, stage: &Stage, output: &Value) -> Result<(), StageError> {
        let size = crate::floor::hash::json_size(output);
        if size > self.max_output(stage) {
            return Err(StageError::Limit(self.too_large(
                stage,
                &format!(
                    "the output is {}, over",
                    crate::floor::size::format_size(size)
                ),
            )));
        }
        Ok(())
    }

    /// Run every unit (in parallel for `foreach`), each with its retries. Each `foreach` item
    /// is journaled as it finishes; an item the resumed run finished is taken from there.
    fn execute(
        &self,
        stage: &Stage,
        rendered: &[Rendered],
        outcome: &mut StageOutcome,
        parts: &super::record::FingerprintParts,
    ) -> Result<Value, StageError> {
        if stage.extras().foreach.is_none() {
            let (result, attempts, calls, stderr) =
                self.execute_with_retries(stage, &rendered[0], None);
            outcome.attempts = attempts;
            outcome.model_calls.extend(calls);
            if !stderr.is_empty() {
                outcome.stderr = Some(stderr);
            }
            return result;
        }
        // Model calls wait on the network, not on a core: a prompt stage whose model sets
        // `max_concurrency` runs that many items at once, whatever `--jobs` says.
        let workers = match &stage.action {
            Action::Prompt(prompt) => self.runtime.models.max_concurrency(&prompt.model),
            _ => None,
        };
        let cap = stage
            .extras()
            .concurrency
            .unwrap_or(usize::MAX)
            .min(workers.unwrap_or(self.options.jobs.max(1)))
            .min(rendered.len())
            .max(1);
        // Items are journaled and reused only where resume reuses work at all.
        let journaled = is_work(stage) && self.journal.is_active();
        let reusable = is_work(stage) && self.rehearsal.is_none() && !self.items.is_empty();
        let fingerprints: Vec<String> = match journaled || reusable {
            true => rendered
                .iter()
                .map(|unit| Self::item_fingerprint(parts, unit))
                .collect(),
            false => Vec::new(),
        };
        let mut results: Vec<Option<UnitResult>> = (0..rendered.len()).map(|_| None).collect();
        // When each item started and how long it took, in ms on the run's clock.
        let mut timings: Vec<(u64, u64)> = vec![(0, 0); rendered.len()];
        let since_start = || self.run_started.elapsed().as_millis() as u64;
        if reusable {
            for (i, fingerprint) in fingerprints.iter().enumerate() {
                if let Some(output) = self.items.get(&stage.id, fingerprint) {
                    // Kept in this run's journal too: a resume of this run reuses it again.
                    if journaled {
                        self.note_item(stage, i, fingerprint, output);
                    }
                    results[i] = Some((Ok(output.clone()), 0, Vec::new(), String::new()));
                    timings[i] = (since_start(), 0);
                    outcome.reused_items += 1;
                }
            }
        }
        if outcome.reused_items > 0 {
            outcome.notes.push(format!(
                "{} of {} items reused from the resumed run",
                outcome.reused_items,
                rendered.len()
            ));
        }
        let todo: Vec<usize> = (0..rendered.len())
            .filter(|&i| results[i].is_none())
            .collect();
        let cap = cap.min(todo.len()).max(1);
        let next = AtomicUsize::new(0);
        let total = rendered.len();
        let done = AtomicUsize::new(outcome.reused_items);
        let results = Mutex::new(results);
        let timings = Mutex::new(timings);
        let keep_going = stage.extras().on_item_error == OnItemError::Continue;
        let failed = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            for _ in 0..cap {
                scope.spawn(|| loop {
                    if failed.load(Ordering::SeqCst) || Interrupt::global().is_set() {
                        break;
                    }
                    let Some(&i) = todo.get(next.fetch_add(1, Ordering::SeqCst)) else {
                        break;
                    };
                    let start = since_start();
                    let result = self.execute_with_retries(stage, &rendered[i], Some(i));
                    let took = since_start().saturating_sub(start);
                    timings
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)[i] = (start, took);
                    if let (Ok(output), true) = (&result.0, journaled) {
                        self.note_item(stage, i, &fingerprints[i], output);
                    }
                    if result.0.is_err() && !keep_going {
                        failed.store(true, Ordering::SeqCst);
                    }
                    results
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)[i] = Some(result);
                    let done = done.fetch_add(1, Ordering::SeqCst) + 1;
                    self.reporter.item_done(&stage.id, done, total);
                });
            }
        });
        let results = results
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let timings = timings
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut outputs = Vec::with_capacity(results.len());
        // Every item that ran is accounted for (its attempts, stderr and model calls, which
        // were paid for) even when an earlier one failed the stage.
        let mut first_error = None;
        for (i, result) in results.into_iter().enumerate() {
            let Some((result, attempts, calls, stderr)) = result else {
                first_error.get_or_insert(StageError::ItemNotRun(i));
                continue;
            };
            outcome.attempts = outcome.attempts.max(attempts);
            let (start_ms, duration_ms) = timings[i];
            outcome.item_runs.push(super::record::ItemRun {
                index: i,
                start_ms,
                duration_ms,
                status: match &result {
                    Ok(_) if attempts == 0 => StageStatus::Cached,
                    Ok(_) => StageStatus::Succeeded,
                    Err(_) => StageStatus::Failed,
                },
                attempts,
                model_calls: u32::try_from(calls.len()).unwrap_or(u32::MAX),
            });
            outcome.model_calls.extend(calls);
            if !stderr.is_empty() {
                let kept = outcome.stderr.get_or_insert_with(String::new);
                if kept.len() < STDERR_KEPT {
                    kept.push_str(&format!("[item {i}] {stderr}\n"));
                }
            }
            match result {
                Ok(output) => outputs.push(output),
                Err(error) if keep_going => {
                    outcome.notes.push(format!("item {i} failed: {error}"));
                    outcome.failed_items += 1;
                    outputs.push(Value::Null);
                }
                Err(error) => {
                    first_error.get_or_insert_with(|| StageError::Item {
                        index: i,
                        error: Box::new(error),
                    });
                }
            }
        }
        if let Some(error) = first_error {
            return Err(error);
        }
        if outcome.failed_items > 0 && outcome.failed_items == outputs.len() {
            return Err(StageError::AllItemsFailed(outputs.len()));
        }
        Ok(Value::Array(outputs))
    }

    /// Say so when the stage's stdout (or an item's) was not UTF-8: its output has the bad bytes
    /// replaced with U+FFFD, which a stage reading it would otherwise take for what was written.
    fn note_lossy_stdout(&self, stage: &Stage, outcome: &mut StageOutcome) {
        let mut lossy = self
            .lossy_stdout
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut items: Vec<Option<usize>> = Vec::new();
        lossy.retain(|(id, item)| {
            let ours = *id == stage.id;
            if ours {
                items.push(*item);
            }
            !ours
        });
        drop(lossy);
        // An attempt retried adds its item again.
        items.sort_unstable();
        items.dedup();
        if items.is_empty() {
            return;
        }
        let whose = match items.iter().flatten().collect::<Vec<_>>().as_slice() {
            [] => "stdout".to_string(),
            [one] => format!("item {one}'s stdout"),
            many => format!("the stdout of {} items", many.len()),
        };
        let kept = match stage.extras().output_path {
            Some(_) if stage.format == OutputFormat::Text => {
                "; `output.path` has the bytes as written"
            }
            _ => "",
        };
        outcome.notes.push(format!(
            "warning: {whose} was not UTF-8: the output has each invalid byte sequence replaced \
             with U+FFFD{kept}"
        ));
    }

    /// Journal a finished item; the first line that cannot be written is warned about.
    fn note_item(&self, stage: &Stage, index: usize, fingerprint: &str, output: &Value) {
        if let Some(warning) = self
            .journal
            .item_finished(&stage.id, index, fingerprint, output)
        {
            self.reporter.line(&format!("warning: {warning}"));
        }
    }

    fn execute_with_retries(
        &self,
        stage: &Stage,
        rendered: &Rendered,
        item: Option<usize>,
    ) -> UnitResult {
        let mut calls = Vec::new();
        // What the last attempt said on stderr.
        let mut stderr = String::new();
        let policy = RetryPolicy::new(stage.extras().retries, stage.extras().retry_backoff);
        let (result, attempts) = policy.run(
            |_| {
                stderr.clear();
                self.execute_once(stage, rendered, item, &mut calls, &mut stderr)
            },
            |error, attempt, wait| {
                if Interrupt::global().is_set() {
                    return AfterFailure::Stop(error);
                }
                self.reporter.line(&format!(
                    "  ↻ {} attempt {attempt} failed: {error}; retrying in {:.1}s",
                    stage.id,
                    wait.as_secs_f64()
                ));
                sleep_interruptibly(wait);
                AfterFailure::Retry
            },
        );
        (result, attempts, calls, stderr)
    }

    fn execute_once(
        &self,
        stage: &Stage,
        rendered: &Rendered,
        item: Option<usize>,
        calls: &mut Vec<ModelCall>,
        stderr: &mut String,
    ) -> Result<Value, StageError> {
        match rendered {
            Rendered::None => Ok(Value::Null),
            Rendered::Process(spec) => {
                let mut spec = spec.clone();
                spec.timeout = stage.extras().timeout;
                spec.max_stdout = Some(self.max_output(stage));
                let ok_codes = match &stage.action {
                    Action::Command(p) | Action::Shell(p) => p.ok_codes().to_vec(),
                    _ => vec![0],
                };
                // Marked and journaled, so a resume after a kill can find what it left running.
                spec.env.push((
                    super::journal::MARKER.to_string(),
                    self.journal.marker(&stage.id, item),
                ));
                spec.env.extend(self.traceparent(stage, item));
                let journal_start = |pid: u32| {
                    if let Some(warning) = self.journal.process_started(&stage.id, item, pid) {
                        self.reporter.line(&format!("warning: {warning}"));
                    }
                };
                let output =
                    process::run_observed(&spec, &journal_start).map_err(|error| match error {
                        process::ProcessError::OutputTooLarge { .. } => StageError::Limit(
                            self.too_large(
                                stage,
                                &format!(
                                    "`{}` wrote more to stdout than",
                                    spec.argv.first().map_or("", String::as_str)
                                ),
                            ) + "; the command was stopped",
                        ),
                        error => StageError::Process(error),
                    })?;
                *stderr = process::tail(&output.stderr, STDERR_KEPT);
                if !ok_codes.contains(&output.code) {
                    return Err(StageError::ExitCode {
                        program: spec.argv[0].clone(),
                        code: output.code,
                        stderr_tail: output.stderr_tail(),
                    });
                }
                let text = match String::from_utf8(output.stdout) {
                    Ok(text) => text,
                    Err(error) => {
                        let text = String::from_utf8_lossy(error.as_bytes()).to_string();
                        self.lossy_stdout
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push((stage.id.clone(), item));
                        if stage.extras().output_path.is_some()
                            && stage.format == OutputFormat::Text
                        {
                            self.raw_stdout
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .insert((stage.id.clone(), item), error.into_bytes());
                        }
                        text
                    }
                };
                self.parse_and_validate(stage, &text, false)
                    .map_err(StageError::Output)
            }
            Rendered::Template(text) => self
                .parse_and_validate(stage, text, false)
                .map_err(StageError::Output),
            Rendered::Prompt(request) => Ok(self.prompt(stage, item, request, calls)?),
            Rendered::Builtin(args) => {
                let Action::Uses { builtin, .. } = &stage.action else {
                    return Err(StageError::Internal("a built-in stage without a built-in"));
                };
                if builtin.name == ask::NAME {
                    let ask_person =
                        |prompt: &str| self.reporter.suspend(|| ask::ask_on_terminal(prompt));
                    let (chosen, _) = ask::answer(
                        &stage.id,
                        args,
                        &self.options.answers,
                        self.options.dry_run,
                        &ask_person,
                    )?;
                    return Ok(Value::String(chosen));
                }
                let ctx = BuiltinCtx {
                    cwd: &self.runtime.cwd,
                    writes: &self.prepared.writes,
                    locks: &self.prepared.locks,
                    cancel: crate::builtins::Cancel::after(stage.extras().timeout),
                    max_output: self.max_output(stage),
                };
                let value = (builtin.run)(args, &ctx)?;
                let value = match (stage.format, value) {
                    (OutputFormat::Text, Value::String(s)) => Value::String(s),
                    (_, value) => value,
                };
                if let Some(schema) = &stage.schema {
                    schema
                        .validate(&value)
                        .map_err(|errors| StageError::Schema(schema_failure(schema, &errors)))?;
                }
                Ok(value)
            }
            Rendered::Workflow(inputs) => {
                let Action::Workflow { workflow, .. } = &stage.action else {
                    return Err(StageError::Internal("a workflow stage without a workflow"));
                };
                let inputs = super::inputs::resolve_inputs(workflow, inputs.clone(), &Map::new())?;
                let record = super::run_nested(
                    workflow,
                    self.runtime,
                    self.options,
                    inputs,
                    &stage.id,
                    self.reporter,
                    {
                        let (outputs, items) = self.items.within(&stage.id, item);
                        super::Within {
                            journal: self.journal.within(&stage.id, item),
                            outputs,
                            items,
                        }
                    },
                );
                if item.is_none() {
                    self.sub_runs
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(stage.id.clone(), super::record::SubRun::of(&record));
                }
                match record.status {
                    RunStatus::Completed | RunStatus::Exited => {
                        Ok(record.outputs.unwrap_or(Value::Object(Map::new())))
                    }
                    _ => Err(StageError::SubWorkflow {
                        workflow: workflow.name.clone(),
                        status: record.status.as_str(),
                        error: record.error.unwrap_or_default(),
                    }),
                }
            }
        }
    }

    /// `TRACEPARENT` for a process of `stage` (item `item`) while the run is traced: the span
    /// it runs under. Outside the fingerprint: it names this run.
    fn traceparent(&self, stage: &Stage, item: Option<usize>) -> Option<(String, String)> {
        super::otlp::exporting().then(|| {
            (
                "TRACEPARENT".to_string(),
                self.journal.traceparent(&stage.id, item),
            )
        })
    }

    /// Ask the model; when the reply does not validate, go on with the conversation: the reply
    /// as the model's turn, the problems as the next user turn.
    fn prompt(
        &self,
        stage: &Stage,
        item: Option<usize>,
        request: &ModelRequest,
        calls: &mut Vec<ModelCall>,
    ) -> Result<Value, PromptError> {
        let mut request = request.clone();
        // A provider that runs a program (`claude -p`, a `command` model) hands it on.
        request.env.extend(self.traceparent(stage, item));
        let mut attempt = 0;
        loop {
            if Interrupt::global().is_set() {
                return Err(PromptError::Interrupted);
            }
            let reply = self.runtime.models.complete(&request)?;
            calls.push(ModelCall {
                model: request.alias.clone(),
                attempt: attempt + 1,
                latency_ms: reply.latency_ms,
                usage: reply.usage,
                cost_usd: reply.cost_usd,
                retries: reply.retried.retries,
                throttled: reply.retried.throttled,
                waited_ms: reply.retried.waited_ms,
                replayed: reply.replayed,
                rejected: None,
                content: super::otlp::captures_content().then(|| super::record::CallContent {
                    system: request.system.clone(),
                    messages: request.messages(),
                    reply: reply.text.clone(),
                }),
            });
            match self.parse_and_validate(stage, &reply.text, true) {
                Ok(value) => return Ok(value),
                Err(problems) => {
                    let summary = problems.join("; ");
                    if let Some(call) = calls.last_mut() {
                        call.rejected = Some(summary.clone());
                    }
                    if attempt == stage.extras().repair {
                        return Err(PromptError::Rejected {
                            attempts: attempt + 1,
                            problems,
                        });
                    }
                    request.corrections.push(crate::models::Correction {
                        reply: quoted_reply(&reply.text),
                        problems: format!(
                            "Your previous reply could not be used:\n{}\n\nReply again with only the corrected JSON document.",
                            problems.iter().map(|p| format!("- {p}")).collect::<Vec<_>>().join("\n")
                        ),
                    });
                }
            }
            attempt += 1;
        }
    }

    /// Read an action's text per the stage's output format, and validate it.
    fn parse_and_validate(
        &self,
        stage: &Stage,
        text: &str,
        from_model: bool,
    ) -> Result<Value, Vec<String>> {
        let value = match stage.format {
            OutputFormat::Text => Value::String(text.to_string()),
            OutputFormat::Lines => Value::Array(
                text.lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(|l| Value::String(l.to_string()))
                    .collect(),
            ),
            OutputFormat::Json => {
                let candidate = if from_model {
                    extract_json(text).unwrap_or(text)
                } else {
                    text
                };
                serde_json::from_str::<Value>(candidate.trim()).map_err(|e| {
                    vec![format!(
                        "the output is not valid JSON ({e}); it begins {:?}",
                        crate::floor::secrets::redact(text)
                            .chars()
                            .take(80)
                            .collect::<String>()
                    )]
                })?
            }
        };
        if let Some(schema) = &stage.schema {
            schema
                .validate(&value)
                .map_err(|errors| vec![schema_failure(schema, &errors)])?;
        }
        Ok(value)
    }
}

/// Whether a stage's action is work worth reusing on resume.
fn is_work(stage: &Stage) -> bool {
    match &stage.action {
        Action::None | Action::Template(_) => false,
        Action::Uses { builtin, .. } => builtin.writes,
        Action::Command(_) | Action::Shell(_) | Action::Prompt(_) | Action::Workflow { .. } => true,
    }
}

/// How much of a rejected reply a repair turn quotes back, in bytes.
const MAX_QUOTED_REPLY: usize = 32 << 10;

/// A rejected reply as a repair turn quotes it: whole up to [`MAX_QUOTED_REPLY`] bytes, else
/// its beginning and how much was left out.
fn quoted_reply(text: &str) -> String {
    if text.len() <= MAX_QUOTED_REPLY {
        return text.to_string();
    }
    let mut end = MAX_QUOTED_REPLY;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[... {} more bytes of this reply are not repeated here]",
        &text[..end],
        text.len() - end
    )
}

fn schema_failure(schema: &crate::schema::Schema, errors: &[String]) -> String {
    let name = schema.name.rsplit('/').next().unwrap_or(&schema.name);
    format!("the output does not match {name}: {}", errors.join("; "))
}

fn sleep_interruptibly(total: Duration) {
    let deadline = Instant::now() + total;
    while Instant::now() < deadline && !Interrupt::global().is_set() {
        std::thread::sleep(Duration::from_millis(50).min(deadline - Instant::now()));
    }
}

/// Evaluate a `with` tree: strings are templates, a single `{{ expression }}` keeps its type.
fn eval_with(tree: &WithTree, scope: &minijinja::Value) -> Result<Value, RenderError> {
    let failed = |problem| RenderError::With {
        keys: Vec::new(),
        problem,
    };
    Ok(match tree {
        WithTree::Literal(value) => value.clone(),
        WithTree::Template(tmpl) => {
            let value = tmpl
                .eval(scope)
                .map_err(|e| failed(WithProblem::Template(e)))?;
            if value.is_undefined() {
                return Err(failed(WithProblem::Undefined));
            }
            serde_json::to_value(&value).map_err(|e| failed(WithProblem::NotJson(e)))?
        }
        WithTree::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| eval_with(i, scope))
                .collect::<Result<_, _>>()?,
        ),
        WithTree::Object(entries) => {
            let mut map = Map::new();
            for (key, value) in entries {
                let value = eval_with(value, scope).map_err(|mut error| {
                    if let RenderError::With { keys, .. } = &mut error {
                        keys.insert(0, key.clone());
                    }
                    error
                })?;
                map.insert(key.clone(), value);
            }
            Value::Object(map)
        }
    })
}

/// The bytes of an artifact file: text as is, anything else as pretty JSON.
fn artifact_bytes(value: &Value, format: OutputFormat) -> Vec<u8> {
    match (format, value) {
        (OutputFormat::Text, Value::String(text)) => text.clone().into_bytes(),
        (OutputFormat::Lines, Value::Array(lines)) => {
            let mut out = String::new();
            for line in lines {
                out.push_str(line.as_str().unwrap_or_default());
                out.push('\n');
            }
            out.into_bytes()
        }
        _ => {
            let mut bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
            bytes.push(b'\n');
            bytes
        }
    }
}

/// The workflow's persistent state (`state/<workflow>.json`).
pub(crate) fn load_state(state_dir: &Path, workflow: &str) -> Value {
    let path = state_dir.join("state").join(format!("{workflow}.json"));
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Map::new()))
}

pub(crate) fn save_state(
    state_dir: &Path,
    workflow: &str,
    values: &[(String, Value)],
) -> std::io::Result<()> {
    let mut state = load_state(state_dir, workflow);
    if let Value::Object(map) = &mut state {
        for (key, value) in values {
            map.insert(key.clone(), value.clone());
        }
    }
    let path = state_dir.join("state").join(format!("{workflow}.json"));
    let bytes = serde_json::to_vec_pretty(&state).map_err(std::io::Error::other)?;
    let mut bytes = crate::floor::secrets::redact_bytes(&bytes).into_owned();
    bytes.push(b'\n');
    crate::builtins::paths::write_atomic(&path, &bytes).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::record::{listed, FingerprintDocument, FingerprintParts};

    /// The JSON a rendered action is hashed as, which every cache entry's fingerprint depends
    /// on: as the `serde_json::Value` documents it was built as before.
    #[test]
    fn rendered_actions_are_written_as_their_documents() {
        let process = Rendered::Process(ProcessSpec {
            argv: vec!["sh".into(), "-c".into(), "echo \"1\"".into()],
            stdin: Some(b"in".to_vec()),
            cwd: Some("sub/dir".into()),
            env: vec![("A".into(), "b".into())],
            timeout: None,
            max_stdout: None,
        });
        let process_doc = json!({
            "argv": ["sh", "-c", "echo \"1\""],
            "stdin": sha256_hex(b"in"),
            "cwd": "sub/dir",
            "env": [["A", "b"]],
        });
        let prompt = Rendered::Prompt(ModelRequest {
            alias: "haiku".into(),
            system: None,
            prompt: "say ü".into(),
            temperature: Some(0.2),
            max_tokens: Some(50),
            timeout: None,
            env: Vec::new(),
            ..ModelRequest::default()
        });
        let prompt_doc = json!({
            "model": "haiku", "system": null, "prompt": "say ü", "temperature": 0.2, "max_tokens": 50,
        });
        let cases = [
            (Rendered::None, Value::Null),
            (process, process_doc),
            (prompt, prompt_doc),
            (Rendered::Template("t".into()), json!({ "text": "t" })),
            (
                Rendered::Builtin(json!({ "path": "x", "n": [1, 2] })),
                json!({ "path": "x", "n": [1, 2] }),
            ),
        ];
        for (rendered, document) in &cases {
            assert_eq!(
                serde_json::to_string(rendered).unwrap(),
                serde_json::to_string(document).unwrap()
            );
        }
        let (all, documents): (Vec<Rendered>, Vec<Value>) = cases.into_iter().unzip();
        assert_eq!(sha256_json(&all), sha256_json(&documents));
        // Written by hand, the same bytes.
        let mut buffer = Vec::new();
        assert_eq!(
            Rendered::sha256_of(&all, &mut buffer).to_string(),
            sha256_json(&documents)
        );
        assert_eq!(buffer, serde_json::to_vec(&documents).unwrap());
    }

    /// The hand-written JSON of commands and templates is serde_json's whatever their text
    /// holds, and stops where serde_json stops (a working folder that is not UTF-8).
    #[test]
    fn rendered_actions_written_by_hand_are_serde_jsons() {
        use std::os::unix::ffi::OsStrExt;
        let process = |argv: &[&str], cwd: Option<std::path::PathBuf>, env: &[(&str, &str)]| {
            Rendered::Process(ProcessSpec {
                argv: argv.iter().map(ToString::to_string).collect(),
                stdin: None,
                cwd,
                env: env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                timeout: None,
                max_stdout: None,
            })
        };
        let odd = "tab\t \"quoted\" back\\slash \u{1} ünïcödé";
        let cases = vec![
            vec![process(&[], None, &[])],
            vec![process(
                &["sh", "-c", odd],
                Some(odd.into()),
                &[(odd, odd), ("B", "")],
            )],
            vec![Rendered::Template(odd.into()), Rendered::None],
            vec![
                Rendered::Workflow(serde_json::Map::from_iter([("k".into(), json!(odd))])),
                process(&["a"], None, &[("A", "1")]),
            ],
            Vec::new(),
        ];
        let mut buffer = Vec::new();
        for rendered in &cases {
            assert_eq!(
                Rendered::sha256_of(rendered, &mut buffer).to_string(),
                sha256_json(rendered)
            );
            assert_eq!(buffer, serde_json::to_vec(rendered).unwrap());
        }
        let not_utf8 = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(b"bad\xff"));
        let rendered = [process(&["a"], Some(not_utf8), &[])];
        assert!(serde_json::to_vec(&rendered).is_err());
        assert_eq!(
            Rendered::sha256_of(&rendered, &mut buffer).to_string(),
            sha256_json(&rendered)
        );
        assert_eq!(buffer, br#"[{"argv":["a"],"stdin":null,"cwd":"#);
    }

    /// A fingerprint is the hash of the parts as one compact JSON document, fields in a fixed
    /// order: changing that silently would invalidate every cache entry users hold.
    #[test]
    fn fingerprints_hash_the_parts_document_as_written() {
        let deps = [("a", Some("f00d")), ("b", None)];
        let parts =
            FingerprintParts::new("d1".into(), "a1".into(), None, Some("claude".into()), None);
        let document = format!(
            r#"{{"version":"{CACHE_VERSION}","definition":"d1","action":"a1","deps":{{"a":"f00d","b":null}},"schema":null,"model":"claude","sub_workflow":null}}"#
        );
        assert_eq!(
            sha256_json(&FingerprintDocument::of(
                &parts,
                &listed(&deps),
                &mut [[0; 64]; 2]
            )),
            sha256_hex(document.as_bytes())
        );
        // Written by hand, the same bytes, ids to escape or not.
        let mut written = Vec::new();
        FingerprintDocument::of(&parts, &listed(&deps), &mut [[0; 64]; 2]).write(&mut written);
        assert_eq!(written, document.as_bytes());
        let odd = [("a \"b\"", Some("x")), ("c\\d\n", None)];
        written.clear();
        FingerprintDocument::of(&parts, &listed(&odd), &mut [[0; 64]; 2]).write(&mut written);
        assert_eq!(
            written,
            serde_json::to_vec(&FingerprintDocument::of(
                &parts,
                &listed(&odd),
                &mut [[0; 64]; 2]
            ))
            .unwrap()
        );
        // Hashed as it is written, in pieces: the same digest as the whole document's, for a
        // stage with thousands of upstream stages too.
        let ids: Vec<String> = (0..3000).map(|i| format!("s{i}")).collect();
        let many: Vec<(&str, Option<&str>)> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), (i % 7 != 0).then_some("ab12")))
            .collect();
        let mut hex = [[0; 64]; 2];
        let many = listed(&many);
        let large = FingerprintDocument::of(&parts, &many, &mut hex);
        written.clear();
        large.write(&mut written);
        assert!(written.len() > 3 * 4096);
        assert_eq!(large.digest(), crate::floor::hash::sha256_digest(&written));
        assert_eq!(
            crate::floor::hash::hex(
                &FingerprintDocument::of(&parts, &listed(&deps), &mut [[0; 64]; 2]).digest()
            ),
            sha256_hex(document.as_bytes())
        );
        // The record keeps the parts without the upstream hashes and without absent parts; a
        // record written with them as `null` reads the same.
        let recorded = serde_json::to_string(&parts).unwrap();
        assert_eq!(
            recorded,
            format!(
                r#"{{"version":"{CACHE_VERSION}","definition":"d1","action":"a1","model":"claude"}}"#
            )
        );
        let older = format!(
            r#"{{"version":"{CACHE_VERSION}","definition":"d1","action":"a1","schema":null,"model":"claude","sub_workflow":null}}"#
        );
        assert_eq!(
            serde_json::from_str::<FingerprintParts>(&older).unwrap(),
            parts
        );
    }
}
