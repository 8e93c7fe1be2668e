//! What a rate limiter answers.

use std::sync::Arc;
use std::time::Duration;

/// The outcome of one [`try_acquire`](super::FixedWindow::try_acquire): whether the permits were
/// granted, and the state of the limit according to the server's clock.
///
/// A limiter with several policies ([`Stacked`](super::Stacked)) reports one
/// [`PolicyState`] per policy ([`policy_states`](Self::policy_states)); the top-level
/// [`limit`](Self::limit), [`remaining`](Self::remaining) and
/// [`reset_after`](Self::reset_after) are those of the **binding** policy, the one with the
/// fewest permits left (on a tie, the one that takes longest to reset). Every other limiter
/// has one policy, which is then the binding one.
///
/// Cheap to clone: a single-policy decision is a plain value, a multi-policy decision shares
/// its states.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::rate_limit::FixedWindow;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let limiter = FixedWindow::new(&Coordination::memory(), "api", 2, Duration::from_secs(60))?;
/// let decision = limiter.try_acquire(b"client-1", 1).await?;
/// assert!(decision.is_granted());
/// assert_eq!(decision.remaining(), 1);
/// assert_eq!(decision.retry_after(), None);
/// assert_eq!(decision.policy_states().len(), 1);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitDecision {
    granted: bool,
    retry_after: Option<Duration>,
    /// Granted, though a shadow policy would have rejected it.
    shadow_rejected: bool,
    states: States,
}

/// One state per policy, in policy order; never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
enum States {
    /// The common case, without an allocation.
    One(PolicyState),
    /// A limiter with several policies.
    Many(Arc<[PolicyState]>),
}

/// The state of one policy of a limiter after a decision, according to the server's clock.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::rate_limit::{RateLimitPolicy, Stacked};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let limiter = Stacked::new(
///     &Coordination::memory(),
///     "api",
///     [
///         RateLimitPolicy::new("second", 10, Duration::from_secs(1)),
///         RateLimitPolicy::new("day", 1000, Duration::from_secs(86_400)),
///     ],
/// )?;
/// let decision = limiter.try_acquire(b"client-1", 1).await?;
/// let [second, day] = decision.policy_states() else { unreachable!() };
/// assert_eq!((second.limit(), second.remaining()), (10, 9));
/// assert_eq!((day.limit(), day.remaining()), (1000, 999));
/// assert_eq!(day.reset_after(), Duration::from_secs(86_400));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PolicyState {
    limit: u64,
    remaining: u64,
    reset_after: Duration,
}

impl PolicyState {
    pub(crate) fn new(limit: u64, remaining: u64, reset_after: Duration) -> Self {
        PolicyState {
            limit,
            remaining,
            reset_after,
        }
    }

    /// The policy's quota: permits per window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Permits of this policy left after the decision.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Time until this policy's quota is fully available again.
    pub fn reset_after(&self) -> Duration {
        self.reset_after
    }

    /// The same state `elapsed` later, as far as time alone changes it.
    fn aged(self, elapsed: Duration) -> Self {
        PolicyState {
            reset_after: self.reset_after.saturating_sub(elapsed),
            ..self
        }
    }
}

impl RateLimitDecision {
    /// A decision of a single-policy limiter.
    pub(crate) fn new(
        granted: bool,
        limit: u64,
        remaining: u64,
        reset_after: Duration,
        retry_after: Option<Duration>,
    ) -> Self {
        RateLimitDecision {
            granted,
            retry_after,
            shadow_rejected: false,
            states: States::One(PolicyState::new(limit, remaining, reset_after)),
        }
    }

    /// A decision with one state per policy, in policy order.
    ///
    /// # Panics
    ///
    /// When `states` is empty: every limiter has at least one policy.
    pub(crate) fn with_states(
        granted: bool,
        states: Vec<PolicyState>,
        retry_after: Option<Duration>,
    ) -> Self {
        let states = match <[PolicyState; 1]>::try_from(states) {
            Ok([one]) => States::One(one),
            Err(many) => {
                assert!(!many.is_empty(), "a decision has at least one policy state");
                States::Many(many.into())
            }
        };
        RateLimitDecision {
            granted,
            retry_after,
            shadow_rejected: false,
            states,
        }
    }

    /// Marks a grant that a [shadow policy](super::RateLimitPolicy::shadow) would have
    /// rejected.
    pub(crate) fn shadow_rejected(mut self, rejected: bool) -> Self {
        self.shadow_rejected = rejected && self.granted;
        self
    }

    /// Whether it was granted although one of the limiter's
    /// [shadow policies](super::RateLimitPolicy::shadow) would have rejected it: the enforced
    /// policies counted the permits, that one did not (its state shows what it admitted).
    pub fn is_shadow_rejection(&self) -> bool {
        self.shadow_rejected
    }

    /// Whether the permits were granted (and consumed).
    pub fn is_granted(&self) -> bool {
        self.granted
    }

    /// The binding policy's quota: permits per window.
    pub fn limit(&self) -> u64 {
        self.binding_state().limit
    }

    /// Permits left in the binding policy's current window after this decision: the most a
    /// request could take right now.
    pub fn remaining(&self) -> u64 {
        self.binding_state().remaining
    }

    /// Time until the binding policy's quota is fully available again.
    pub fn reset_after(&self) -> Duration {
        self.binding_state().reset_after
    }

    /// For a rejection, how long until enough permits are free to grant the same request:
    /// with several policies, the longest wait among those that rejected it.
    ///
    /// `None` when granted, and for a request of more permits than a limit: it can never
    /// succeed, so there is no time worth advertising to a client that honours it.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The state of every policy of the limiter, in the order of its policies
    /// ([`RateLimiter::policies`](super::RateLimiter::policies),
    /// [`Stacked::policies`](super::Stacked::policies)). One state for a single-policy
    /// limiter; never empty.
    pub fn policy_states(&self) -> &[PolicyState] {
        match &self.states {
            States::One(state) => std::slice::from_ref(state),
            States::Many(states) => states,
        }
    }

    /// The index of the binding policy in [`policy_states`](Self::policy_states): the
    /// fewest permits left, and on a tie the longest reset (the first of equals).
    pub(crate) fn binding(&self) -> usize {
        self.binding_among(|_| true).unwrap_or(0)
    }

    /// The binding policy among those whose index `counts` keeps, by the same rule as
    /// [`binding`](Self::binding); `None` when it keeps none.
    pub(crate) fn binding_among(&self, counts: impl Fn(usize) -> bool) -> Option<usize> {
        let states = self.policy_states();
        let mut binding: Option<usize> = None;
        for (index, state) in states
            .iter()
            .enumerate()
            .filter(|&(index, _)| counts(index))
        {
            let better = binding.is_none_or(|best| {
                let best = &states[best];
                state.remaining < best.remaining
                    || (state.remaining == best.remaining && state.reset_after > best.reset_after)
            });
            if better {
                binding = Some(index);
            }
        }
        binding
    }

    fn binding_state(&self) -> &PolicyState {
        &self.policy_states()[self.binding()]
    }

    /// This rejection `elapsed` later, with `retry_after` as its new retry time: what a
    /// local cache answers without asking the backend again.
    pub(crate) fn aged_rejection(&self, elapsed: Duration, retry_after: Duration) -> Self {
        let states = match &self.states {
            States::One(state) => States::One(state.aged(elapsed)),
            States::Many(states) => States::Many(states.iter().map(|s| s.aged(elapsed)).collect()),
        };
        RateLimitDecision {
            granted: false,
            retry_after: Some(retry_after),
            shadow_rejected: false,
            states,
        }
    }
}

impl RateLimitDecision {
    /// The decision for a limiter of `limit` permits from its step's reply.
    pub(crate) fn from_reply(
        limit: u64,
        reply: &crate::backend::steps::rate_limit_reply::RateLimitReply,
    ) -> Self {
        RateLimitDecision::new(
            reply.granted,
            limit,
            reply.remaining,
            Duration::from_millis(reply.reset_after_ms),
            reply.retry_after_ms.map(Duration::from_millis),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn the_binding_policy_has_the_fewest_permits_then_the_longest_reset() {
        let states = vec![
            PolicyState::new(10, 3, SECOND),
            PolicyState::new(1000, 2, 60 * SECOND),
            PolicyState::new(5, 2, 30 * SECOND),
        ];
        let decision = RateLimitDecision::with_states(true, states, None);
        assert_eq!(decision.binding(), 1);
        assert_eq!(
            (
                decision.limit(),
                decision.remaining(),
                decision.reset_after()
            ),
            (1000, 2, 60 * SECOND)
        );
        assert_eq!(decision.policy_states().len(), 3);
    }

    #[test]
    fn one_state_needs_no_allocation() {
        let decision =
            RateLimitDecision::with_states(true, vec![PolicyState::new(1, 0, SECOND)], None);
        assert!(matches!(decision.states, States::One(_)));
        assert_eq!(decision, RateLimitDecision::new(true, 1, 0, SECOND, None));
    }

    #[test]
    fn an_aged_rejection_moves_every_reset() {
        let states = vec![
            PolicyState::new(10, 0, SECOND),
            PolicyState::new(1000, 5, 60 * SECOND),
        ];
        let decision = RateLimitDecision::with_states(false, states, Some(SECOND));
        let aged = decision.aged_rejection(2 * SECOND, SECOND / 2);
        assert_eq!(aged.retry_after(), Some(SECOND / 2));
        let resets: Vec<_> = aged
            .policy_states()
            .iter()
            .map(|s| s.reset_after())
            .collect();
        assert_eq!(resets, [Duration::ZERO, 58 * SECOND]);
        assert!(!aged.is_granted());
    }
}
