//! A built-in's failure, and the wordings every built-in shares.

use std::io;
use std::path::Path;

use serde_json::Value;

/// The error for a file larger than the stage's output limit.
pub(crate) fn too_large(path: &Path, limit: u64) -> BuiltinError {
    let size = crate::floor::size::format_size(limit);
    let more = crate::floor::size::format_size(limit.saturating_mul(4)).replace(' ', "");
    BuiltinError::new(format!(
        "`{}` is larger than {size}, the stage's output limit (max_output); raise it with \
         `max_output = \"{more}\"` on the stage or in [workflow]",
        path.display()
    ))
}

/// A built-in action's failure: a lowercase message that reads after "error: ".
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BuiltinError(pub String);

impl BuiltinError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        BuiltinError(message.into())
    }
}

/// An interrupt or the stage's deadline, in the words a built-in fails with.
impl From<crate::floor::cancel::Stopped> for BuiltinError {
    fn from(stop: crate::floor::cancel::Stopped) -> Self {
        BuiltinError(stop.to_string())
    }
}

pub(crate) type BuiltinResult = Result<Value, BuiltinError>;

/// An i/o failure as a lowercase fragment: "cannot read `x`: no such file or folder".
pub(crate) fn io_error(doing: &str, path: &Path, err: &io::Error) -> BuiltinError {
    BuiltinError::new(format!(
        "{doing} `{}`: {}",
        path.display(),
        describe_io(err)
    ))
}

pub(crate) fn describe_io(err: &io::Error) -> String {
    match err.kind() {
        io::ErrorKind::NotFound => "no such file or folder".to_string(),
        io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        io::ErrorKind::AlreadyExists => "it already exists".to_string(),
        _ => {
            // The OS wording, minus its "(os error N)" tail, starting lowercase.
            let text = err.to_string();
            let text = match text.find(" (os error") {
                Some(at) => &text[..at],
                None => &text[..],
            };
            let mut chars = text.chars();
            match chars.next() {
                Some(first) => first.to_lowercase().chain(chars).collect(),
                None => "i/o error".to_string(),
            }
        }
    }
}
