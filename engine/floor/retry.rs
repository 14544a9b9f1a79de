//! One retry policy for everything that tries again: a stage's `retries` with its
//! `retry_backoff`, and a model call's retries of a rate limit, an overload or a dropped
//! connection. The waits double from the first, and may be capped.

use std::time::Duration;

/// At most `retries` attempts after the first; the wait before retry `n` is
/// `first * 2^(n-1)` (the exponent at most 16), no longer than `max` when it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetryPolicy {
    /// Attempts after the first.
    pub retries: u32,
    /// The wait before the first retry.
    pub first: Duration,
    /// The longest wait.
    pub max: Option<Duration>,
}

/// What to do after a failed attempt.
#[derive(Debug)]
pub(crate) enum AfterFailure<E> {
    /// Try again (the caller has waited as it sees fit).
    Retry,
    /// Stop with this error.
    Stop(E),
}

impl RetryPolicy {
    /// `retries` more attempts, the first after `first`, uncapped.
    pub(crate) fn new(retries: u32, first: Duration) -> Self {
        RetryPolicy {
            retries,
            first,
            max: None,
        }
    }

    /// The same, no wait longer than `max`.
    pub(crate) fn capped(self, max: Duration) -> Self {
        RetryPolicy {
            max: Some(max),
            ..self
        }
    }

    /// The wait after failed attempt `attempt` (counted from 1), before the next.
    pub(crate) fn delay(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(1).min(16);
        self.clamp(self.first.saturating_mul(1 << exponent))
    }

    /// A wait asked for from outside (a server's `retry-after`), held to the cap.
    pub(crate) fn clamp(&self, wait: Duration) -> Duration {
        match self.max {
            Some(max) => wait.min(max),
            None => wait,
        }
    }

    /// Run `attempt` (given its number, from 1) until it succeeds or the retries run out; after
    /// each failure that may be retried, `failed` is given the error, the attempt's number and
    /// the policy's wait, and waits or stops. Returns the outcome and the number of attempts.
    pub(crate) fn run<T, E>(
        &self,
        mut attempt: impl FnMut(u32) -> Result<T, E>,
        mut failed: impl FnMut(E, u32, Duration) -> AfterFailure<E>,
    ) -> (Result<T, E>, u32) {
        let mut n = 0;
        loop {
            n += 1;
            match attempt(n) {
                Ok(value) => return (Ok(value), n),
                Err(error) if n <= self.retries => match failed(error, n, self.delay(n)) {
                    AfterFailure::Retry => {}
                    AfterFailure::Stop(error) => return (Err(error), n),
                },
                Err(error) => return (Err(error), n),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_from_the_first_and_hold_to_the_cap() {
        let policy = RetryPolicy::new(5, Duration::from_secs(1));
        let waits: Vec<u64> = (1..=5).map(|n| policy.delay(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16]);
        let capped = policy.capped(Duration::from_secs(5));
        assert_eq!(capped.delay(4), Duration::from_secs(5));
        assert_eq!(
            capped.clamp(Duration::from_secs(90)),
            Duration::from_secs(5)
        );
        // The exponent stops at 16: a long run of retries does not overflow.
        assert_eq!(policy.delay(40), Duration::from_secs(1 << 16));
    }

    #[test]
    fn runs_until_success_or_the_retries_run_out() {
        let policy = RetryPolicy::new(2, Duration::ZERO);
        let mut seen = Vec::new();
        let (result, attempts) = policy.run(
            |n| if n == 2 { Ok(n) } else { Err(n) },
            |error, n, _| {
                seen.push((error, n));
                AfterFailure::Retry
            },
        );
        assert_eq!((result, attempts), (Ok(2), 2));
        assert_eq!(seen, [(1, 1)]);
        let (result, attempts) = policy.run(Err::<(), _>, |_, _, _| AfterFailure::Retry);
        assert_eq!((result, attempts), (Err(3), 3));
        let (result, attempts) =
            policy.run(Err::<(), _>, |error, _, _| AfterFailure::Stop(error * 10));
        assert_eq!((result, attempts), (Err(10), 1));
    }
}
