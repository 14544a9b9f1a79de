//! The template language: minijinja with strict undefined, plus the functions and filters that
//! let a workflow shape data without a script.
//!
//! Printed values follow [`text::value_to_text`]: `none` prints nothing, booleans print
//! `true`/`false`, lists and maps print as JSON. Templates whose name ends in `.sh` (the `shell`
//! action's scripts) also shell-quote every value they print, so data can never become shell
//! syntax. A `shell` script goes further ([`shell::render_script`]): its printed values never
//! reach the script text at all, but are passed in environment variables it references.
//!
//! minijinja's lexer can panic on some malformed input (`}}e` as an expression); every compile
//! goes through [`guarded`], which turns such a panic into a syntax error.

use minijinja::{AutoEscape, Environment, UndefinedBehavior};

pub(crate) mod compiled;
pub(crate) mod flow;
pub(crate) mod functions;
pub(crate) mod reads;
pub(crate) mod shell;
pub(crate) mod stop;
pub(crate) mod text;

pub(crate) use compiled::{Scope, StageSlot, StageTable, Tmpl};

/// A fresh environment with the engine's functions and filters and strict undefined.
pub(crate) fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_keep_trailing_newline(true);
    env.set_fuel(Some(compiled::FUEL));
    env.set_auto_escape_callback(|name| {
        if name.ends_with(".sh") {
            AutoEscape::Custom("shell")
        } else {
            AutoEscape::None
        }
    });
    env.set_formatter(|out, state, value| {
        stop::check()?;
        let value = &compiled::bounded(value)?;
        if shell::capturing() {
            out.write_str(&shell::capture(value)?)?;
            return Ok(());
        }
        if value.is_safe() {
            return minijinja::escape_formatter(out, state, value);
        }
        let text = text::value_to_text(value);
        if state.auto_escape() == AutoEscape::Custom("shell") {
            out.write_str(&functions::shell_quote(&text))?;
        } else {
            out.write_str(&text)?;
        }
        Ok(())
    });
    functions::register(&mut env);
    env.add_function("range", stop::range);
    env
}

/// A template's source as the engine compiles it: each `~` bounded
/// ([`reads::bounded_concat`]).
pub(crate) fn bounded_source(source: &str) -> String {
    reads::bounded_concat(source, false).unwrap_or_else(|| source.to_string())
}

/// Runs a minijinja compile (or a render that compiles) and turns a panic inside it into a
/// syntax error, without the panic's message reaching the terminal.
pub(crate) fn guarded<T>(
    f: impl FnOnce() -> Result<T, minijinja::Error>,
) -> Result<T, minijinja::Error> {
    use std::cell::Cell;
    thread_local! {
        static QUIET: Cell<bool> = const { Cell::new(false) };
    }
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
    let was = QUIET.with(|q| q.replace(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was));
    result.unwrap_or_else(|payload| {
        let why = payload
            .downcast_ref::<&str>()
            .map(std::string::ToString::to_string)
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(minijinja::Error::new(
            minijinja::ErrorKind::SyntaxError,
            format!("the template engine could not read this text ({why})"),
        ))
    })
}
