//! stagegraph: a declarative pipeline engine. A workflow is a TOML stage graph; one generic
//! executor loads, checks, plans and runs it.
//!
//! The phases, each a module with a type that proves it ran:
//! `load` (TOML -> [`load::RawWorkflow`]), `check` (-> [`check::Workflow`]), `plan`
//! (-> [`plan::Plan`]) and `run` (-> [`run::RunRecord`]).

pub mod builtins;
pub mod check;
pub mod claude;
pub mod diag;
pub mod engine;
pub(crate) mod finally;
pub mod floor;
pub mod format;
/// Not part of the API: the entry points of the fuzz targets, for the fuzz crate and the
/// regression test that replays its inputs.
#[doc(hidden)]
pub mod fuzzing;
pub mod library;
pub mod load;
pub mod mcp;
// Model errors carry the provider's error body for the user; they are rare and off the hot path.
#[allow(clippy::result_large_err)]
pub mod models;
pub mod plan;
pub mod run;
pub mod schema;
pub mod template;

pub use check::{Stage, Workflow};
pub use claude::{HookChange, SettingsError, SettingsScope};
pub use diag::{Diagnostic, DiagnosticKind, Escape, Severity};
pub use engine::{
    config_schema, interrupt, migrate_recordings, read_inputs, redact, register_secrets,
    spawn_detached, workflow_schema, CheckReport, EjectError, Engine, InputError, Listing,
    RunFailure, RunRequest, StateDir,
};
pub use load::RawWorkflow;
pub use models::Migration;
pub use plan::Plan;
pub use run::{ResumeFrom, RunRecord, RunStatus};

/// The version of every JSON document the command line prints (`--format json`).
pub const JSON_VERSION: u32 = 1;

/// Exit codes of the command line.
pub mod exit {
    /// Completed, or ended early by `exit_if`.
    pub const SUCCESS: i32 = 0;
    /// The run failed.
    pub const FAILED: i32 = 1;
    /// The workflow, its inputs or the command line are invalid.
    pub const INVALID: i32 = 2;
    /// Interrupted (Ctrl-C).
    pub const INTERRUPTED: i32 = 130;
}
