//! Why one attempt of a stage failed: a kind per source of failure, each rendered as the text
//! the record and the retry line have always shown.

use crate::builtins::BuiltinError;
use crate::floor::process::ProcessError;
use crate::run::inputs::InputError;

/// One failed attempt of a stage (or of one `foreach` item).
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// The process could not be started, timed out or was interrupted.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// The process ended with a code not in `ok_codes`.
    #[error("`{program}` exited with code {code}{}", detail(.stderr_tail))]
    ExitCode {
        /// `argv[0]`.
        program: String,
        /// Its exit code.
        code: i32,
        /// The end of what it said on stderr.
        stderr_tail: String,
    },
    /// The output is larger than the stage may keep.
    #[error("{0}")]
    Limit(String),
    /// The output does not parse or does not validate: each problem.
    #[error("{}", .0.join("; "))]
    Output(Vec<String>),
    /// A built-in's output does not validate against the stage's schema.
    #[error("{0}")]
    Schema(String),
    /// The model call, or the repair of its reply, failed.
    #[error("{0}")]
    Prompt(String),
    /// A built-in failed (an `ask` stage included).
    #[error(transparent)]
    Builtin(#[from] BuiltinError),
    /// A sub-workflow's inputs do not resolve.
    #[error(transparent)]
    Inputs(#[from] InputError),
    /// A sub-workflow did not complete.
    #[error("sub-workflow `{workflow}` {status}: {error}")]
    SubWorkflow {
        /// Its name.
        workflow: String,
        /// How it ended.
        status: &'static str,
        /// Its error.
        error: String,
    },
    /// A checked stage whose rendered action does not match its action (a bug).
    #[error("internal: {0}")]
    Internal(&'static str),
}

fn detail(tail: &str) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!(": {tail}")
    }
}
