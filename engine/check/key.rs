//! Which template of the workflow a compiled template is: a typed (owner, field) key.
//!
//! Gathering queues each template under its key, compiling fills a map by key, and assembling
//! takes each template out by the same key; no name is built twice to find a template again.
//! The key says nothing about how the template is compiled (its minijinja name does that).

/// One template of a workflow.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum TemplateKey {
    /// A template of the stage at this index.
    Stage(usize, Field),
    /// `[outputs] <name>`.
    Output(String),
    /// `[workflow] child_env.<name>`.
    ChildEnv(String),
    /// `[workflow] writes[i]`.
    Write(usize),
    /// `[workflow] lock.path`.
    LockPath,
    /// `[workflow] lock.message`.
    LockMessage,
    /// `[workflow] records.project`.
    RecordsProject,
}

impl TemplateKey {
    /// The stage that owns the template, if a stage does.
    pub(crate) fn stage(&self) -> Option<usize> {
        match self {
            TemplateKey::Stage(index, _) => Some(*index),
            _ => None,
        }
    }
}

/// A duration of the workflow, parsed once by gather (its error a diagnostic there) and
/// taken by assemble.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum DurationKey {
    /// `timeout` of the stage at this index.
    Timeout(usize),
    /// `retry_backoff` of the stage at this index.
    RetryBackoff(usize),
    /// `cache.ttl` of the stage at this index.
    CacheTtl(usize),
    /// `[workflow] lock.stale_after`.
    LockStaleAfter,
}

/// A size of the workflow (`max_output`), parsed once by gather (its error a diagnostic there)
/// and taken by assemble.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum SizeKey {
    /// `[workflow] max_output`.
    Workflow,
    /// `max_output` of the stage at this index.
    Stage(usize),
    /// `[workflow] records.keep_size`.
    RecordsKeep,
    /// `[workflow] records.max_size`.
    RecordsMax,
}

/// A templated field of a stage.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Field {
    If,
    ExitIf,
    ExitMessage,
    AssertThat(usize),
    AssertMessage(usize),
    Foreach,
    OutputPath,
    SetState(String),
    CacheKey,
    Shell,
    Command(usize),
    Stdin,
    Cwd,
    Env(String),
    Prompt,
    System,
    PromptPrefix,
    Template,
    /// A string inside `with`, by its path of keys and array indexes.
    With(Vec<String>),
}
