//! Built-ins: transcript.delta.

use super::Builtin;

pub(crate) fn builtins() -> Vec<Builtin> {
    Vec::new()
}
