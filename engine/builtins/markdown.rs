//! Built-ins: markdown.frontmatter.

use super::Builtin;

pub(crate) fn builtins() -> Vec<Builtin> {
    Vec::new()
}
