//! The built-ins over web sites: `web.crawl`, a polite, bounded crawl of one site into a snapshot
//! folder.

use super::Builtin;

mod crawl;

/// The web built-ins.
pub(super) fn builtins() -> Vec<Builtin> {
    crawl::builtins()
}
