//! The GCRA (generic cell rate algorithm) rate limiter.

use std::fmt;
use std::time::Duration;

use super::key::LimiterKeys;
use super::{RateLimitDecision, RateLimitPolicy};
use crate::Coordination;
use crate::backend::steps::gcra::{GcraStep, MAX_TOLERANCE_US};
use crate::error::{Error, Result};

/// `limit` permits per `window` for each client key, spaced evenly, with bursts of up to
/// `burst` permits at once: the generic cell rate algorithm.
///
/// One permit is worth the emission interval `T = window / limit`, rounded **up** to a
/// whole microsecond (so the sustained rate never exceeds `limit` per `window`). Each client
/// key has a theoretical arrival time (TAT), "now" when it has none. A request of `n`
/// permits conforms when `max(TAT, now) + n·T − burst·T ≤ now` (the formulation of
/// go-redis/redis_rate, whose `Burst` is this `burst`, and of redis-cell and throttled,
/// whose `max_burst` is `burst − 1`; the ITU delay-variation tolerance is
/// `τ = (burst − 1)·T`); it then moves the TAT to `max(TAT, now) + n·T`. A rejected request consumes nothing. Every time comes from the
/// backend's clock.
///
/// The decision's fields, in those terms, with `TAT − now` taken as 0 once the TAT passed:
/// - [`remaining`](RateLimitDecision::remaining): `⌊(burst·T − (TAT − now)) / T⌋` after the
///   step (0 to `burst`): how many single permits would conform right now;
/// - [`reset_after`](RateLimitDecision::reset_after): `TAT − now` after the step, when the
///   full burst is available again;
/// - [`retry_after`](RateLimitDecision::retry_after): for a rejection,
///   `max(TAT, now) + n·T − burst·T − now`, the exact time until the same request conforms.
///
/// Both durations are whole milliseconds rounded up, so waiting them is always enough.
///
/// # Policy
///
/// [`policy`](Gcra::policy) advertises `limit` permits per `window`: the sustained rate.
/// A client that has been idle may take up to `burst` permits at once and then the
/// sustained rate, so any one stretch of `window` can see up to `burst + limit − 1`.
///
/// # Storage
///
/// One Redis key per (limiter, client key): `<prefix>rl:gcra:<name length>:<name>:<client key>`,
/// a string holding the TAT as an integer count of microseconds since the Unix epoch on the
/// server's clock. Each granted request rewrites it with an expiry at the TAT (rounded up
/// to the millisecond): at most `burst·T` after the last grant, when its absence means the
/// same as its value, a full burst. Probes and rejections create nothing. A key found
/// without an expiry (written by something else) is given one.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::rate_limit::Gcra;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let coordination = Coordination::memory();
/// // 10 per second, one every 100 ms, and up to 3 at once.
/// let limiter = Gcra::new(&coordination, "search", 10, Duration::from_secs(1), 3)?;
///
/// let burst = limiter.try_acquire(b"alice", 3).await?;
/// assert!(burst.is_granted());
/// assert_eq!(burst.remaining(), 0);
/// let rejected = limiter.try_acquire(b"alice", 1).await?;
/// assert!(!rejected.is_granted());
/// let wait = rejected.retry_after().expect("a retry time for a request that can succeed");
/// assert!(wait <= Duration::from_millis(100));
///
/// // Other keys have their own arrival times.
/// assert!(limiter.try_acquire(b"bob", 1).await?.is_granted());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Gcra {
    coordination: Coordination,
    keys: LimiterKeys,
    pub(super) policy: RateLimitPolicy,
    interval_us: u64,
    burst: u64,
}

impl Gcra {
    /// Creates a limiter of `limit` permits per `window` allowing bursts of `burst` permits,
    /// named `name` (which separates its keys from other limiters' and is shown to HTTP
    /// clients as the policy name).
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) when
    /// `limit` or `burst` is 0, when `window / limit` is shorter than one microsecond, or
    /// when `burst · window / limit` exceeds 2^50 µs (about 35 years: beyond it the
    /// script's numbers would lose precision).
    pub fn new(
        coordination: &Coordination,
        name: impl Into<String>,
        limit: u64,
        window: Duration,
        burst: u64,
    ) -> Result<Self> {
        super::named("GCRA limit", name.into(), |name| {
            Self::checked(coordination, name, limit, window, burst)
        })
    }

    /// [`new`](Self::new), its arguments checked.
    fn checked(
        coordination: &Coordination,
        name: String,
        limit: u64,
        window: Duration,
        burst: u64,
    ) -> Result<Self> {
        if limit == 0 || burst == 0 {
            return Err(Error::invalid_argument(format!(
                "a GCRA limit and burst must be at least 1, not {limit} and {burst}"
            )));
        }
        let interval_ns = window.as_nanos() / u128::from(limit);
        if interval_ns < 1000 {
            return Err(Error::invalid_argument(format!(
                "a GCRA emission interval (window / limit) must be at least 1 µs, not \
                 {window:?} / {limit}"
            )));
        }
        let interval_us = window.as_nanos().div_ceil(u128::from(limit) * 1000);
        let interval_us = u64::try_from(interval_us)
            .ok()
            .filter(|t| t.checked_mul(burst).is_some_and(|b| b <= MAX_TOLERANCE_US))
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                    "a GCRA burst of {burst} permits of {window:?} / {limit} each is longer \
                     than 2^50 µs (about 35 years)"
                ))
            })?;
        Ok(Gcra {
            coordination: coordination.clone(),
            keys: LimiterKeys::new(b"gcra", name.as_bytes()),
            policy: RateLimitPolicy::new(name, limit, window),
            interval_us,
            burst,
        })
    }

    /// The limiter's policy: its name, and `limit` permits per `window` (the sustained
    /// rate; bursts of up to [`burst`](Gcra::burst) come on top, see the type's docs).
    pub fn policy(&self) -> &RateLimitPolicy {
        &self.policy
    }

    /// The handle its decisions are asked of.
    pub(crate) fn coordination(&self) -> &Coordination {
        &self.coordination
    }

    /// Permits that an idle client key may take at once.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// What one permit costs: `window / limit`, rounded up to a whole microsecond.
    pub fn emission_interval(&self) -> Duration {
        Duration::from_micros(self.interval_us)
    }

    /// Asks for `permits` permits for `key`, in one atomic step.
    ///
    /// `permits` = 0 probes the current state without consuming or creating anything.
    /// A request for more permits than the burst is rejected (consuming nothing) without a
    /// retry time, since it can never succeed.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: if the future is dropped after the request was sent, the permits may
    /// have been consumed although no decision is returned. An error whose
    /// [`is_outcome_uncertain`](crate::Error::is_outcome_uncertain) is true means the same.
    pub async fn try_acquire(&self, key: &[u8], permits: u64) -> Result<RateLimitDecision> {
        // An impossible request still reads the state (for the response fields) but must
        // never be counted; burst + 1 keeps it impossible and the script's numbers exact.
        let asked = permits.min(self.burst + 1);
        let storage_key = self.keys.for_client(key);
        let reply = self
            .coordination
            .backend()
            .run(GcraStep {
                key: &storage_key,
                permits: asked,
                interval_us: self.interval_us,
                burst: self.burst,
            })
            .await?;
        Ok(RateLimitDecision::from_reply(self.policy.quota(), &reply))
    }
}

impl fmt::Debug for Gcra {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gcra")
            .field("policy", &self.policy)
            .field("burst", &self.burst)
            .field("emission_interval", &self.emission_interval())
            .finish_non_exhaustive()
    }
}
