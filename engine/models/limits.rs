//! What a run may spend on its models: how many calls to one alias are in flight at once (a
//! limit that adapts to the provider's refusals, never above `max_concurrency`), and how much
//! money the run may use.
//!
//! The limit is AIMD, as TCP's window: a rate limit or an overload halves it (at most once per
//! wait the provider asked for, so a burst of refusals of the calls in flight counts once), and
//! every `limit` answers in a row raise it by one, back up to `max_concurrency`. A refused call
//! waits on its own, its place given up, so the other calls go on meanwhile.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::error::ModelError;
use crate::floor::cancel::Cancel;
use crate::floor::process::Interrupt;

/// How often a waiting call looks at the interrupt flag.
const POLL: Duration = Duration::from_millis(50);

/// One alias's queue: at most `limit` calls in flight, the limit between 1 and `max`.
#[derive(Debug)]
pub(crate) struct Limiter {
    max: usize,
    state: Mutex<QueueState>,
    changed: Condvar,
}

#[derive(Debug)]
struct QueueState {
    active: usize,
    /// The calls allowed in flight now; `usize::MAX` while an alias without `max_concurrency`
    /// has not been refused.
    limit: usize,
    /// Answers since the limit last rose or fell.
    answered: usize,
    /// A refusal before this instant belongs to the throttling that lowered the limit last:
    /// it does not lower it again.
    calm_until: Option<Instant>,
}

/// A place in the queue, given back when dropped.
pub(crate) struct Permit<'a> {
    limiter: &'a Limiter,
}

impl Limiter {
    pub(crate) fn new(max: Option<u32>) -> Limiter {
        let max = max.map_or(usize::MAX, |n| (n as usize).max(1));
        Limiter {
            max,
            state: Mutex::new(QueueState {
                active: 0,
                limit: max,
                answered: 0,
                calm_until: None,
            }),
            changed: Condvar::new(),
        }
    }

    /// The most calls in flight at once, when there is a limit.
    pub(crate) fn max(&self) -> Option<usize> {
        (self.max != usize::MAX).then_some(self.max)
    }

    /// The calls allowed in flight now, when there is a limit.
    #[cfg(test)]
    pub(crate) fn limit(&self) -> Option<usize> {
        let limit = self.lock().limit;
        (limit != usize::MAX).then_some(limit)
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Wait for a free place, then take it; `cancel` ends the wait, with the stage's timeout
    /// reported as `alias`'s.
    pub(crate) fn acquire(&self, alias: &str, cancel: &Cancel) -> Result<Permit<'_>, ModelError> {
        let mut state = self.lock();
        loop {
            cancel
                .check()
                .map_err(|stop| ModelError::stopped(alias, stop))?;
            if state.active < state.limit {
                state.active += 1;
                return Ok(Permit { limiter: self });
            }
            state = self
                .changed
                .wait_timeout(state, POLL)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// A call was answered: after `limit` answers since the last change, one more call may be
    /// in flight, up to the maximum.
    pub(crate) fn answered(&self) {
        let mut state = self.lock();
        if state.limit >= self.max {
            return;
        }
        state.answered += 1;
        if state.answered >= state.limit {
            state.limit += 1;
            state.answered = 0;
            drop(state);
            self.changed.notify_one();
        }
    }

    /// The provider refused a call for being too many (429, 529, 503 with `retry-after`) and
    /// asked for `wait`: halve the limit, unless a refusal within the last wait asked for did
    /// already. An alias without a maximum is limited from now on to half the calls in flight.
    pub(crate) fn throttled(&self, wait: Duration) {
        let now = Instant::now();
        let mut state = self.lock();
        if state.calm_until.is_some_and(|until| now < until) {
            return;
        }
        // The refused call has given its place back: it counts among those in flight.
        let current = state.limit.min(state.active + 1);
        state.limit = (current / 2).max(1);
        state.answered = 0;
        state.calm_until = Some(now + wait);
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

/// The run's money: an optional limit, what was spent, and what the calls in flight are
/// expected to cost. A call reserves its estimate before it starts and settles at its actual
/// cost when it ends, so sixteen calls in flight cannot together pass the limit that each alone
/// would respect.
#[derive(Debug, Default)]
pub(crate) struct Budget {
    state: Mutex<BudgetState>,
    settled: Condvar,
}

#[derive(Debug, Default)]
struct BudgetState {
    /// The limit in USD and where it was set.
    limit: Option<(f64, String)>,
    spent: f64,
    /// What the calls in flight reserved, and how many they are.
    reserved: f64,
    in_flight: usize,
    /// Per alias: the calls of known cost so far and what they cost.
    history: std::collections::BTreeMap<String, (u32, f64)>,
    /// Aliases whose first call is in flight: until it settles, nothing is known of what their
    /// calls cost, so no second call of theirs starts under a limit.
    probing: std::collections::BTreeSet<String>,
    /// Aliases whose calls report no cost (no price table, no provider report): the budget
    /// cannot count them, so they need not wait for a first cost.
    uncosted: std::collections::BTreeSet<String>,
}

/// A call's claim on the budget, from before it starts until it settles; dropped unsettled (the
/// call failed), it gives the reserve back and counts nothing.
#[derive(Debug)]
pub(crate) struct Reservation<'a> {
    budget: &'a Budget,
    alias: String,
    amount: f64,
    probe: bool,
    held: bool,
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

    #[cfg(test)]
    pub(crate) fn spent(&self) -> f64 {
        self.lock().spent
    }

    /// Reserve what a call is expected to cost, or refuse it when that would take what was
    /// spent plus what the calls in flight reserved past the limit. A call is expected to cost
    /// what the alias's calls cost on average so far in the run, and at least `lower_bound` (its
    /// input at the input price). Under a limit, an alias's first call runs alone: the others
    /// wait for its cost, which is what they then reserve.
    pub(crate) fn admit(
        &self,
        alias: &str,
        lower_bound: f64,
    ) -> Result<Reservation<'_>, ModelError> {
        let mut state = self.lock();
        loop {
            if state.limit.is_none() {
                return Ok(self.reservation(alias, 0.0, false, false));
            }
            let known = state
                .history
                .get(alias)
                .is_some_and(|(calls, _)| *calls > 0)
                || state.uncosted.contains(alias);
            if known || !state.probing.contains(alias) {
                break;
            }
            if Interrupt::global().is_set() {
                return Err(ModelError::Interrupted);
            }
            state = self
                .settled
                .wait_timeout(state, POLL)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        let Some((limit, source)) = &state.limit else {
            unreachable!("checked in the loop");
        };
        let average = match state.history.get(alias) {
            Some((calls, total)) if *calls > 0 => total / f64::from(*calls),
            _ => 0.0,
        };
        let estimate = lower_bound.max(average);
        let committed = state.spent + state.reserved;
        if state.spent >= *limit || committed >= *limit || committed + estimate > *limit {
            return Err(ModelError::Budget {
                alias: alias.to_string(),
                limit: *limit,
                set_by: source.clone(),
                spent: state.spent,
                reserved: state.reserved,
                in_flight: state.in_flight,
                estimate,
            });
        }
        let probe = !state.history.contains_key(alias) && !state.uncosted.contains(alias);
        if probe {
            state.probing.insert(alias.to_string());
        }
        state.reserved += estimate;
        state.in_flight += 1;
        Ok(self.reservation(alias, estimate, probe, true))
    }

    fn reservation(&self, alias: &str, amount: f64, probe: bool, held: bool) -> Reservation<'_> {
        Reservation {
            budget: self,
            alias: alias.to_string(),
            amount,
            probe,
            held,
        }
    }

    /// Count a call of known cost (a call settles through its reservation instead).
    #[cfg(test)]
    pub(crate) fn spend(&self, alias: &str, usd: f64) {
        let mut state = self.lock();
        Self::count(&mut state, alias, Some(usd));
    }

    fn count(state: &mut BudgetState, alias: &str, usd: Option<f64>) {
        match usd {
            Some(usd) => {
                state.spent += usd.max(0.0);
                let entry = state.history.entry(alias.to_string()).or_default();
                entry.0 += 1;
                entry.1 += usd.max(0.0);
            }
            None => {
                if !state.history.contains_key(alias) {
                    state.uncosted.insert(alias.to_string());
                }
            }
        }
    }

    fn release(&self, reservation: &mut Reservation<'_>, outcome: Outcome) {
        let mut state = self.lock();
        if reservation.held {
            state.reserved = (state.reserved - reservation.amount).max(0.0);
            state.in_flight = state.in_flight.saturating_sub(1);
            reservation.held = false;
        }
        if reservation.probe {
            state.probing.remove(&reservation.alias);
        }
        if let Outcome::Settled(cost) = outcome {
            Self::count(&mut state, &reservation.alias, cost);
        }
        drop(state);
        self.settled.notify_all();
    }
}

/// How a reserved call ended.
enum Outcome {
    /// It was answered, at this cost (`None`: nothing says).
    Settled(Option<f64>),
    /// It failed: nothing is known of what it cost.
    Failed,
}

impl Reservation<'_> {
    /// The call ended: count what it cost (`None`: nothing says) in place of what it reserved.
    pub(crate) fn settle(mut self, cost: Option<f64>) {
        let budget = self.budget;
        budget.release(&mut self, Outcome::Settled(cost));
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.held || self.probe {
            let budget = self.budget;
            budget.release(self, Outcome::Failed);
        }
    }
}
