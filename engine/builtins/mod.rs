//! Built-in actions (`uses = "fs.read"`): each declares a JSON Schema for its `with` arguments
//! and for its output, so `check` can validate both statically, and a flag saying whether it
//! writes, so a dry-run knows which ones it may execute.

use std::path::{Path, PathBuf};

use serde_json::Value;

mod attempt;
mod catalog;
mod fs;
mod http;
mod json;
mod markdown;
pub mod paths;
mod transcript;

pub use paths::WriteRoots;

/// What a built-in may see of the run.
pub struct BuiltinCtx<'a> {
    /// The run's working directory; relative paths resolve against it.
    pub cwd: &'a Path,
    /// The `[workflow] writes` roots; every write must land inside one of them.
    pub writes: &'a WriteRoots,
}

impl BuiltinCtx<'_> {
    /// A path argument resolved against the run's working directory.
    pub fn resolve(&self, path: &str) -> PathBuf {
        self.cwd.join(path)
    }
}

/// A built-in action's failure: a lowercase message that reads after "error: ".
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct BuiltinError(pub String);

impl BuiltinError {
    pub fn new(message: impl Into<String>) -> Self {
        BuiltinError(message.into())
    }
}

pub type BuiltinResult = Result<Value, BuiltinError>;

/// One built-in action.
pub struct Builtin {
    pub name: &'static str,
    pub description: &'static str,
    /// True when the action changes anything outside the run (a dry-run skips it).
    pub writes: bool,
    /// JSON Schema of `with`, after templates are rendered.
    pub with_schema: fn() -> Value,
    /// JSON Schema of the output.
    pub output_schema: fn() -> Value,
    pub run: fn(&Value, &BuiltinCtx) -> BuiltinResult,
}

/// Every built-in, sorted by name.
pub fn all() -> &'static [Builtin] {
    &REGISTRY
}

/// The built-in of that name.
pub fn lookup(name: &str) -> Option<&'static Builtin> {
    REGISTRY.iter().find(|builtin| builtin.name == name)
}

static REGISTRY: std::sync::LazyLock<Vec<Builtin>> = std::sync::LazyLock::new(|| {
    let mut all: Vec<Builtin> = [
        fs::builtins(),
        json::builtins(),
        http::builtins(),
        markdown::builtins(),
        transcript::builtins(),
        catalog::builtins(),
        attempt::builtins(),
    ]
    .into_iter()
    .flatten()
    .collect();
    all.sort_by_key(|builtin| builtin.name);
    all
});
