//! Built-ins: json.read, json.write, jsonl.read.

use super::Builtin;

pub(crate) fn builtins() -> Vec<Builtin> {
    Vec::new()
}
