//! The handoff of check: a [`Workflow`] and its [`Stage`]s, every reference resolved, every
//! template and schema compiled. A value of these types exists only when check found no error.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::builtins::Builtin;
use crate::diag::Diagnostic;
use crate::format::{OnError, OutputFormat, StageDef, WorkflowFile};
use crate::load::RawWorkflow;
use crate::schema::Schema;
use crate::template::Tmpl;

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
    /// `[workflow] records.project`: the project folder a user-located record is keyed by.
    pub records_project: Option<Tmpl>,
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
