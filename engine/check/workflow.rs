//! The handoff of check: a [`Workflow`] and its [`Stage`]s, every reference resolved, every
//! template and schema compiled. A value of these types exists only when check found no error.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::builtins::Builtin;
use crate::diag::Diagnostic;
use crate::floor::Sparse;
use indexmap::IndexMap;

use crate::format::{InputDecl, OnError, OnItemError, OutputFormat, RecordsDef};
use crate::load::RawWorkflow;
use crate::schema::Schema;
use crate::template::Tmpl;

/// How large an output may be unless the workflow or the stage says (`max_output`).
pub(crate) const DEFAULT_MAX_OUTPUT: u64 = 64 << 20;

/// A checked workflow: every reference resolved, every template and schema compiled.
pub struct Workflow {
    pub(crate) name: String,
    /// `[workflow] description`.
    pub(crate) description: Option<String>,
    /// The declared inputs.
    pub(crate) inputs: IndexMap<String, InputDecl>,
    /// `[workflow] env`: the environment variables templates may read.
    pub(crate) env: Vec<String>,
    /// `[workflow] always_exit_zero`.
    pub(crate) always_exit_zero: bool,
    /// `[workflow] hook`.
    pub(crate) hook: Option<crate::format::HookHost>,
    /// `[workflow] records`: where and how the run's records are kept.
    pub(crate) records: Option<RecordsDef>,
    /// `[workflow] budget_usd`: the most the run's model calls may cost.
    pub(crate) budget_usd: Option<f64>,
    /// `[workflow] max_output` in bytes, or the default.
    pub(crate) max_output: u64,
    /// The files as loaded, for locations in diagnostics found after check (the document
    /// itself is freed).
    pub(crate) raw: RawWorkflow,
    pub(crate) stages: Vec<Stage>,
    /// Stage indexes in a topological order.
    pub(crate) order: Vec<usize>,
    /// For each stage, the stages that wait for it.
    pub(crate) dependents: Vec<Vec<usize>>,
    pub(crate) outputs: Vec<(String, Tmpl)>,
    pub(crate) child_env: Vec<(String, Tmpl)>,
    pub(crate) writes: Vec<Tmpl>,
    pub(crate) lock: Option<CheckedLock>,
    /// `[workflow] records.project`: the project folder a user-located record is keyed by.
    pub(crate) records_project: Option<Tmpl>,
    /// `[workflow] records.keep_size`, in bytes.
    pub(crate) records_keep_size: Option<u64>,
    /// `[workflow] records.max_size`, in bytes.
    pub(crate) records_max_size: Option<u64>,
    /// SHA-256 of every file of the chain, top first.
    pub(crate) file_hashes: Vec<(String, String)>,
    /// Warnings found while checking.
    pub(crate) warnings: Vec<Diagnostic>,
}

impl Workflow {
    /// The workflow's name (its file's name without `.toml`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `[workflow] always_exit_zero`: the command exits 0 however the run ends (a hook's host
    /// reads any other code as a verdict).
    pub fn always_exit_zero(&self) -> bool {
        self.always_exit_zero
    }

    /// `[workflow] hook`: the host the workflow runs as a hook of, if any.
    pub(crate) fn hook(&self) -> Option<crate::format::HookHost> {
        self.hook
    }

    /// The warnings the check found (a workflow with an error is never built).
    pub fn warnings(&self) -> &[Diagnostic] {
        &self.warnings
    }

    /// The stages, in the order of the file.
    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }
}

impl std::fmt::Debug for Workflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workflow")
            .field("name", &self.name)
            .finish()
    }
}

pub(crate) struct CheckedLock {
    pub path: Tmpl,
    pub busy: crate::format::Busy,
    pub stale_after: Option<Duration>,
    pub message: Option<Tmpl>,
}

/// One checked stage.
///
/// What most stages leave unset (guards, limits, retries, model options) is kept apart in
/// [`StageExtras`], allocated only for a stage that sets any of it; so are the texts of its
/// guards ([`StageText`]) and a process's stdin, cwd, environment and exit codes
/// ([`ProcessAction`]), and the rarer actions are boxed. A workflow of 10,000 stages held 648
/// bytes a stage, then 384; now 232, its definition hash held as 32 bytes.
pub struct Stage {
    pub(crate) id: String,
    pub(crate) index: usize,
    /// The stage's texts as written, for display and messages.
    pub(crate) text: StageText,
    pub(crate) action: Action,
    /// The stages that must finish first (explicit `after` and inferred references), sorted.
    pub(crate) deps: Vec<usize>,
    pub(crate) format: OutputFormat,
    pub(crate) schema: Option<Arc<Schema>>,
    pub(crate) cache: Option<CacheSpec>,
    pub(crate) on_error: OnError,
    /// Runs once the run has ended (`finally = true`).
    pub(crate) finally: bool,
    /// SHA-256 of the stage's definition as written (after overlays).
    pub(crate) definition_hash: [u8; 32],
    /// `None` when every field of it is as [`StageExtras::NONE`] has it ([`Sparse::boxed`]).
    pub(crate) extras: Option<Box<StageExtras>>,
}

/// The fields of a [`Stage`] that most stages leave unset; see [`Stage::extras`].
pub(crate) struct StageExtras {
    pub if_: Option<Tmpl>,
    pub exit_if: Option<Tmpl>,
    pub exit_message: Option<Tmpl>,
    pub asserts: Vec<(Tmpl, Option<Tmpl>)>,
    pub foreach: Option<Tmpl>,
    pub output_path: Option<Tmpl>,
    pub set_state: Vec<(String, Tmpl)>,
    pub timeout: Option<Duration>,
    /// The stage's own `max_output`, in bytes.
    pub max_output: Option<u64>,
    pub retries: u32,
    pub retry_backoff: Duration,
    pub repair: u32,
    /// Items of a `foreach` that run at once, at most (besides `--jobs`).
    pub concurrency: Option<usize>,
    pub on_item_error: OnItemError,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    /// The output a dry-run assumes for the stage.
    pub dry_run_output: Option<Box<Value>>,
}

impl StageExtras {
    /// A stage that sets none of them: no guard, no limit, no retry, a retry's backoff of one
    /// second and one repair (the defaults of the format).
    pub(crate) const NONE: StageExtras = StageExtras {
        if_: None,
        exit_if: None,
        exit_message: None,
        asserts: Vec::new(),
        foreach: None,
        output_path: None,
        set_state: Vec::new(),
        timeout: None,
        max_output: None,
        retries: 0,
        retry_backoff: Duration::from_secs(1),
        repair: 1,
        concurrency: None,
        on_item_error: OnItemError::Fail,
        temperature: None,
        max_tokens: None,
        dry_run_output: None,
    };
}

impl Sparse for StageExtras {
    fn is_unset(&self) -> bool {
        let none = &Self::NONE;
        self.if_.is_none()
            && self.exit_if.is_none()
            && self.exit_message.is_none()
            && self.asserts.is_empty()
            && self.foreach.is_none()
            && self.output_path.is_none()
            && self.set_state.is_empty()
            && self.timeout.is_none()
            && self.max_output.is_none()
            && self.retries == none.retries
            && self.retry_backoff == none.retry_backoff
            && self.repair == none.repair
            && self.concurrency.is_none()
            && self.on_item_error == none.on_item_error
            && self.temperature.is_none()
            && self.max_tokens.is_none()
            && self.dry_run_output.is_none()
    }
}

static NO_EXTRAS: StageExtras = StageExtras::NONE;

/// A stage's texts as written: what `plan` shows and what messages quote.
#[derive(Debug, Default)]
pub(crate) struct StageText {
    pub description: Option<Box<str>>,
    /// The action's own text: the command line, the first line of the shell script, the name
    /// of the template file (or `inline`); empty for the other actions.
    pub action: Box<str>,
    /// `None` when the stage has no guard, loop or assertion (most stages).
    guards: Option<Box<GuardTexts>>,
}

/// The texts of a stage's guards, loop and assertions, as written.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct GuardTexts {
    pub if_: Option<Box<str>>,
    pub exit_if: Option<Box<str>>,
    pub foreach: Option<Box<str>>,
    /// Each assertion's `that`.
    pub asserts: Vec<String>,
}

impl Sparse for GuardTexts {
    fn is_unset(&self) -> bool {
        *self == GuardTexts::default()
    }
}

impl StageText {
    pub(crate) fn new(
        description: Option<Box<str>>,
        action: Box<str>,
        guards: GuardTexts,
    ) -> StageText {
        StageText {
            description,
            action,
            guards: guards.boxed(),
        }
    }

    pub(crate) fn if_(&self) -> Option<&str> {
        self.guards.as_ref()?.if_.as_deref()
    }

    pub(crate) fn exit_if(&self) -> Option<&str> {
        self.guards.as_ref()?.exit_if.as_deref()
    }

    pub(crate) fn foreach(&self) -> Option<&str> {
        self.guards.as_ref()?.foreach.as_deref()
    }

    /// Each assertion's `that`.
    pub(crate) fn asserts(&self) -> &[String] {
        self.guards.as_ref().map_or(&[], |g| &g.asserts)
    }
}

pub(crate) struct CacheSpec {
    pub key: Option<Tmpl>,
    pub ttl: Option<Duration>,
}

/// What a stage does.
pub(crate) enum Action {
    None,
    Command(ProcessAction),
    Shell(ProcessAction),
    /// Boxed, as the rarer and larger actions are: a stage's action is as large as its
    /// largest kind.
    Prompt(Box<PromptAction>),
    Template(Tmpl),
    Uses {
        builtin: &'static Builtin,
        with: Box<WithTree>,
    },
    Workflow {
        workflow: Arc<Workflow>,
        with: Vec<(String, WithTree)>,
    },
}

impl Stage {
    /// Its guards, limits, retries and model options ([`StageExtras::NONE`] when it sets none).
    pub(crate) fn extras(&self) -> &StageExtras {
        self.extras.as_deref().unwrap_or(&NO_EXTRAS)
    }

    /// The stage's id (its key under `[stages]`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// What the stage does: "command", "shell", "prompt", "template", "uses", "workflow" or
    /// "none".
    pub fn kind(&self) -> &'static str {
        self.action.kind()
    }

    /// The ids of the stages it waits for (named in `after` or referenced), in the order of
    /// the file.
    pub fn after<'w>(&self, workflow: &'w Workflow) -> Vec<&'w str> {
        self.deps
            .iter()
            .map(|&dep| workflow.stages[dep].id.as_str())
            .collect()
    }
}

impl Action {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Action::None => "none",
            Action::Command(_) => "command",
            Action::Shell(_) => "shell",
            Action::Prompt(_) => "prompt",
            Action::Template(_) => "template",
            Action::Uses { .. } => "uses",
            Action::Workflow { .. } => "workflow",
        }
    }
}

/// `command` and `shell`: argv templates (a shell is `sh -c <script>`), and the stdin, cwd,
/// environment and exit codes few stages set.
pub(crate) struct ProcessAction {
    pub argv: Vec<Tmpl>,
    /// `None` when the stage sets none of them.
    options: Option<Box<ProcessOptions>>,
}

/// What a process stage may set besides its argv.
#[derive(Default)]
pub(crate) struct ProcessOptions {
    pub stdin: Option<Tmpl>,
    pub cwd: Option<Tmpl>,
    pub env: Vec<(String, Tmpl)>,
    /// `None`: `[0]`.
    pub ok_codes: Option<Box<[i32]>>,
}

impl Sparse for ProcessOptions {
    fn is_unset(&self) -> bool {
        self.stdin.is_none() && self.cwd.is_none() && self.env.is_empty() && self.ok_codes.is_none()
    }
}

impl ProcessAction {
    pub(crate) fn new(argv: Vec<Tmpl>, options: ProcessOptions) -> ProcessAction {
        ProcessAction {
            argv,
            options: options.boxed(),
        }
    }

    pub(crate) fn stdin(&self) -> Option<&Tmpl> {
        self.options.as_ref()?.stdin.as_ref()
    }

    pub(crate) fn cwd(&self) -> Option<&Tmpl> {
        self.options.as_ref()?.cwd.as_ref()
    }

    pub(crate) fn env(&self) -> &[(String, Tmpl)] {
        self.options.as_ref().map_or(&[], |o| &o.env)
    }

    /// The exit codes that count as success.
    pub(crate) fn ok_codes(&self) -> &[i32] {
        self.options
            .as_ref()
            .and_then(|o| o.ok_codes.as_deref())
            .unwrap_or(&[0])
    }
}

/// A `prompt` stage's templates and model alias.
pub(crate) struct PromptAction {
    pub prompt: Tmpl,
    pub system: Option<Tmpl>,
    /// `prompt_prefix`: sent ahead of the prompt, marked for a provider's prompt cache.
    pub prefix: Option<Tmpl>,
    pub model: String,
}

/// A `with` value: literals stay literals, strings are templates, tables and arrays recurse.
pub(crate) enum WithTree {
    Literal(Value),
    Template(Tmpl),
    Array(Vec<WithTree>),
    Object(Vec<(String, WithTree)>),
}

impl WithTree {
    /// The value as written, when no part of it is a template.
    pub(crate) fn literal(&self) -> Option<Value> {
        match self {
            WithTree::Literal(value) => Some(value.clone()),
            WithTree::Template(Tmpl::Literal(text)) => Some(Value::String(text.clone())),
            WithTree::Template(_) => None,
            WithTree::Array(items) => items
                .iter()
                .map(WithTree::literal)
                .collect::<Option<_>>()
                .map(Value::Array),
            WithTree::Object(entries) => entries
                .iter()
                .map(|(k, v)| v.literal().map(|v| (k.clone(), v)))
                .collect::<Option<_>>()
                .map(Value::Object),
        }
    }

    /// The entries of a table whose values are written without templates.
    pub(crate) fn literal_entries(&self) -> IndexMap<String, Value> {
        match self {
            WithTree::Object(entries) => entries
                .iter()
                .filter_map(|(k, v)| v.literal().map(|v| (k.clone(), v)))
                .collect(),
            _ => IndexMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workflow holds one a stage for its whole run: what few stages set stays out of line.
    #[test]
    fn a_checked_stage_stays_small() {
        assert!(std::mem::size_of::<Stage>() <= 232);
        assert!(std::mem::size_of::<Action>() <= 40);
        let plain = ProcessAction::new(Vec::new(), ProcessOptions::default());
        assert!(plain.options.is_none());
        assert_eq!(plain.ok_codes(), [0]);
        let text = StageText::new(None, "echo".into(), GuardTexts::default());
        assert!(text.guards.is_none() && text.asserts().is_empty());
    }
}
