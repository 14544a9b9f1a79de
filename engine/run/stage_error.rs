//! Why a stage failed: a kind per source of failure (rendering its templates, one attempt of
//! its action, what it does with the output), each rendered as the text the record and the
//! retry line have always shown.

use std::fmt;
use std::path::PathBuf;

use crate::builtins::BuiltinError;
use crate::floor::process::ProcessError;
use crate::models::ModelError;
use crate::run::inputs::InputError;

/// Why a stage (or one `foreach` item) failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StageError {
    /// A template or expression of the stage did not render.
    #[error(transparent)]
    Render(#[from] RenderError),
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
    #[error(transparent)]
    Prompt(#[from] PromptError),
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
    /// A `foreach` item failed, and with it the stage.
    #[error("item {index}: {error}")]
    Item {
        /// The item's index.
        index: usize,
        /// Why it failed.
        error: Box<StageError>,
    },
    /// A `foreach` item that never ran, an earlier one having failed the stage.
    #[error("item {0} did not run: an earlier item failed")]
    ItemNotRun(usize),
    /// Every item of a `foreach` stage with `on_item_error = "continue"` failed.
    #[error("all {0} items failed")]
    AllItemsFailed(usize),
    /// An `assert` that does not hold: its rendered message, else its expression.
    #[error("{}", .message.clone().unwrap_or_else(|| format!("assertion failed: {}", .that)))]
    Assertion {
        /// The expression, as written.
        that: String,
        /// Its `message`, rendered.
        message: Option<String>,
    },
    /// The output could not be written to `output.path`.
    #[error("cannot write {}: {error}", .path.display())]
    WriteOutput {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        error: std::io::Error,
    },
}

/// A template or expression that did not render or evaluate.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RenderError {
    /// Rendering failed (minijinja's error, with where and why).
    #[error("{part}: {}", describe(.error))]
    Template {
        /// The template.
        part: Part,
        /// minijinja's error.
        error: minijinja::Error,
    },
    /// `foreach` evaluated to something that is not a list.
    #[error("`foreach` must give a list, not {0}")]
    NotAList(minijinja::value::ValueKind),
    /// A value printed into code that another interpreter runs.
    #[error(
        "argument {position}: a value is printed into the code `{interpreter}` runs, where \
         it would be read as code; pass it as a separate argument or through `env` instead"
    )]
    IntoCode {
        /// The argument, counted from 1.
        position: usize,
        /// The interpreter.
        interpreter: String,
    },
    /// A `with` value that did not evaluate: the keys of the tables down to it, outermost
    /// first, and why.
    #[error("{}{problem}", with_keys(.keys))]
    With {
        /// The keys of the tables it is in.
        keys: Vec<String>,
        /// Why it did not evaluate.
        problem: WithProblem,
    },
}

/// Why a `with` value did not evaluate.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WithProblem {
    /// Its template failed.
    #[error("{}", describe(.0))]
    Template(minijinja::Error),
    /// It evaluated to nothing.
    #[error("undefined value in `with`")]
    Undefined,
    /// Its value is not JSON.
    #[error("{0}")]
    NotJson(serde_json::Error),
}

fn with_keys(keys: &[String]) -> String {
    keys.iter().map(|key| format!("`with.{key}`: ")).collect()
}

/// Which template of a stage (or of the workflow) a render error is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    /// `if`.
    If,
    /// `foreach`.
    Foreach,
    /// `cache.key`.
    CacheKey,
    /// `assert[].that`.
    Assert,
    /// `assert[].message`.
    AssertMessage,
    /// `output.path`.
    OutputPath,
    /// `set_state.<name>`.
    SetState(String),
    /// `exit_if`.
    ExitIf,
    /// `exit_message`.
    ExitMessage,
    /// `system`.
    System,
    /// `prompt_prefix`.
    PromptPrefix,
    /// `prompt`.
    Prompt,
    /// `template`.
    Template,
    /// An argument of `command` (or the script of `shell`), counted from 1.
    Argument(usize),
    /// `stdin`.
    Stdin,
    /// `cwd`.
    Cwd,
    /// `env.<name>`.
    Env(String),
    /// `[workflow] child_env.<name>`.
    ChildEnv(String),
    /// An entry of `[workflow] writes`.
    Writes,
    /// `[workflow] records.project`.
    RecordsProject,
    /// `[outputs] <name>`.
    Output(String),
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Part::If => f.write_str("`if`"),
            Part::Foreach => f.write_str("`foreach`"),
            Part::CacheKey => f.write_str("`cache.key`"),
            Part::Assert => f.write_str("`assert`"),
            Part::AssertMessage => f.write_str("assert message"),
            Part::OutputPath => f.write_str("`output.path`"),
            Part::SetState(name) => write!(f, "`set_state.{name}`"),
            Part::ExitIf => f.write_str("`exit_if`"),
            Part::ExitMessage => f.write_str("`exit_message`"),
            Part::System => f.write_str("`system`"),
            Part::PromptPrefix => f.write_str("`prompt_prefix`"),
            Part::Prompt => f.write_str("`prompt`"),
            Part::Template => f.write_str("`template`"),
            Part::Argument(position) => write!(f, "argument {position}"),
            Part::Stdin => f.write_str("`stdin`"),
            Part::Cwd => f.write_str("`cwd`"),
            Part::Env(name) => write!(f, "`env.{name}`"),
            Part::ChildEnv(name) => write!(f, "`child_env.{name}`"),
            Part::Writes => f.write_str("`[workflow] writes`"),
            Part::RecordsProject => f.write_str("`[workflow] records.project`"),
            Part::Output(name) => write!(f, "output `{name}`"),
        }
    }
}

impl Part {
    /// The error of this template failing with `error`.
    pub(crate) fn failed(self, error: minijinja::Error) -> RenderError {
        RenderError::Template { part: self, error }
    }
}

/// Why a prompt stage's model call, or the repair of its reply, failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PromptError {
    /// The run was interrupted before a call.
    #[error("interrupted")]
    Interrupted,
    /// The model layer failed (its errors name the model already).
    #[error(transparent)]
    Model(#[from] ModelError),
    /// Every reply, the repairs included, was rejected: the problems of the last one.
    #[error(
        "the model's reply was rejected after {attempts} attempt(s): {}",
        .problems.join("; ")
    )]
    Rejected {
        /// How many replies were asked for.
        attempts: u32,
        /// What was wrong with the last.
        problems: Vec<String>,
    },
}

fn detail(tail: &str) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!(": {tail}")
    }
}

/// A template error as one line: what went wrong and where.
pub(crate) fn describe(error: &minijinja::Error) -> String {
    let mut text = error
        .detail()
        .map_or_else(|| error.kind().to_string(), str::to_string);
    if let (Some(name), Some(line)) = (error.name(), error.line()) {
        let name = name.strip_prefix("value:").unwrap_or(name);
        text.push_str(&format!(" (in {name}, line {line})"));
    }
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        text.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::{Part, PromptError, RenderError, StageError, WithProblem};

    #[test]
    fn errors_read_as_records_have_always_shown_them() {
        let nested = RenderError::With {
            keys: vec!["request".into(), "headers".into()],
            problem: WithProblem::Undefined,
        };
        assert_eq!(
            StageError::from(nested).to_string(),
            "`with.request`: `with.headers`: undefined value in `with`"
        );
        let assertion = |message: Option<&str>| StageError::Assertion {
            that: "output.n > 1".into(),
            message: message.map(str::to_string),
        };
        assert_eq!(
            assertion(None).to_string(),
            "assertion failed: output.n > 1"
        );
        assert_eq!(assertion(Some("too few")).to_string(), "too few");
        let rejected = PromptError::Rejected {
            attempts: 2,
            problems: vec!["not JSON".into(), "no `name`".into()],
        };
        assert_eq!(
            StageError::from(rejected).to_string(),
            "the model's reply was rejected after 2 attempt(s): not JSON; no `name`"
        );
        let item = StageError::Item {
            index: 3,
            error: Box::new(StageError::ItemNotRun(4)),
        };
        assert_eq!(
            item.to_string(),
            "item 3: item 4 did not run: an earlier item failed"
        );
        assert_eq!(Part::Argument(2).to_string(), "argument 2");
        assert_eq!(
            Part::SetState("seen".into()).to_string(),
            "`set_state.seen`"
        );
        assert_eq!(Part::AssertMessage.to_string(), "assert message");
    }
}
