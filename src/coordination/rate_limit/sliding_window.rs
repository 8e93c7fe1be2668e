//! The sliding-window rate limiter, with the window split into segments.

use std::fmt;
use std::time::Duration;

use super::key::LimiterKeys;
use super::{RateLimitDecision, RateLimitPolicy};
use crate::Coordination;
use crate::backend::steps::sliding_window::SlidingWindowStep;
use crate::error::{Error, Result};

/// The largest limit: counts and requests (at most the limit + 1) then add up below 2^53,
/// which the script's Lua numbers (doubles) hold exactly.
const MAX_LIMIT: u64 = (1 << 52) - 1;
/// The most segments a window may have: each is one hash field, read by every rejection.
const MAX_SEGMENTS: u32 = 1000;
/// The longest window, 2^40 ms (about 34 years): every timestamp the step computes stays
/// far below 2^53 ms.
const MAX_WINDOW_MS: u64 = 1 << 40;

/// At most `limit` permits for each client key in any `window`, counted per segment of the
/// window so that permits come back gradually as the window slides.
///
/// The window is split into `segments` equal segments of `window / segments`, aligned on the
/// backend's clock. A granted request is counted in the segment it falls in, and that
/// segment's permits are freed once the segment's **end** is a whole window in the past: the
/// request time is rounded forward, never back, so a permit is never freed before `window`
/// has passed since it was granted. This can hold it up to one segment longer; more segments
/// make that delay smaller (with one segment, everything granted in a clock-aligned window is
/// freed together, a window after that window ends).
/// A rejected request consumes nothing. The decision and every time in it come from the
/// backend's clock.
///
/// For a rejection, the retry time is exact: the oldest segments are freed first, and it is
/// the time until the last of those that the request needs has left the window. It can
/// therefore exceed the policy's window (its `w`) by up to one segment: with a window of
/// 60 s in 10 segments, a client may be told to wait up to 66 s.
///
/// # Policy
///
/// [`policy`](Self::policy) advertises `q` = `limit` and `w` = `window`: no interval of length
/// `window` ever sees more than `limit` permits granted, since each stays counted for at
/// least `window` after its grant.
///
/// # Storage
///
/// One Redis key per (limiter, client key): `<prefix>rl:sw:<name length>:<name>:<client key>`,
/// a hash whose fields are segment ends (milliseconds since the Unix epoch on the server's
/// clock, as decimal integers) and whose values are the permits counted in each segment,
/// plus two summary fields that the first grant writes: `n`, the sum of the counts, and `o`,
/// the oldest segment's end. A hash because each grant adds to one segment with `HINCRBY`,
/// and the whole state is a few small fields (a compact listpack for up to 125 segments with
/// default server settings). While the oldest segment is still in the window, a grant or a
/// probe reads the summary alone; a step that finds a segment leaving the window, a
/// rejection (whose retry time needs the segments) or a summary that does not read as
/// numbers reads and checks the whole hash, and a grant there removes the segments that have
/// left the window and writes the summary anew, so the hash never holds more than one
/// window's permits. The key is created by the first granted request and expires when its
/// newest segment leaves the window (`PEXPIREAT` newest end + `window`): nothing outlives its
/// use. Probes and rejections create and change nothing, except to give back an expiry
/// removed from outside (`PERSIST`). Those whole-hash steps cost more with every segment; a
/// few dozen segments at most are usually plenty.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::rate_limit::SlidingWindow;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let coordination = Coordination::memory();
/// // 3 permits per minute, freed in steps of 10 seconds.
/// let limiter = SlidingWindow::new(&coordination, "login", 3, Duration::from_secs(60), 6)?;
///
/// for _ in 0..3 {
///     assert!(limiter.try_acquire(b"alice", 1).await?.is_granted());
/// }
/// let rejected = limiter.try_acquire(b"alice", 1).await?;
/// assert!(!rejected.is_granted());
/// let wait = rejected.retry_after().expect("a retry time for a request that can succeed");
/// assert!(wait > Duration::from_secs(60) - Duration::from_secs(1));
/// assert!(wait <= Duration::from_secs(70));
///
/// // Other keys have their own windows.
/// assert!(limiter.try_acquire(b"bob", 1).await?.is_granted());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SlidingWindow {
    coordination: Coordination,
    keys: LimiterKeys,
    pub(super) policy: RateLimitPolicy,
    window_ms: u64,
    segment_ms: u64,
}

impl SlidingWindow {
    /// Creates a limiter of `limit` permits per `window` split into `segments` segments,
    /// named `name` (which separates its keys from other limiters' and is shown to HTTP
    /// clients as the policy name).
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) when
    /// `limit` is 0 or above 2^52 − 1, `segments` is 0 or above 1000, or `window` is not a
    /// whole number of milliseconds that `segments` divides (each segment a whole number of
    /// milliseconds, at least 1), or longer than 2^40 ms (about 34 years). Nothing is rounded:
    /// the advertised window is the one enforced.
    pub fn new(
        coordination: &Coordination,
        name: impl Into<String>,
        limit: u64,
        window: Duration,
        segments: u32,
    ) -> Result<Self> {
        super::named("sliding-window limit", name.into(), |name| {
            Self::checked(coordination, name, limit, window, segments)
        })
    }

    /// [`new`](Self::new), its arguments checked.
    fn checked(
        coordination: &Coordination,
        name: String,
        limit: u64,
        window: Duration,
        segments: u32,
    ) -> Result<Self> {
        if limit == 0 || limit > MAX_LIMIT {
            return Err(Error::invalid_argument(format!(
                "a sliding-window limit must be between 1 and {MAX_LIMIT}, not {limit}"
            )));
        }
        if segments == 0 || segments > MAX_SEGMENTS {
            return Err(Error::invalid_argument(format!(
                "a sliding window must have between 1 and {MAX_SEGMENTS} segments, not {segments}"
            )));
        }
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        let whole_ms = window.subsec_nanos().is_multiple_of(1_000_000);
        if !whole_ms || window_ms == 0 || window_ms > MAX_WINDOW_MS {
            return Err(Error::invalid_argument(format!(
                "a sliding window must be a whole number of milliseconds between 1 ms and \
                 2^40 ms (about 34 years), not {window:?}"
            )));
        }
        if !window_ms.is_multiple_of(u64::from(segments)) {
            return Err(Error::invalid_argument(format!(
                "a sliding window of {window_ms} ms does not split into {segments} segments of \
                 whole milliseconds"
            )));
        }
        Ok(SlidingWindow {
            coordination: coordination.clone(),
            keys: LimiterKeys::new(b"sw", name.as_bytes()),
            policy: RateLimitPolicy::new(name, limit, window),
            window_ms,
            segment_ms: window_ms / u64::from(segments),
        })
    }

    /// The limiter's policy: its name, limit and window (see [Policy](Self#policy)).
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
        // never be counted; limit + 1 keeps it impossible and exact in Lua.
        let asked = permits.min(limit + 1);
        let storage_key = self.keys.for_client(key);
        let reply = self
            .coordination
            .backend()
            .run(SlidingWindowStep {
                key: &storage_key,
                permits: asked,
                limit,
                window_ms: self.window_ms,
                segment_ms: self.segment_ms,
            })
            .await?;
        Ok(RateLimitDecision::from_reply(limit, &reply))
    }
}

impl fmt::Debug for SlidingWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlidingWindow")
            .field("policy", &self.policy)
            .field("segment_ms", &self.segment_ms)
            .finish_non_exhaustive()
    }
}
