//! Whether work should stop: the run's interrupt (Ctrl-C, SIGTERM) and a stage's deadline (its
//! `timeout`), checked by every loop that could run long, and a way to wait for a call that
//! blocks in the system (an HTTP request) without waiting past either.

use std::sync::mpsc::{sync_channel, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::process::Interrupt;

/// How long one wait lasts before the handle is checked again.
pub(crate) const POLL_SLICE: Duration = Duration::from_millis(50);

/// A cancellation handle: the run's interrupt and, when the stage has a `timeout`, its deadline.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Cancel {
    /// When the stage's `timeout` runs out, and the timeout itself, for the message.
    deadline: Option<(Instant, Duration)>,
}

/// Why work stopped, or why a call could not be waited for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Stopped {
    /// The run was interrupted.
    #[error("interrupted")]
    Interrupted,
    /// The stage's deadline passed; the duration is the stage's `timeout`.
    #[error("timed out after {}s", .0.as_secs_f64())]
    TimedOut(Duration),
    /// No thread could be started for the call.
    #[error("cannot start a thread: {0}")]
    NoThread(String),
    /// The call's thread ended without an answer (it panicked).
    #[error("the call's thread stopped without an answer")]
    Lost,
}

impl Cancel {
    /// Cancelled by an interrupt, and by `timeout` from now on when there is one.
    pub(crate) fn after(timeout: Option<Duration>) -> Cancel {
        Cancel {
            deadline: timeout.map(|after| (Instant::now() + after, after)),
        }
    }

    /// An error once the run is interrupted or the stage's time is up.
    pub(crate) fn check(&self) -> Result<(), Stopped> {
        if Interrupt::global().is_set() {
            return Err(Stopped::Interrupted);
        }
        match self.deadline {
            Some((at, after)) if Instant::now() >= at => Err(Stopped::TimedOut(after)),
            _ => Ok(()),
        }
    }

    /// The time left before the deadline, when there is one.
    pub(crate) fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|(at, _)| at.saturating_duration_since(Instant::now()))
    }

    /// `limit`, or what is left before the deadline when that is shorter (never zero, which
    /// some timeouts read as "none"): the timeout to give a call that must not outlive the
    /// stage.
    pub(crate) fn bound(&self, limit: Duration) -> Duration {
        match self.remaining() {
            Some(left) => limit.min(left.max(Duration::from_millis(1))),
            None => limit,
        }
    }

    /// Sleep for `total`, or until the handle says stop, whichever comes first.
    pub(crate) fn sleep(&self, total: Duration) -> Result<(), Stopped> {
        let until = Instant::now() + total;
        loop {
            self.check()?;
            let now = Instant::now();
            if now >= until {
                return Ok(());
            }
            std::thread::sleep((until - now).min(POLL_SLICE));
        }
    }

    /// Run `work`, a call that blocks in the system until its own timeout at worst (an HTTP
    /// request), on a thread of its own, and wait for its answer with this handle checked every
    /// [`POLL_SLICE`]: an interrupt or the deadline ends the wait at once, with the error saying
    /// which. The thread is then left to end at the call's own timeout, its answer dropped. An
    /// answer that comes in time is taken the moment it comes, not at the next check.
    pub(crate) fn wait_for<T: Send + 'static>(
        self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Stopped> {
        self.check()?;
        let (tx, rx) = sync_channel(1);
        std::thread::Builder::new()
            .name("waited-call".into())
            .spawn(move || {
                // Nobody waits for an abandoned call's answer.
                let _ = tx.send(work());
            })
            .map_err(|error| Stopped::NoThread(error.to_string()))?;
        loop {
            match rx.recv_timeout(POLL_SLICE) {
                Ok(answer) => return Ok(answer),
                Err(RecvTimeoutError::Timeout) => self.check()?,
                Err(RecvTimeoutError::Disconnected) => return Err(Stopped::Lost),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_in_time_is_returned() {
        let answer = Cancel::after(Some(Duration::from_secs(60))).wait_for(|| 6 * 7);
        assert_eq!(answer, Ok(42));
    }

    #[test]
    fn the_deadline_ends_the_wait_for_a_call_that_never_answers() {
        let (_keep, never) = std::sync::mpsc::channel::<()>();
        let started = Instant::now();
        let answer = Cancel::after(Some(Duration::from_millis(100))).wait_for(move || never.recv());
        assert_eq!(answer, Err(Stopped::TimedOut(Duration::from_millis(100))));
        assert!(started.elapsed() >= Duration::from_millis(100));
    }

    #[test]
    fn a_call_that_panics_is_lost_not_waited_for() {
        let answer = Cancel::default().wait_for(|| -> u8 { panic!("on purpose") });
        assert_eq!(answer, Err(Stopped::Lost));
    }

    #[test]
    fn a_sleep_stops_at_the_deadline() {
        let cancel = Cancel::after(Some(Duration::from_millis(50)));
        assert_eq!(
            cancel.sleep(Duration::from_secs(600)),
            Err(Stopped::TimedOut(Duration::from_millis(50)))
        );
        assert_eq!(Cancel::default().sleep(Duration::from_millis(1)), Ok(()));
    }

    #[test]
    fn bound_is_the_shorter_of_the_limit_and_the_time_left() {
        let limit = Duration::from_secs(300);
        assert_eq!(Cancel::default().bound(limit), limit);
        let bounded = Cancel::after(Some(Duration::from_secs(2))).bound(limit);
        assert!(bounded <= Duration::from_secs(2), "{bounded:?}");
        assert!(bounded > Duration::ZERO);
    }
}
