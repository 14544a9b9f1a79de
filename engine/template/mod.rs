//! The template language: minijinja with strict undefined, plus the functions and filters that
//! let a workflow shape data without a script.

use minijinja::{Environment, UndefinedBehavior};

pub mod functions;

/// A fresh environment with the engine's functions and filters and strict undefined.
pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_keep_trailing_newline(true);
    functions::register(&mut env);
    env
}
