//! The built-ins over a staged tree and the live tree it proposes to change: `tree.verify` and
//! `tree.promote`, driven by a promotion manifest.

use super::Builtin;

mod promote;

/// The tree built-ins.
pub(super) fn builtins() -> Vec<Builtin> {
    promote::builtins()
}
