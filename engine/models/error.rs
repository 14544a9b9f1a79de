//! The errors of the model layer, with enough shape for the executor to decide what to do next:
//! report a configuration problem, retry, or give up.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::floor::cancel::Stopped;
use crate::floor::process::ProcessError;

/// One problem in a configuration file, located by file, line and column.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConfigProblem {
    /// The file the problem is in (`built-in` for the built-in configuration).
    pub file: String,
    pub line: usize,
    pub column: usize,
    /// The alias whose definition holds the problem, when it is inside one.
    pub alias: Option<String>,
    pub message: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        if let Some(alias) = &self.alias {
            write!(f, "model `{alias}`: ")?;
        }
        f.write_str(&self.message)
    }
}

/// The recorded request closest to one that was never recorded, for a replay miss.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NearestRecording {
    /// The recording's file name.
    pub file: String,
    pub alias: String,
    /// The fields of the request that differ (`prompt`, `system`, `provider`, ...).
    pub differs_in: Vec<String>,
    /// A few `-`/`+` lines showing how the prompts differ; empty when they are equal.
    pub prompt_diff: String,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ModelError {
    /// Every problem found in the configuration files, one per line.
    #[error("{}", join_problems(.problems))]
    Config { problems: Vec<ConfigProblem> },

    #[error("cannot read model configuration {}: {source}", .path.display())]
    ConfigRead {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("undefined model alias `{alias}`{}", suggest(.suggestion, .defined))]
    UndefinedAlias {
        alias: String,
        suggestion: Option<String>,
        defined: Vec<String>,
    },

    #[error("model `{alias}`: the API key variable `{variable}` is not set in the environment")]
    MissingKey { alias: String, variable: String },

    /// The request never got an HTTP answer: connection refused, reset, DNS, TLS.
    #[error("model `{alias}`: {message}{}", attempts_note(*.attempts))]
    Transport {
        alias: String,
        message: String,
        retryable: bool,
        attempts: u32,
    },

    /// The provider answered with an error status; `body` is its error message, keys redacted.
    #[error("model `{alias}`: HTTP {status} from {url}: {body}{}", attempts_note(*.attempts))]
    Status {
        alias: String,
        url: String,
        status: u16,
        body: String,
        retry_after: Option<Duration>,
        attempts: u32,
    },

    /// A success status with a body that is not the expected JSON.
    #[error("model `{alias}`: unexpected response from {url}: {message}")]
    Response {
        alias: String,
        url: String,
        message: String,
    },

    #[error("model `{alias}`: no reply within {}s", .after.as_secs_f64())]
    Timeout { alias: String, after: Duration },

    #[error("model `{alias}`: {message}")]
    Command {
        alias: String,
        message: String,
        retryable: bool,
    },

    #[error("model `{alias}`: command exited with code {code}{}", stderr_note(.stderr_tail))]
    CommandFailed {
        alias: String,
        code: i32,
        stderr_tail: String,
    },

    #[error("interrupted")]
    Interrupted,

    /// The call would take the run's spending past its budget, so it was not started.
    #[error("model `{alias}`: not started: the budget of ${limit} ({set_by}) would be exceeded; ${spent:.4} spent so far{}{}", reserved_note(*.reserved, *.in_flight), estimate_note(*.estimate))]
    Budget {
        alias: String,
        limit: f64,
        set_by: String,
        spent: f64,
        /// What the calls in flight are expected to cost, and how many they are.
        reserved: f64,
        in_flight: usize,
        estimate: f64,
    },

    /// The Claude Code CLI ran and reported an error in its result.
    #[error("model `{alias}`: claude reported an error{}: {message}", status_note(*.status))]
    Claude {
        alias: String,
        message: String,
        /// The API's HTTP status, when the error came from the API.
        status: Option<u16>,
    },

    #[error("{}", replay_miss(.alias, .dir, .hash, .nearest))]
    ReplayMiss {
        alias: String,
        dir: PathBuf,
        /// The file name the request would have been recorded under; `None` for a `replay`
        /// alias, which matches recordings whatever provider made them.
        hash: Option<String>,
        nearest: Option<Box<NearestRecording>>,
    },

    #[error("model `{alias}`: recording {}: {message}", .path.display())]
    Recording {
        alias: String,
        path: PathBuf,
        message: String,
    },
}

impl ModelError {
    /// What a model program (a `command` provider, the `claude` CLI) failing to run means for
    /// the call: a timeout or an I/O error may pass on a retry; a program that cannot start
    /// will not.
    pub(crate) fn from_process(alias: &str, error: ProcessError) -> ModelError {
        let message = error.to_string();
        match error {
            ProcessError::TimedOut { after } => ModelError::Timeout {
                alias: alias.to_string(),
                after,
            },
            ProcessError::Interrupted => ModelError::Interrupted,
            ProcessError::Io { .. } => ModelError::Command {
                alias: alias.to_string(),
                message,
                retryable: true,
            },
            ProcessError::Empty
            | ProcessError::NotFound { .. }
            | ProcessError::Spawn { .. }
            | ProcessError::NotExecutable { .. }
            | ProcessError::NoInterpreter { .. }
            | ProcessError::OutputTooLarge { .. } => ModelError::Command {
                alias: alias.to_string(),
                message,
                retryable: false,
            },
        }
    }

    /// Why a call to `alias` stopped before its answer: the run was interrupted, the stage's
    /// `timeout` passed (reported as the model's timeout, as when the request itself runs out),
    /// or the call could not be waited for.
    pub(crate) fn stopped(alias: &str, stop: Stopped) -> ModelError {
        match stop {
            Stopped::Interrupted => ModelError::Interrupted,
            Stopped::TimedOut(after) => ModelError::Timeout {
                alias: alias.to_string(),
                after,
            },
            Stopped::NoThread(_) | Stopped::Lost => ModelError::Transport {
                alias: alias.to_string(),
                message: stop.to_string(),
                retryable: false,
                attempts: 1,
            },
        }
    }

    /// Whether sending the same request again might succeed.
    #[cfg(test)]
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            ModelError::Transport { retryable, .. } | ModelError::Command { retryable, .. } => {
                *retryable
            }
            ModelError::Status { status, .. } => is_retryable_status(*status),
            ModelError::Timeout { .. } | ModelError::CommandFailed { .. } => true,
            ModelError::Claude { status, .. } => status.is_some_and(is_retryable_status),
            ModelError::Config { .. }
            | ModelError::ConfigRead { .. }
            | ModelError::UndefinedAlias { .. }
            | ModelError::MissingKey { .. }
            | ModelError::Response { .. }
            | ModelError::Interrupted
            | ModelError::Budget { .. }
            | ModelError::ReplayMiss { .. }
            | ModelError::Recording { .. } => false,
        }
    }
}

/// 429 (rate limited), 408, and server errors, including Anthropic's 529 (overloaded).
pub(crate) fn is_retryable_status(status: u16) -> bool {
    status == 408 || status == 429 || (500..=599).contains(&status)
}

fn join_problems(problems: &[ConfigProblem]) -> String {
    let lines: Vec<String> = problems.iter().map(ConfigProblem::to_string).collect();
    lines.join("\n")
}

fn suggest(suggestion: &Option<String>, defined: &[String]) -> String {
    match suggestion {
        Some(near) => format!("; did you mean `{near}`?"),
        None if defined.is_empty() => "; no model aliases are defined".to_string(),
        None => format!("; defined: {}", defined.join(", ")),
    }
}

fn attempts_note(attempts: u32) -> String {
    if attempts > 1 {
        format!(" (after {attempts} attempts)")
    } else {
        String::new()
    }
}

fn estimate_note(estimate: f64) -> String {
    if estimate > 0.0 {
        format!(", and this call is expected to cost ${estimate:.4}")
    } else {
        String::new()
    }
}

fn reserved_note(reserved: f64, in_flight: usize) -> String {
    match in_flight {
        0 => String::new(),
        1 => format!(", ${reserved:.4} held by 1 call in flight"),
        n => format!(", ${reserved:.4} held by {n} calls in flight"),
    }
}

fn status_note(status: Option<u16>) -> String {
    status
        .map(|status| format!(" (HTTP {status})"))
        .unwrap_or_default()
}

fn stderr_note(tail: &str) -> String {
    if tail.is_empty() {
        " and no stderr".to_string()
    } else {
        format!(": {tail}")
    }
}

fn replay_miss(
    alias: &str,
    dir: &std::path::Path,
    hash: &Option<String>,
    nearest: &Option<Box<NearestRecording>>,
) -> String {
    let mut out = match hash {
        Some(hash) => format!(
            "model `{alias}`: request {hash} was never recorded in {}",
            dir.display()
        ),
        None => format!(
            "model `{alias}`: no recording in {} matches this request",
            dir.display()
        ),
    };
    match nearest {
        None => out.push_str("\n  the folder holds no recordings"),
        Some(near) => {
            out.push_str(&format!(
                "\n  nearest recording: {} (alias `{}`), which differs in {}",
                near.file,
                near.alias,
                if near.differs_in.is_empty() {
                    "nothing hashed (was the file edited?)".to_string()
                } else {
                    near.differs_in.join(", ")
                }
            ));
            for line in near.prompt_diff.lines() {
                out.push_str("\n    ");
                out.push_str(line);
            }
        }
    }
    out
}
