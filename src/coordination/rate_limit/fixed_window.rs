//! The fixed-window rate limiter.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::hot_keys::{self, HotKeyStatistics, Pending, Reservations, Spend};
use super::key::LimiterKeys;
use super::{HotKeys, RateLimitDecision, RateLimitPolicy};
use crate::Coordination;
use crate::backend::steps::fixed_window::{
    FixedWindowReply, FixedWindowReservation, FixedWindowReserveStep, FixedWindowReturnStep,
    FixedWindowStep,
};
use crate::error::{Error, Result};

/// The longest fixed window on the memory backend, 2^52 ms (about 142,000 years): its clock
/// counts microseconds in 64 bits (some 584,000 years), and a window's end must stay within
/// it however long the backend runs.
const MAX_MEMORY_WINDOW_MS: u64 = 1 << 52;

/// At most `limit` permits per `window` for each client key, counted from the first request
/// of the window.
///
/// The first counted request starts a window of `window`; the window ends then for every
/// request of that key, however many came after (they do not move it). A rejected request
/// consumes nothing: on a standalone or Sentinel server without `INCREX`, a rejected request
/// of one permit stays in the count, but only once the window is full, so it turns no
/// decision. The decision and every time in it come from the backend's clock.
///
/// # Storage
///
/// One Redis key per (limiter, client key): `<prefix>rl:fw:<name length>:<name>:<client key>`,
/// a string holding the window's count as an integer, created by the window's first request
/// with the window's end as its expiry. Nothing outlives a window, but for a counter that a
/// step of one permit found without expiry (one that expired between two of its commands, and
/// was counted again) and whose `PEXPIRE` then failed: the key's next step gives it its
/// window.
///
/// # Servers
///
/// On Redis 8.8+ and Valkey 9.2+ (not on a Cluster) a step is one `INCREX` pipelined with
/// `PTTL` (one round trip). Older servers answer "unknown command"; from then on every
/// limiter built from the same [`Coordination`] goes another way directly, and `INCREX` is
/// tried again after five minutes so that an upgraded server regains the fast path. There, a
/// step of one permit is
/// `SET key 0 NX PX <window>`, `INCR` and `PTTL`, pipelined (one round trip; Redis runs plain
/// commands for a fraction of what it charges a script); any other step runs an equivalent
/// Lua script, as does every step on a Cluster (a moving slot lets one command of a pipeline
/// through to its new node) and when an ACL denies one of those commands.
///
/// # Hot keys
///
/// [`with_hot_keys`](Self::with_hot_keys) lets an instance reserve permits of a busy key in
/// batches and grant them without a round trip, never admitting more than the limit: see
/// [`HotKeys`].
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
    pub(super) policy: RateLimitPolicy,
    window_ms: u64,
    /// The hot-key tier, shared by clones.
    hot_keys: Option<Arc<Reservations>>,
    /// Whether the count holds only admitted requests, on every server (a plan's limiter,
    /// whose count another plan may judge): see [`FixedWindowStep`].
    pub(super) admitted_only: bool,
}

impl FixedWindow {
    /// Creates a limiter of `limit` permits per `window`, named `name` (which separates its
    /// keys from other limiters' and is shown to HTTP clients as the policy name).
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) when
    /// `limit` is 0 or above `i64::MAX` (Redis integers), or `window` is shorter than one
    /// millisecond, or longer than 2^63 - 1 ms (2^52 ms, about 142,000 years, on the memory
    /// backend, whose clock counts microseconds). Sub-millisecond parts of `window` are
    /// dropped.
    pub fn new(
        coordination: &Coordination,
        name: impl Into<String>,
        limit: u64,
        window: Duration,
    ) -> Result<Self> {
        super::named("fixed-window limit", name.into(), |name| {
            Self::checked(coordination, name, limit, window)
        })
    }

    /// [`new`](Self::new), its arguments checked.
    fn checked(
        coordination: &Coordination,
        name: String,
        limit: u64,
        window: Duration,
    ) -> Result<Self> {
        if limit == 0 || i64::try_from(limit).is_err() {
            return Err(Error::invalid_argument(format!(
                "a fixed-window limit must be between 1 and {}, not {limit}",
                i64::MAX
            )));
        }
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        if window_ms == 0 || i64::try_from(window_ms).is_err() {
            return Err(Error::invalid_argument(format!(
                "a fixed window must last between 1 ms and 2^63 - 1 ms (about 292 million \
                 years), not {window:?}"
            )));
        }
        if coordination.backend().as_memory().is_some() && window_ms > MAX_MEMORY_WINDOW_MS {
            return Err(Error::invalid_argument(format!(
                "on the memory backend, a fixed window must last at most 2^52 ms (about \
                 142,000 years), not {window:?}"
            )));
        }
        Ok(FixedWindow {
            coordination: coordination.clone(),
            keys: LimiterKeys::new(b"fw", name.as_bytes()),
            policy: RateLimitPolicy::new(name, limit, Duration::from_millis(window_ms)),
            window_ms,
            hot_keys: None,
            admitted_only: false,
        })
    }

    /// The same limiter with a hot-key tier: this instance reserves permits of a key in
    /// batches, in the step that decides a request, and grants them locally until they are
    /// spent or the window ends (see [`HotKeys`] for the bounds). Clones share the tier; a
    /// new call starts an empty one.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) when a
    /// setting is 0 or the limit is above 10^15. A window of 100 ms or less leaves no time to
    /// spend a batch in (see [`HotKeys`]): the tier then reserves nothing, and every request
    /// goes to the backend as without it.
    pub fn with_hot_keys(mut self, hot_keys: HotKeys) -> Result<Self> {
        hot_keys.check(self.policy.quota())?;
        self.hot_keys = Some(Arc::new(Reservations::new(hot_keys)));
        Ok(self)
    }

    /// Gives every reserved permit this instance has not spent back to the window it was
    /// reserved in, and answers how many were given back. Permits of a window that has
    /// ended are not given to the next one: they lapse. Call it when an instance stops
    /// (after it stopped granting), so that the others may use what it held: from then on
    /// the tier reserves no more batches in the background, and one still on its way gives
    /// its batch back when it lands (not counted in the answer).
    ///
    /// The permits are taken out of the tier before anything is sent, so none can be both
    /// spent and returned; one step per key, each sent once. 0 without a tier.
    ///
    /// # Errors
    ///
    /// The first backend error, after every key was tried; the permits of a key whose
    /// return failed count as lapsed (at worst, under-admission).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped midway, the permits not yet given back lapse.
    pub async fn return_reserved(&self) -> Result<u64> {
        let Some(tier) = &self.hot_keys else {
            return Ok(0);
        };
        tier.close();
        let mut returned_total = 0;
        let mut first_error = None;
        for (key, permits, window) in tier.take_unspent() {
            match self.give_back(tier, &key, permits, window).await {
                Ok(returned) => returned_total += returned,
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        match first_error {
            Some(err) => Err(err),
            None => Ok(returned_total),
        }
    }

    /// Gives `permits` taken out of `key`'s reservation back to `window`, and counts them
    /// returned or (if not) lapsed.
    async fn give_back(
        &self,
        tier: &Reservations,
        key: &[u8],
        permits: u64,
        window: u64,
    ) -> Result<u64> {
        if window == 0 {
            // The server could not name the window (no PEXPIRETIME): never returned.
            return Ok(0);
        }
        let storage_key = self.keys.for_client(key);
        let step = FixedWindowReturnStep {
            key: &storage_key,
            permits,
            window,
            limit: self.policy.quota(),
        };
        match self.coordination.backend().run(step).await {
            Ok(returned) => {
                tier.record_return(permits, returned);
                Ok(returned.min(permits))
            }
            Err(err) => {
                tracing::warn!(error = %err, permits, "reserved permits could not be returned; they lapse");
                Err(err)
            }
        }
    }

    /// What the hot-key tier has done; `None` without one.
    pub(crate) fn hot_key_statistics(&self) -> Option<HotKeyStatistics> {
        self.hot_keys.as_deref().map(Reservations::statistics)
    }

    /// A grant from this instance's reservation of `key`, without a round trip; `None` when
    /// the backend must decide (no tier, or not enough reserved). Nothing waits; the next
    /// batch may be reserved in the background, if `refill`.
    pub(crate) fn granted_locally(
        &self,
        key: &[u8],
        permits: u64,
        refill: bool,
    ) -> Option<RateLimitDecision> {
        let tier = self.hot_keys.as_ref()?;
        if permits == 0 {
            return None;
        }
        match tier.spend(key, permits, self.policy.quota(), false, refill) {
            Spend::Granted(decision, next) => {
                self.reserve_next(next);
                Some(decision)
            }
            Spend::Reserve(_) | Spend::Plain => None,
        }
    }

    /// The limiter's policy: its name, limit and window.
    pub fn policy(&self) -> &RateLimitPolicy {
        &self.policy
    }

    /// The handle its decisions are asked of.
    pub(crate) fn coordination(&self) -> &Coordination {
        &self.coordination
    }

    /// Asks for `permits` permits for `key`, in one step (a script, or for one permit a
    /// pipeline whose count is one `INCR`: atomic either way).
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
    /// With a [hot-key tier](Self::with_hot_keys), the batch the request reserved may have
    /// been taken too, and is lost until its window ends
    /// ([`HotKeyStatistics::unsettled`]).
    pub async fn try_acquire(&self, key: &[u8], permits: u64) -> Result<RateLimitDecision> {
        let limit = self.policy.quota();
        if let Some(tier) = self.hot_keys.as_ref()
            && (1..=limit).contains(&permits)
        {
            match tier.spend(key, permits, limit, true, true) {
                Spend::Granted(decision, next) => {
                    self.reserve_next(next);
                    return Ok(decision);
                }
                Spend::Reserve(pending) => {
                    // Boxed: it runs once per batch, and inline it would double the size of
                    // every decision's future, whose allocation then takes the allocator's
                    // slow path for large blocks on each request.
                    let reply = Box::pin(self.reserve(tier, permits, pending)).await?;
                    // The batch is this instance's to grant: what its clients have left.
                    let unreserved = FixedWindowReply {
                        count: reply.decided.count.saturating_sub(reply.batch),
                        ..reply.decided
                    };
                    return Ok(self.decision(permits, &unreserved));
                }
                Spend::Plain => {}
            }
        }
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
                admitted_only: self.admitted_only,
            })
            .await?;
        Ok(self.decision(permits, &reply))
    }

    /// A reservation of a batch, beside a request for `permits` (or alone, for 0), on its
    /// way as `pending`: settled by the answer.
    async fn reserve(
        &self,
        tier: &Reservations,
        permits: u64,
        mut pending: Pending,
    ) -> Result<FixedWindowReservation> {
        let storage_key = self.keys.for_client(pending.key());
        let stop = hot_keys::stop_before(Duration::from_millis(self.window_ms));
        let step = FixedWindowReserveStep {
            key: &storage_key,
            permits,
            limit: self.policy.quota(),
            window_ms: self.window_ms,
            max_batch: tier.settings().max_batch(),
            share: tier.settings().share_denominator(),
            stop_before_ms: u64::try_from(stop.as_millis()).unwrap_or(u64::MAX),
        };
        pending.sending();
        match self.coordination.backend().run(step).await {
            Ok(reply) => {
                pending.settle(&reply, self.policy.quota(), stop);
                Ok(reply)
            }
            Err(err) => {
                pending.fail(&err);
                Err(err)
            }
        }
    }

    /// Reserves the next batch in the background, on the runtime this runs on; without one,
    /// not at all (the key reserves again when its batch is spent).
    fn reserve_next(&self, pending: Option<Pending>) {
        let Some(pending) = pending else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            pending.cancel();
            return;
        };
        let window = self.clone();
        runtime.spawn(async move {
            let Some(tier) = window.hot_keys.clone() else {
                return pending.cancel();
            };
            let key = pending.key().to_vec();
            if let Err(err) = window.reserve(&tier, 0, pending).await {
                tracing::debug!(error = %err, "a hot key's next batch could not be reserved");
                return;
            }
            // Landed after the instance began to return what it holds: this one goes back
            // too, rather than lapse.
            if tier.is_closing()
                && let Some((permits, window_name)) = tier.take_unspent_of(&key)
            {
                let _ = window.give_back(&tier, &key, permits, window_name).await;
            }
        });
    }

    /// The decision of a request for `permits` from the step's reply.
    fn decision(&self, permits: u64, reply: &FixedWindowReply) -> RateLimitDecision {
        let limit = self.policy.quota();
        let reset_after = Duration::from_millis(reply.ttl_ms.unwrap_or(self.window_ms));
        // Not the reset time itself: Redis frees the window a millisecond after its TTL, and
        // a client (or a queued waiter) that comes back exactly at the TTL is rejected again.
        let free_in = Duration::from_millis(reply.free_in_ms.unwrap_or(self.window_ms));
        let retry_after = (!reply.granted && permits <= limit).then_some(free_in);
        RateLimitDecision::new(
            reply.granted,
            limit,
            limit.saturating_sub(reply.count),
            reset_after,
            retry_after,
        )
    }
}

impl fmt::Debug for FixedWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FixedWindow")
            .field("policy", &self.policy)
            .field(
                "hot_keys",
                &self.hot_keys.as_ref().map(|tier| tier.settings()),
            )
            .finish_non_exhaustive()
    }
}
