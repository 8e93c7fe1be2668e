//! The token-bucket rate limiter.

use std::fmt;
use std::time::Duration;

use super::key::LimiterKeys;
use super::{RateLimitDecision, RateLimitPolicy};
use crate::Coordination;
use crate::backend::steps::token_bucket::TokenBucketStep;
use crate::error::{Error, Result};

/// The largest integer that a Lua number (a double, in Redis scripts) holds exactly.
const MAX_EXACT: u64 = (1 << 53) - 1;

/// The longest time to refill an empty bucket, in ms (some 142,000 years): added to the
/// server's clock in ms, it stays exact in a Lua number.
const MAX_REFILL_MS: u64 = 1 << 52;

/// A bucket of at most `capacity` tokens for each client key, refilled by a [`Refill`]:
/// `tokens` at the end of every `interval`.
///
/// A new client key starts with a full bucket, so it may take up to `capacity` permits at
/// once; each permit takes a token, and a request takes all its tokens or none (a rejected
/// request consumes nothing). Refills are discrete: whole intervals are counted from the last
/// refill, the interval under way is kept, and the bucket never holds more than `capacity`.
/// A full bucket has no interval under way: its first interval starts when a token is taken
/// from it. The decision and every time in it come from the backend's clock, and
/// [`retry_after`](RateLimitDecision::retry_after) is exact: it is the time until the refill
/// that brings enough tokens for the same request.
///
/// # Policy
///
/// [`policy`](Self::policy) advertises `capacity` permits per the time an empty bucket
/// takes to refill (`ceil(capacity / tokens)` intervals), its window. A client that takes at
/// most that many permits in any such window is never rejected, and the decision's
/// `remaining` (at most `capacity`) and `reset_after` (at most that time) stay within the
/// advertised policy. `tokens` per `interval` would describe the sustained rate but hide the
/// burst, and show clients more remaining permits than the quota.
///
/// # Storage
///
/// One Redis key per (limiter, client key): `<prefix>rl:tb:<name length>:<name>:<client key>`,
/// a string `"<tokens>:<last refill, server ms since the epoch>"`. The first request that
/// takes tokens creates it and every one that takes tokens rewrites it, with an expiry at the
/// moment the bucket would be full again (at most the policy's window); a missing key is a
/// full bucket, so an idle key disappears once it carries no information. Probes and
/// rejections write nothing. A key of another type or with another content is reported as
/// [`ErrorKind::CorruptState`](crate::ErrorKind::CorruptState) and left as it is.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::rate_limit::{Refill, TokenBucket};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let coordination = Coordination::memory();
/// // Bursts of up to 10, then 2 more every second.
/// let limiter = TokenBucket::new(&coordination, "uploads", 10, Refill::new(2, Duration::from_secs(1)))?;
/// assert_eq!(limiter.policy().quota(), 10);
/// assert_eq!(limiter.policy().window(), Duration::from_secs(5));
///
/// assert!(limiter.try_acquire(b"alice", 10).await?.is_granted());
/// let rejected = limiter.try_acquire(b"alice", 3).await?;
/// assert!(!rejected.is_granted());
/// // 3 tokens need two refills.
/// let wait = rejected.retry_after().expect("a retry time for a request that can succeed");
/// assert!(wait > Duration::from_secs(1) && wait <= Duration::from_secs(2));
///
/// // Other keys have their own buckets.
/// assert!(limiter.try_acquire(b"bob", 1).await?.is_granted());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TokenBucket {
    coordination: Coordination,
    keys: LimiterKeys,
    pub(super) policy: RateLimitPolicy,
    /// Capped at the token limit: a refill never exceeds the bucket anyway.
    tokens_per_period: u64,
    period_ms: u64,
}

impl TokenBucket {
    /// Creates a limiter whose buckets hold at most `capacity` tokens and gain `refill`'s
    /// tokens at the end of each of its intervals, named `name` (which separates its keys from
    /// other limiters' and is shown to HTTP clients as the policy name). The refill is its own
    /// type so that the capacity and the tokens per interval cannot be swapped silently.
    ///
    /// A refill of more tokens than `capacity` is accepted: every refill fills the bucket.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) when
    /// `capacity` or the refill's tokens is 0, `capacity` is 2^53 or more, the refill's interval
    /// is shorter than one millisecond, or an empty bucket would take more than 2^52 ms (some
    /// 142,000 years) to refill: Redis scripts compute with doubles, exact below 2^53.
    /// Sub-millisecond parts of the interval are dropped.
    pub fn new(
        coordination: &Coordination,
        name: impl Into<String>,
        capacity: u64,
        refill: Refill,
    ) -> Result<Self> {
        super::named("token bucket", name.into(), |name| {
            Self::checked(coordination, name, capacity, refill)
        })
    }

    /// [`new`](Self::new), its arguments checked.
    fn checked(
        coordination: &Coordination,
        name: String,
        capacity: u64,
        refill: Refill,
    ) -> Result<Self> {
        let Refill { tokens, interval } = refill;
        if capacity == 0 || capacity > MAX_EXACT {
            return Err(Error::invalid_argument(format!(
                "a token bucket must hold between 1 and {MAX_EXACT} tokens, not {capacity}"
            )));
        }
        if tokens == 0 {
            return Err(Error::invalid_argument(
                "a token bucket must gain at least 1 token per refill",
            ));
        }
        let period_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
        let tokens_per_period = tokens.min(capacity);
        let refill_ms = capacity
            .div_ceil(tokens_per_period)
            .checked_mul(period_ms)
            .filter(|ms| *ms <= MAX_REFILL_MS);
        let refill_ms = match refill_ms {
            Some(ms) if period_ms > 0 => ms,
            _ => {
                return Err(Error::invalid_argument(format!(
                    "a token-bucket refill interval must last at least 1 ms and an empty bucket \
                     must refill within 2^52 ms (about 142,000 years); not {interval:?} for {capacity} \
                     tokens, {tokens} per refill"
                )));
            }
        };
        Ok(TokenBucket {
            coordination: coordination.clone(),
            keys: LimiterKeys::new(b"tb", name.as_bytes()),
            policy: RateLimitPolicy::new(name, capacity, Duration::from_millis(refill_ms)),
            tokens_per_period,
            period_ms,
        })
    }

    /// The limiter's policy: its name, the capacity as the quota, and the time an empty
    /// bucket takes to refill as the window (see [Policy](Self#policy)).
    pub fn policy(&self) -> &RateLimitPolicy {
        &self.policy
    }

    /// The handle its decisions are asked of.
    pub(crate) fn coordination(&self) -> &Coordination {
        &self.coordination
    }

    /// Asks for `permits` tokens from `key`'s bucket, in one atomic step.
    ///
    /// `permits` = 0 probes the current state without consuming or creating anything.
    /// A request for more permits than the token limit is rejected (consuming nothing)
    /// without a retry time, since it can never succeed.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: if the future is dropped after the request was sent, the tokens may
    /// have been taken although no decision is returned. An error whose
    /// [`is_outcome_uncertain`](crate::Error::is_outcome_uncertain) is true means the same.
    pub async fn try_acquire(&self, key: &[u8], permits: u64) -> Result<RateLimitDecision> {
        let limit = self.policy.quota();
        // An impossible request still reads the state (for the response fields) but must
        // never be granted; limit + 1 keeps it impossible and exact in a Lua double.
        let asked = permits.min(limit + 1);
        let storage_key = self.keys.for_client(key);
        let reply = self
            .coordination
            .backend()
            .run(TokenBucketStep {
                key: &storage_key,
                permits: asked,
                limit,
                tokens_per_period: self.tokens_per_period,
                period_ms: self.period_ms,
            })
            .await?;
        Ok(RateLimitDecision::from_reply(limit, &reply))
    }
}

/// How a [`TokenBucket`] refills: `tokens` tokens at the end of every `interval`.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::coordination::rate_limit::Refill;
///
/// let refill = Refill::new(2, Duration::from_secs(1));
/// assert_eq!(refill.tokens(), 2);
/// assert_eq!(refill.interval(), Duration::from_secs(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Refill {
    tokens: u64,
    interval: Duration,
}

impl Refill {
    /// `tokens` tokens at the end of every `interval` (checked by [`TokenBucket::new`]).
    pub const fn new(tokens: u64, interval: Duration) -> Self {
        Refill { tokens, interval }
    }

    /// The tokens each refill adds.
    pub const fn tokens(&self) -> u64 {
        self.tokens
    }

    /// The time between refills.
    pub const fn interval(&self) -> Duration {
        self.interval
    }
}

impl fmt::Debug for TokenBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBucket")
            .field("policy", &self.policy)
            .field("refill_tokens", &self.tokens_per_period)
            .field("refill_interval_ms", &self.period_ms)
            .finish_non_exhaustive()
    }
}
