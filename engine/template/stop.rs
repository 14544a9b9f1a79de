//! Stopping an evaluation at the run's interrupt or its stage's deadline.
//!
//! minijinja's fuel bounds how many steps one evaluation runs, not when it ends: the stage that
//! evaluates a template sets its cancellation handle here ([`within`]) for the thread it runs
//! on, and the evaluation looks at it as it goes: every value printed, every `~` and every step
//! of a `range` loop. A print or a `~` fails at once; a `range` loop ends early, and the
//! evaluation is then turned into an error ([`guard`]), so a template stopped halfway never
//! passes for one that finished.

use std::cell::{Cell, RefCell};

use minijinja::{Error, ErrorKind};

use crate::floor::cancel::{Cancel, Stopped};

thread_local! {
    static CANCEL: Cell<Cancel> = Cell::new(Cancel::default());
    static STOPPED: RefCell<Option<Stopped>> = const { RefCell::new(None) };
    static TICKS: Cell<u32> = const { Cell::new(0) };
}

/// The handle is looked at once in this many checks (a look costs a clock read).
const EVERY: u32 = 64;

/// Run `f` with `cancel` as the handle of the evaluations on this thread.
pub(crate) fn within<T>(cancel: Cancel, f: impl FnOnce() -> T) -> T {
    struct Restore(Cancel);
    impl Drop for Restore {
        fn drop(&mut self) {
            CANCEL.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CANCEL.with(|c| c.replace(cancel)));
    f()
}

/// Why the evaluation on this thread must stop, if it must (looked at once in [`EVERY`] calls;
/// once stopped, every later call says so until [`guard`] ends the evaluation).
pub(crate) fn stopped() -> Option<Stopped> {
    if let Some(why) = STOPPED.with(|s| s.borrow().clone()) {
        return Some(why);
    }
    let tick = TICKS.with(|t| {
        let n = t.get().wrapping_add(1);
        t.set(n);
        n
    });
    if !tick.is_multiple_of(EVERY) {
        return None;
    }
    let why = CANCEL.with(Cell::get).check().err()?;
    STOPPED.with(|s| *s.borrow_mut() = Some(why.clone()));
    Some(why)
}

/// An error when the evaluation on this thread must stop.
pub(crate) fn check() -> Result<(), Error> {
    match stopped() {
        Some(why) => Err(error(&why)),
        None => Ok(()),
    }
}

fn error(why: &Stopped) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("{why} while the template was evaluated"),
    )
}

/// One evaluation: its result, or the reason it was stopped when it was (a `range` loop that
/// ended early leaves a result that must not be used).
pub(crate) fn guard<T>(f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    let outer = STOPPED.with(|s| s.borrow_mut().take());
    let result = f();
    let why = STOPPED.with(|s| std::mem::replace(&mut *s.borrow_mut(), outer));
    match why {
        Some(why) => Err(error(&why)),
        None => result,
    }
}

/// minijinja's `range`, whose loop ends when the evaluation must stop.
pub(crate) fn range(
    lower: isize,
    upper: Option<isize>,
    step: Option<isize>,
) -> Result<minijinja::Value, Error> {
    let items: std::sync::Arc<[isize]> = minijinja::functions::range(lower, upper, step)?
        .try_iter()?
        .filter_map(|v| v.as_i64().and_then(|n| isize::try_from(n).ok()))
        .collect();
    Ok(minijinja::Value::make_iterable(move || Steps {
        items: std::sync::Arc::clone(&items),
        next: 0,
    }))
}

struct Steps {
    items: std::sync::Arc<[isize]>,
    next: usize,
}

impl Iterator for Steps {
    type Item = minijinja::Value;

    fn next(&mut self) -> Option<minijinja::Value> {
        if stopped().is_some() {
            return None;
        }
        let item = *self.items.get(self.next)?;
        self.next += 1;
        Some(minijinja::Value::from(item as i64))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.items.len() - self.next;
        (0, Some(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn an_evaluation_stops_at_its_deadline_and_says_so() {
        let env = crate::template::environment();
        let scope = minijinja::context! {};
        let started = Instant::now();
        // Set-only loops, which print nothing, end with their range; printing ones at a print.
        for source in [
            "{% for i in range(100000) %}{% for j in range(100000) %}{% set x = j %}{% endfor %}{% endfor %}",
            "{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}",
        ] {
            let started = Instant::now();
            let cancel = Cancel::after(Some(Duration::from_millis(200)));
            let result = within(cancel, || guard(|| env.render_str(source, &scope)));
            let error = result.expect_err(source);
            assert!(
                error.to_string().contains("timed out after 0.2s while the template was evaluated"),
                "{error}"
            );
            assert!(started.elapsed() < Duration::from_secs(20), "{source}");
        }
        assert!(started.elapsed() < Duration::from_secs(40));
        // The handle is this thread's for `within` only; `range` is minijinja's otherwise.
        let plain = guard(|| {
            env.render_str(
                "{{ range(2, 9, 3)|list }} {{ range(3, 0, -1)|list }}",
                &scope,
            )
        });
        assert_eq!(plain.unwrap(), "[2,5,8] [3,2,1]");
        assert!(guard(|| env.render_str("{{ range(0, 1, 0) }}", &scope)).is_err());
        assert!(guard(|| env.render_str("{{ range(200000) }}", &scope)).is_err());
    }
}
