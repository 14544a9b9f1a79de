//! The template language: minijinja with strict undefined, plus the functions and filters that
//! let a workflow shape data without a script.
//!
//! Printed values follow [`compiled::value_to_text`]: `none` prints nothing, booleans print
//! `true`/`false`, lists and maps print as JSON. Templates whose name ends in `.sh` (the `shell`
//! action's scripts) also shell-quote every value they print, so data can never become shell
//! syntax.

use minijinja::{AutoEscape, Environment, UndefinedBehavior};

pub mod compiled;
pub mod functions;

pub use compiled::{Scope, StageSlot, StageTable, Tmpl};

/// A fresh environment with the engine's functions and filters and strict undefined.
pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_keep_trailing_newline(true);
    env.set_auto_escape_callback(|name| {
        if name.ends_with(".sh") {
            AutoEscape::Custom("shell")
        } else {
            AutoEscape::None
        }
    });
    env.set_formatter(|out, state, value| {
        if value.is_safe() {
            return minijinja::escape_formatter(out, state, value);
        }
        let text = compiled::value_to_text(value);
        if state.auto_escape() == AutoEscape::Custom("shell") {
            out.write_str(&functions::shell_quote(&text))?;
        } else {
            out.write_str(&text)?;
        }
        Ok(())
    });
    functions::register(&mut env);
    env
}
