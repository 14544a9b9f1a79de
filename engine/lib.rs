//! stagegraph: a declarative pipeline engine. A workflow is a TOML stage graph; one generic
//! executor loads, checks, plans and runs it.

pub mod builtins;
pub mod models;
pub mod run;
pub mod template;
