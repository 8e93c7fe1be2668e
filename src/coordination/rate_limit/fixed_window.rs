//! The fixed-window rate limiter.

use std::fmt;
use std::time::Duration;

use super::key::LimiterKeys;
use super::{RateLimitDecision, RateLimitPolicy};
use crate::Coordination;
use crate::backend::steps::fixed_window::FixedWindowStep;
use crate::error::{Error, Result};

/// At most `limit` permits per `window` for each client key, counted from the first request
/// of the window.
///
/// The first counted request starts a window of `window`; the window ends then for every
/// request of that key, however many came after (they do not move it). A rejected request
/// consumes nothing. The decision and every time in it come from the backend's clock.
///
/// # Storage
///
/// One Redis key per (limiter, client key): `<prefix>rl:fw:<name length>:<name>:<client key>`,
/// a string holding the window's count as an integer, created by the window's first counted
/// request and expiring when the window ends. Nothing outlives a window.
///
/// # Servers
///
/// On Redis 8.8+ and Valkey 9.2+ a step is one `INCREX` pipelined with `PTTL` (one round
/// trip). Older servers answer "unknown command"; from then on every limiter built from the
/// same [`Coordination`] runs an equivalent Lua script directly, and `INCREX` is tried again
/// after five minutes so that an upgraded server regains the fast path.
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
/// let coordination = Coordination::memory();
/// let limiter = FixedWindow::new(&coordination, "login", 3, Duration::from_secs(60))?;
///
/// for _ in 0..3 {
///     assert!(limiter.try_acquire(b"alice", 1).await?.is_granted());
/// }
/// let rejected = limiter.try_acquire(b"alice", 1).await?;
/// assert!(!rejected.is_granted());
/// let wait = rejected.retry_after().expect("a retry time for a request that can succeed");
/// assert!(wait <= Duration::from_secs(60));
///
/// // Other keys have their own windows.
/// assert!(limiter.try_acquire(b"bob", 1).await?.is_granted());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FixedWindow {
    coordination: Coordination,
    keys: LimiterKeys,
    policy: RateLimitPolicy,
    window_ms: u64,
}

impl FixedWindow {
    /// Creates a limiter of `limit` permits per `window`, named `name` (which separates its
    /// keys from other limiters' and is shown to HTTP clients as the policy name).
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) when
    /// `limit` is 0 or above `i64::MAX` (Redis integers), or `window` is shorter than one
    /// millisecond. Sub-millisecond parts of `window` are dropped.
    pub fn new(
        coordination: &Coordination,
        name: impl Into<String>,
        limit: u64,
        window: Duration,
    ) -> Result<Self> {
        let name = name.into();
        if limit == 0 || i64::try_from(limit).is_err() {
            return Err(Error::invalid_argument(format!(
                "a fixed-window limit must be between 1 and {}, not {limit}",
                i64::MAX
            )));
        }
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        if window_ms == 0 || i64::try_from(window_ms).is_err() {
            return Err(Error::invalid_argument(format!(
                "a fixed window must last between 1 ms and {} ms, not {window:?}",
                i64::MAX
            )));
        }
        Ok(FixedWindow {
            coordination: coordination.clone(),
            keys: LimiterKeys::new(b"fw", name.as_bytes()),
            policy: RateLimitPolicy::new(name, limit, Duration::from_millis(window_ms)),
            window_ms,
        })
    }

    /// The limiter's policy: its name, limit and window.
    pub fn policy(&self) -> &RateLimitPolicy {
        &self.policy
    }

    /// The handle its decisions are asked of.
    pub(crate) fn coordination(&self) -> &Coordination {
        &self.coordination
    }

    /// Asks for `permits` permits for `key`, in one atomic step.
    ///
    /// `permits` = 0 probes the current state without consuming or creating anything.
    /// A request for more permits than the limit is rejected (consuming nothing) without a
    /// retry time, since it can never succeed.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: if the future is dropped after the request was sent, the permits may
    /// have been consumed although no decision is returned. An error whose
    /// [`is_outcome_uncertain`](crate::Error::is_outcome_uncertain) is true means the same.
    pub async fn try_acquire(&self, key: &[u8], permits: u64) -> Result<RateLimitDecision> {
        let limit = self.policy.quota();
        // An impossible request still reads the state (for the response fields) but must
        // never be counted; limit + 1 keeps it impossible and within Redis integers.
        let asked = permits.min(limit + 1);
        let storage_key = self.keys.for_client(key);
        let reply = self
            .coordination
            .backend()
            .run(FixedWindowStep {
                key: &storage_key,
                permits: asked,
                limit,
                window_ms: self.window_ms,
            })
            .await?;
        let reset_after = Duration::from_millis(reply.ttl_ms.unwrap_or(self.window_ms));
        // Not the reset time itself: Redis frees the window a millisecond after its TTL, and
        // a client (or a queued waiter) that comes back exactly at the TTL is rejected again.
        let free_in = Duration::from_millis(reply.free_in_ms.unwrap_or(self.window_ms));
        let retry_after = (!reply.granted && permits <= limit).then_some(free_in);
        Ok(RateLimitDecision::new(
            reply.granted,
            limit,
            limit.saturating_sub(reply.count),
            reset_after,
            retry_after,
        ))
    }
}

impl fmt::Debug for FixedWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FixedWindow")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}
