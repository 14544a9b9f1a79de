//! What a run may spend on its models: how many calls to one alias are in flight at once, how
//! long everyone waits after the provider said "too many", and how much money the run may use.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::error::ModelError;
use crate::floor::process::Interrupt;

/// How often a waiting call looks at the interrupt flag.
const POLL: Duration = Duration::from_millis(50);

/// One alias's queue: at most `max` calls in flight, and none started while it is paused.
#[derive(Debug)]
pub(crate) struct Limiter {
    max: usize,
    state: Mutex<QueueState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct QueueState {
    active: usize,
    paused_until: Option<Instant>,
}

/// A place in the queue, given back when dropped.
pub(crate) struct Permit<'a> {
    limiter: &'a Limiter,
}

impl Limiter {
    pub(crate) fn new(max: Option<u32>) -> Limiter {
        Limiter {
            max: max.map_or(usize::MAX, |n| (n as usize).max(1)),
            state: Mutex::new(QueueState::default()),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Wait for a free place and for the end of any pause, then take the place.
    pub(crate) fn acquire(&self) -> Result<Permit<'_>, ModelError> {
        let mut state = self.lock();
        loop {
            if Interrupt::global().is_set() {
                return Err(ModelError::Interrupted);
            }
            let now = Instant::now();
            let wait = match state.paused_until {
                Some(until) if until > now => Some(until - now),
                _ => None,
            };
            match wait {
                Some(wait) => {
                    state = self
                        .changed
                        .wait_timeout(state, wait.min(POLL))
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0;
                }
                None if state.active < self.max => {
                    state.active += 1;
                    return Ok(Permit { limiter: self });
                }
                None => {
                    state = self
                        .changed
                        .wait_timeout(state, POLL)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0;
                }
            }
        }
    }

    /// Start no call before `for` has passed (a pause already longer stays).
    pub(crate) fn pause(&self, duration: Duration) {
        let until = Instant::now() + duration;
        let mut state = self.lock();
        if state.paused_until.is_none_or(|current| current < until) {
            state.paused_until = Some(until);
        }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut state = self.limiter.lock();
        state.active = state.active.saturating_sub(1);
        drop(state);
        self.limiter.changed.notify_one();
    }
}

/// The run's money: an optional limit and what was spent.
#[derive(Debug, Default)]
pub(crate) struct Budget {
    state: Mutex<BudgetState>,
}

#[derive(Debug, Default)]
struct BudgetState {
    /// The limit in USD and where it was set.
    limit: Option<(f64, String)>,
    spent: f64,
    /// Per alias: the calls of known cost so far and what they cost.
    history: std::collections::BTreeMap<String, (u32, f64)>,
}

impl Budget {
    fn lock(&self) -> MutexGuard<'_, BudgetState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn limit(&self, usd: f64, source: &str) {
        let mut state = self.lock();
        if state
            .limit
            .as_ref()
            .is_none_or(|(current, _)| usd < *current)
        {
            state.limit = Some((usd, source.to_string()));
        }
    }

    pub(crate) fn spent(&self) -> f64 {
        self.lock().spent
    }

    /// Refuse a call when what it is expected to cost would take the spending past the limit.
    /// It is expected to cost what the alias's calls cost on average so far in the run, and at
    /// least `lower_bound` (its input at the input price); with neither known, it is refused
    /// once the limit is reached.
    pub(crate) fn admit(&self, alias: &str, lower_bound: f64) -> Result<(), ModelError> {
        let state = self.lock();
        let Some((limit, source)) = &state.limit else {
            return Ok(());
        };
        let average = match state.history.get(alias) {
            Some((calls, total)) if *calls > 0 => total / f64::from(*calls),
            _ => 0.0,
        };
        let estimate = lower_bound.max(average);
        if state.spent >= *limit || state.spent + estimate > *limit {
            return Err(ModelError::Budget {
                alias: alias.to_string(),
                limit: *limit,
                set_by: source.clone(),
                spent: state.spent,
                estimate,
            });
        }
        Ok(())
    }

    /// Count a call of known cost.
    pub(crate) fn spend(&self, alias: &str, usd: f64) {
        let mut state = self.lock();
        state.spent += usd.max(0.0);
        let entry = state.history.entry(alias.to_string()).or_default();
        entry.0 += 1;
        entry.1 += usd.max(0.0);
    }
}
