//! Built-ins: catalog.merge.

use super::Builtin;

pub(crate) fn builtins() -> Vec<Builtin> {
    Vec::new()
}
