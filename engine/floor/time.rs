//! The clocks: the wall clock as records and locks write it (RFC 3339 in UTC with
//! milliseconds), and [`Clock`], the monotonic clock the engine spaces its work by (record
//! rewrites, waits for a quiet file, announcements of a long wait). Code that spaces or waits
//! takes a [`Clock`] rather than reading `Instant::now` itself, so its unit tests can run it on
//! a fake clock that moves only when the code sleeps or the test says so, whatever the load.

use std::time::{Duration, Instant};

/// Now, in RFC 3339 with milliseconds (`2026-11-30T00:15:00.123Z`).
pub(crate) fn now_rfc3339() -> String {
    rfc3339_millis(chrono::Utc::now())
}

/// `at` as [`now_rfc3339`] writes it. A run of thousands of quick stages stamps two events a
/// stage, so the date and time of day are formatted once a second (per thread) and only the
/// milliseconds each time.
pub(crate) fn rfc3339_millis(at: chrono::DateTime<chrono::Utc>) -> String {
    thread_local! {
        static SECOND: std::cell::RefCell<(i64, String)> =
            const { std::cell::RefCell::new((i64::MIN, String::new())) };
    }
    let millis = at.timestamp_subsec_millis();
    if millis > 999 {
        // A leap second: rare enough for the general path.
        return at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    }
    SECOND.with(|second| {
        let mut second = second.borrow_mut();
        if second.0 != at.timestamp() {
            *second = (at.timestamp(), at.format("%Y-%m-%dT%H:%M:%S").to_string());
        }
        let mut out = String::with_capacity(second.1.len() + 5);
        out.push_str(&second.1);
        out.push('.');
        for digit in [millis / 100, millis / 10 % 10, millis % 10] {
            out.push(char::from(b'0' + digit as u8));
        }
        out.push('Z');
        out
    })
}

/// A monotonic clock: the machine's ([`Clock::system`], the default), or in unit tests a fake
/// one whose time passes only by [`Clock::sleep`] and [`Clock::advance`].
#[derive(Clone, Default)]
pub(crate) struct Clock {
    #[cfg(test)]
    fake: Option<std::sync::Arc<fake::Fake>>,
}

impl Clock {
    /// The machine's monotonic clock.
    pub(crate) fn system() -> Clock {
        Clock::default()
    }

    /// Now.
    pub(crate) fn now(&self) -> Instant {
        #[cfg(test)]
        {
            if let Some(fake) = &self.fake {
                return fake.now();
            }
        }
        Instant::now()
    }

    /// How long since `earlier` (zero when `earlier` is later than now).
    pub(crate) fn since(&self, earlier: Instant) -> Duration {
        self.now().saturating_duration_since(earlier)
    }

    /// Let `span` pass: the thread sleeps on the machine's clock; a fake clock moves on by
    /// `span` at once.
    pub(crate) fn sleep(&self, span: Duration) {
        #[cfg(test)]
        {
            if let Some(fake) = &self.fake {
                fake.sleep(span);
                return;
            }
        }
        std::thread::sleep(span);
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        #[cfg(test)]
        {
            if let Some(fake) = &self.fake {
                return write!(f, "Clock::fake({:?})", fake.elapsed());
            }
        }
        f.write_str("Clock::system")
    }
}

#[cfg(test)]
mod fake {
    use std::sync::{Mutex, PoisonError};
    use std::time::{Duration, Instant};

    type Hook = Box<dyn FnMut(u64) + Send>;

    /// A clock that stands still but when told to move.
    pub(super) struct Fake {
        origin: Instant,
        state: Mutex<State>,
    }

    struct State {
        elapsed: Duration,
        sleeps: u64,
        on_sleep: Option<Hook>,
    }

    impl Fake {
        pub(super) fn new() -> Fake {
            Fake {
                origin: Instant::now(),
                state: Mutex::new(State {
                    elapsed: Duration::ZERO,
                    sleeps: 0,
                    on_sleep: None,
                }),
            }
        }

        fn state(&self) -> std::sync::MutexGuard<'_, State> {
            self.state.lock().unwrap_or_else(PoisonError::into_inner)
        }

        pub(super) fn elapsed(&self) -> Duration {
            self.state().elapsed
        }

        pub(super) fn now(&self) -> Instant {
            self.origin + self.elapsed()
        }

        pub(super) fn advance(&self, by: Duration) {
            self.state().elapsed += by;
        }

        pub(super) fn sleeps(&self) -> u64 {
            self.state().sleeps
        }

        /// Move on by `span`, then run the hook (outside the lock: it may read the clock).
        pub(super) fn sleep(&self, span: Duration) {
            let (count, hook) = {
                let mut state = self.state();
                state.elapsed += span;
                state.sleeps += 1;
                (state.sleeps, state.on_sleep.take())
            };
            if let Some(mut hook) = hook {
                hook(count);
                let mut state = self.state();
                if state.on_sleep.is_none() {
                    state.on_sleep = Some(hook);
                }
            }
        }

        pub(super) fn on_sleep(&self, hook: Hook) {
            self.state().on_sleep = Some(hook);
        }
    }
}

#[cfg(test)]
impl Clock {
    /// A fake clock, standing at an arbitrary instant until something sleeps on it or the test
    /// advances it.
    pub(crate) fn fake() -> Clock {
        Clock {
            fake: Some(std::sync::Arc::new(fake::Fake::new())),
        }
    }

    fn the_fake(&self) -> &fake::Fake {
        self.fake.as_deref().expect("a fake clock")
    }

    /// Move a fake clock on by `by`.
    pub(crate) fn advance(&self, by: Duration) {
        self.the_fake().advance(by);
    }

    /// How far a fake clock has moved since it was made.
    pub(crate) fn elapsed(&self) -> Duration {
        self.the_fake().elapsed()
    }

    /// How many times something slept on a fake clock.
    pub(crate) fn sleeps(&self) -> u64 {
        self.the_fake().sleeps()
    }

    /// Run `hook` after every sleep on a fake clock, with the number of that sleep (from 1), in
    /// the sleeping thread: what a test does there happens while the code under test waits, at
    /// a point of its wait the test chooses.
    pub(crate) fn on_sleep(&self, hook: impl FnMut(u64) + Send + 'static) {
        self.the_fake().on_sleep(Box::new(hook));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fake_clock_moves_only_when_slept_on_or_advanced() {
        let clock = Clock::fake();
        let start = clock.now();
        assert_eq!(clock.now(), start);
        clock.sleep(Duration::from_millis(250));
        assert_eq!(clock.since(start), Duration::from_millis(250));
        clock.advance(Duration::from_secs(10));
        assert_eq!(clock.elapsed(), Duration::from_millis(10_250));
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let hook = {
            let (seen, clock) = (std::sync::Arc::clone(&seen), clock.clone());
            move |n| seen.lock().unwrap().push((n, clock.elapsed()))
        };
        clock.on_sleep(hook);
        clock.sleep(Duration::from_secs(1));
        clock.sleep(Duration::from_secs(1));
        assert_eq!(clock.sleeps(), 3);
        assert_eq!(
            *seen.lock().unwrap(),
            [
                (2, Duration::from_millis(11_250)),
                (3, Duration::from_millis(12_250))
            ]
        );
        // Earlier than a later instant: no time, not a panic.
        assert_eq!(
            clock.since(clock.now() + Duration::from_secs(1)),
            Duration::ZERO
        );
    }

    #[test]
    fn timestamps_are_written_as_chrono_writes_them() {
        use chrono::TimeZone;
        let start = chrono::Utc
            .with_ymd_and_hms(2026, 12, 31, 23, 59, 58)
            .unwrap();
        // Across seconds, a minute, a day and a year, in one thread (so through the cache).
        for step in [
            0, 1, 7, 999, 1000, 1001, 1999, 2000, 2001, 2500, 60_000, 3_600_007,
        ] {
            let at = start + chrono::Duration::milliseconds(step);
            assert_eq!(
                rfc3339_millis(at),
                at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            );
        }
    }
}
