//! The built-ins over Markdown documents: `markdown.frontmatter` (the YAML frontmatter and its
//! traps), `markdown.sections` and `markdown.replace_section` (ATX sections), `markdown.claims`
//! (what a document cites, checked against its repository).

use super::Builtin;

mod claims;
mod frontmatter;
mod sections;

/// The Markdown built-ins.
pub(super) fn builtins() -> Vec<Builtin> {
    [
        frontmatter::builtins(),
        sections::builtins(),
        claims::builtins(),
    ]
    .into_iter()
    .flatten()
    .collect()
}
