//! What a layer does when the backend cannot decide.

use std::time::Duration;

use crate::coordination::circuit_breaker::Failure;
use crate::outage_log::{OutageLog, Outcome};

/// What a layer does when the backend is **unavailable**: it does not answer in time, cannot
/// be reached, or says it cannot take the command right now (a failover in progress; see
/// [`Error::is_unavailable`](crate::Error::is_unavailable)).
///
/// The policy covers availability only. A **refusal** (an ACL that denies the script,
/// a rotated password, a Lua error, corrupt state, a server out of memory, a full memory
/// backend; see [`Error::is_refused`](crate::Error::is_refused)) answers `503 Service
/// Unavailable` with `Retry-After` under either policy, with a `tracing` error event naming
/// the cause: a limit is never lifted because the backend said no.
///
/// Either way the request never hangs: the layer's timeout bounds the wait for a decision,
/// and an outage is logged once per layer at `WARN` (`ERROR` for a refusal), with a summary
/// every 10 seconds while it lasts; each request's failure at `DEBUG`.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::layer::FailurePolicy;
///
/// let strict = FailurePolicy::default();
/// assert_eq!(strict, FailurePolicy::FailClosed { retry_after: Duration::from_secs(1) });
/// let lenient = FailurePolicy::FailOpen;
/// # let _ = lenient;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Answer `503 Service Unavailable` with `Retry-After`, without calling the inner
    /// service. The default: no limit is silently lifted.
    FailClosed {
        /// The `Retry-After` advertised with the 503.
        retry_after: Duration,
    },
    /// Admit the request by a limit kept in this process, never without limit: availability
    /// over coordination while the backend cannot decide. The rate-limit layer counts each
    /// policy's quota (or this instance's
    /// [share](crate::layer::rate_limit::RedisRateLimitLayer::fail_open_share) of it) per
    /// client key, answering `429` beyond it; the concurrency layer grants worker-local
    /// permits up to its capacity. Admitted requests carry no rate-limit fields. Refusals
    /// still answer 503.
    FailOpen,
}

/// What a layer makes of a failed step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Call the inner service without a limit.
    Pass,
    /// Answer 503 with this `Retry-After`.
    Unavailable(Duration),
}

impl FailurePolicy {
    /// The verdict on a failure: `unavailable` says whether it is about availability (see
    /// [`Error::is_unavailable`](crate::Error::is_unavailable)); `hint` is when the backend
    /// expects to succeed again, where it says ([`Error::retry_after`](crate::Error::retry_after)).
    pub(crate) fn verdict(self, unavailable: bool, hint: Option<Duration>) -> Verdict {
        let retry_after = match self {
            FailurePolicy::FailOpen if unavailable => return Verdict::Pass,
            FailurePolicy::FailOpen => Duration::from_secs(1),
            FailurePolicy::FailClosed { retry_after } => retry_after,
        };
        Verdict::Unavailable(crate::retry_after::at_least_a_second(
            hint.or(Some(retry_after)),
        ))
    }
}

impl FailurePolicy {
    /// The verdict on a step that gave no decision, told to the layer's outage log (which
    /// logs an outage once, not each request). `limit` names the layer's limit in the events
    /// ("rate limit").
    pub(crate) fn judge(
        self,
        failure: &Failure,
        limit: &'static str,
        outages: &OutageLog,
    ) -> Verdict {
        let unavailable = failure.is_unavailable();
        let verdict = self.verdict(unavailable, failure.retry_hint());
        let outcome = match verdict {
            Verdict::Pass => Outcome::FailedOpen,
            Verdict::Unavailable(_) => Outcome::answered_503(unavailable),
        };
        outages.failed(limit, failure, outcome);
        verdict
    }
}

impl Default for FailurePolicy {
    fn default() -> Self {
        FailurePolicy::FailClosed {
            retry_after: Duration::from_secs(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fails_open_on_unavailability_only() {
        let second = Duration::from_secs(1);
        let open = FailurePolicy::FailOpen;
        assert_eq!(open.verdict(true, None), Verdict::Pass);
        assert_eq!(open.verdict(false, None), Verdict::Unavailable(second));
        let hint = Duration::from_secs(42);
        assert_eq!(open.verdict(false, Some(hint)), Verdict::Unavailable(hint));
        let closed = FailurePolicy::FailClosed {
            retry_after: Duration::from_secs(5),
        };
        assert_eq!(
            closed.verdict(true, None),
            Verdict::Unavailable(Duration::from_secs(5))
        );
        assert_eq!(
            closed.verdict(false, None),
            Verdict::Unavailable(Duration::from_secs(5))
        );
        assert_eq!(
            closed.verdict(false, Some(hint)),
            Verdict::Unavailable(hint)
        );
        // A hint below a second is rounded up to one.
        assert_eq!(
            closed.verdict(false, Some(Duration::from_millis(10))),
            Verdict::Unavailable(second)
        );
    }
}
