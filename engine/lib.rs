//! stagegraph: a declarative pipeline engine. A workflow is a TOML stage graph; one generic
//! executor loads, checks, plans and runs it.
//!
//! The phases, each a private module with a type that proves it ran: `load` (TOML ->
//! [`RawWorkflow`]), `check` (-> [`Workflow`]), `plan` (-> [`Plan`]) and `run` (->
//! [`RunRecord`]). What is public is the face re-exported here: [`Engine`], which finds, loads,
//! checks, runs and resumes workflows, the types its methods take and return, a few functions
//! for the program that hosts it, [`exit`] codes and [`JSON_VERSION`].
// A diagnostic's kind carries its typed fields, so results that fail with one are large by
// design, as are the few closures that check a path against a schema's alternatives.
#![allow(clippy::result_large_err, clippy::type_complexity)]

// The phases and what they stand on; none of them is public, the face below is.
mod builtins;
mod check;
mod claude;
mod diag;
mod doctor;
mod engine;
mod finally;
mod floor;
mod format;
mod library;
mod load;
mod mcp;
// Model errors carry the provider's error body for the user; they are rare and off the hot path.
#[allow(clippy::result_large_err)]
mod models;
mod plan;
mod project;
mod run;
mod schema;
mod selection;
mod template;
mod testing;

/// Not part of the API: the entry points of the fuzz targets, for the fuzz crate and the
/// regression test that replays its inputs. It may change with any release.
#[doc(hidden)]
pub mod fuzzing;

pub use check::{Stage, Workflow};
pub use claude::{enable_toggle, HookChange, SettingsError, SettingsScope, Toggle};
pub use diag::{Diagnostic, DiagnosticKind, Escape, Severity};
pub use doctor::{doctor, Finding, Level, NEWEST_CLAUDE, OLDEST_CLAUDE};
pub use engine::{
    builtins_schema, config_schema, init, interrupt, migrate_recordings, read_inputs, reaper,
    redact, register_secrets, release_relocations, resume_inputs, spawn_detached, workflow_schema,
    CheckReport, EjectError, Engine, InitError, Initialized, InputError, Listing, RunFailure,
    RunRequest, StateDir,
};
pub use load::RawWorkflow;
pub use mcp::serve_mcp;
pub use models::Migration;
pub use plan::Plan;
pub use project::{Project, RootMarker};
pub use run::diff::RunDiff;
pub use selection::StageSelection;

/// A duration as a workflow writes them (`300s`, `10m`, `1h30m`, `500ms`).
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    floor::duration::parse(text)
}

/// A size as a workflow writes them (`500MB`, `64MiB`, `4096`), in bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    floor::size::parse_size(text)
}

pub use run::{ResumeFrom, RunRecord, RunStatus};
pub use testing::{
    test_schema, CaseOutcome, CaseReport, Recording, TestOptions, TestReport, TEST_SUFFIX,
};

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
