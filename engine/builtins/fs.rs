//! Built-ins: fs.read, fs.exists, fs.glob, fs.hash, fs.write, fs.copy, fs.move, fs.remove.

use super::Builtin;

pub(crate) fn builtins() -> Vec<Builtin> {
    Vec::new()
}
