//! The actions any workflow may use, whatever it is about: files and folders (`fs.*`), JSON
//! (`json.*`, `jsonl.read`), HTTP (`http.*`), URLs (`url.resolve`), locks (`lock.acquire`),
//! questions to the person running the workflow (`ask`) and failures turned into data (`try`).

use super::Builtin;

pub(crate) mod ask;
mod attempt;
mod digest;
mod dirs;
mod fs;
mod http;
mod json;
mod json_style;
mod lock;
mod url;
mod within;

/// The generic built-ins.
pub(super) fn builtins() -> Vec<Builtin> {
    [
        lock::builtins(),
        fs::builtins(),
        json::builtins(),
        http::builtins(),
        attempt::builtins(),
        ask::builtins(),
        dirs::builtins(),
        digest::builtins(),
        url::builtins(),
        within::builtins(),
    ]
    .into_iter()
    .flatten()
    .collect()
}
