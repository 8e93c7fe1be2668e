//! What a rate limiter answers.

use std::time::Duration;

/// The outcome of one [`acquire`](super::FixedWindow::acquire): whether the permits were
/// granted, and the state of the limit according to the server's clock.
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
/// let decision = limiter.acquire(b"client-1", 1).await?;
/// assert!(decision.is_granted());
/// assert_eq!(decision.remaining(), 1);
/// assert_eq!(decision.retry_after(), None);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitDecision {
    granted: bool,
    limit: u64,
    remaining: u64,
    reset_after: Duration,
    retry_after: Option<Duration>,
}

impl RateLimitDecision {
    pub(crate) fn new(
        granted: bool,
        limit: u64,
        remaining: u64,
        reset_after: Duration,
        retry_after: Option<Duration>,
    ) -> Self {
        RateLimitDecision {
            granted,
            limit,
            remaining,
            reset_after,
            retry_after,
        }
    }

    /// Whether the permits were granted (and consumed).
    pub fn is_granted(&self) -> bool {
        self.granted
    }

    /// The policy's quota: permits per window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Permits left in the current window after this decision.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Time until the quota is fully available again.
    pub fn reset_after(&self) -> Duration {
        self.reset_after
    }

    /// For a rejection, how long until enough permits are free to grant the same request.
    ///
    /// `None` when granted, and for a request of more permits than the limit: it can never
    /// succeed, so there is no time worth advertising to a client that honours it.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

impl RateLimitDecision {
    /// The decision for a limiter of `limit` permits from its step's reply.
    pub(crate) fn from_reply(
        limit: u64,
        reply: &crate::backend::rate_limit_reply::RateLimitReply,
    ) -> Self {
        use std::time::Duration;
        RateLimitDecision::new(
            reply.granted,
            limit,
            reply.remaining,
            Duration::from_millis(reply.reset_after_ms),
            reply.retry_after_ms.map(Duration::from_millis),
        )
    }
}
