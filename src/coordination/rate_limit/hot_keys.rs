//! The hot-key tier of a fixed window: permits reserved in batches, spent locally, and never
//! more than the backend granted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::RateLimitDecision;
use crate::backend::steps::fixed_window::{FixedWindowReservation, HOT_KEY_MAX_LIMIT};
use crate::error::{Error, Result};

/// The settings of a fixed window's hot-key tier (see
/// [`FixedWindow::with_hot_keys`](super::FixedWindow::with_hot_keys)).
///
/// A request for a key this instance holds no reservation for goes to the backend, as
/// always, and asks for a batch beside its own permits, in the same atomic step. The batch
/// is counted in the window at once, so every other instance sees it as used; this instance
/// then grants from it locally, with no round trip, until it is spent or the window ends.
///
/// - **Never over the limit.** A batch is at most [`max_batch`](Self::new) permits, at most
///   a [`share`](Self::share) of what the window has left after the request, and at most
///   the part of `max_batch` that the window's time left is of the window (none in its last
///   moments); the backend grants it atomically, so no instance can reserve what another was
///   granted. Locally the tier grants only from what it reserved, and only until the
///   window's end as measured from the moment the reservation was sent (an answer that took
///   long shortens the reservation, never lengthens it), less 100 ms and 1 ms per second of
///   the window: a server clock stepped forward, or a new primary's clock ahead of the old
///   one's, ends a window early by up to that much, as the crate's other deadlines allow. A
///   cold instance, or one whose batch ran out, asks the backend; it never admits on its
///   own. (Like any counter on a replicated server, a failover that loses the reservation's
///   write loses its count too.)
/// - **Under the limit by a bounded amount.** Reserved permits an instance does not spend
///   are lost to everyone until the window ends: at most `max_batch` and a fifth per key per
///   instance at a time (a batch, and what is left of the one before when the next lands;
///   less as the window fills or ends, since each batch is a share of what is left), plus
///   the batch of each reservation whose answer never came
///   ([`unsettled`](HotKeyStatistics::unsettled)). An instance that dies or is cut off loses
///   at most what it held. [`FixedWindow::return_reserved`](super::FixedWindow::return_reserved) (on
///   shutdown, say) gives unspent permits back to their window, and only to it.
///   [`RateLimitStatistics::hot_keys`](super::RateLimitStatistics::hot_keys) reports what
///   was reserved, spent, returned and lost.
/// - **One reservation in flight per key.** Once a fifth of a batch is left, the next one is
///   reserved in the background (on the Tokio runtime the grant ran on; not while a
///   rate-limit layer's circuit breaker, its own or its handle's, is open), and the key's requests go on being granted
///   from what is left meanwhile, so a hot key's requests seldom wait for the backend. A
///   server that cannot name its windows (no `PEXPIRETIME`) gets no background batches,
///   since it could not tell the next batch's window from this one's. While a reservation is
///   on its way and nothing is held, the key's requests are decided by the backend one by
///   one, as without the tier.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::rate_limit::{FixedWindow, HotKeys, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let coordination = Coordination::memory();
/// let window = FixedWindow::new(&coordination, "search", 1_000, Duration::from_secs(1))?
///     .with_hot_keys(HotKeys::new(50))?;
/// let limiter = RateLimiter::from(window);
///
/// // The first request reserves a batch beside its own permit; the next ones spend it here.
/// for _ in 0..20 {
///     assert!(limiter.try_acquire(b"tenant-7", 1).await?.is_granted());
/// }
/// let tier = limiter.statistics().hot_keys().expect("the tier is on");
/// assert_eq!(tier.spent(), 19);
/// assert_eq!(tier.held(), tier.reserved() - 19);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotKeys {
    max_batch: u64,
    share: u64,
    max_keys: usize,
}

/// What an instance leaves of a window unspent, whatever the server's answer said: a
/// server clock stepped forward, or a new primary's clock ahead of the old one's, by up to
/// this much ends the window early on the server. The crate's deadlines allow as much (see
/// the failure model's clock rules).
const CLOCK_STEP: Duration = Duration::from_millis(100);

/// How long before a window's end, as a reply of `ttl` gave it, the instance stops
/// spending: [`CLOCK_STEP`], 1 ms per second for the two clocks drifting apart, and the
/// millisecond a reply is rounded to.
pub(crate) fn stop_before(ttl: Duration) -> Duration {
    CLOCK_STEP + ttl / 1000 + Duration::from_millis(1)
}

/// A batch takes at most a quarter of what the window has left, unless set otherwise.
const DEFAULT_SHARE: u64 = 4;

/// Keys with a reservation at once, unless set otherwise.
const DEFAULT_MAX_KEYS: usize = 1024;

impl HotKeys {
    /// A tier that reserves at most `max_batch` permits per batch, at most a quarter of what
    /// the window has left, for up to 1024 keys at once.
    pub fn new(max_batch: u64) -> Self {
        HotKeys {
            max_batch,
            share: DEFAULT_SHARE,
            max_keys: DEFAULT_MAX_KEYS,
        }
    }

    /// A batch takes at most `1 / denominator` of what the window has left after the request
    /// (4 unless set: a quarter). 1 lets one instance reserve everything that is left.
    pub fn share(mut self, denominator: u64) -> Self {
        self.share = denominator;
        self
    }

    /// Keys this instance holds reservations for at once (1024 unless set). A new key beyond
    /// that, while every reservation is still live, is decided by the backend without one.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// Checks the settings against a window of `limit` permits.
    pub(crate) fn check(&self, limit: u64) -> Result<()> {
        let invalid = |what: String| Err(Error::invalid_argument(what));
        if self.max_batch == 0 {
            return invalid("a hot-key batch must hold at least one permit".into());
        }
        if self.share == 0 {
            return invalid("a hot-key share is 1 / denominator, and the denominator 0".into());
        }
        if self.max_keys == 0 {
            return invalid("a hot-key tier must hold at least one key".into());
        }
        if limit > HOT_KEY_MAX_LIMIT {
            return invalid(format!(
                "the hot-key tier takes limits up to {HOT_KEY_MAX_LIMIT}, not {limit}"
            ));
        }
        Ok(())
    }

    pub(crate) fn max_batch(&self) -> u64 {
        self.max_batch
    }

    pub(crate) fn share_denominator(&self) -> u64 {
        self.share
    }
}

/// What one instance's hot-key tier has done, in permits (see [`HotKeys`]).
///
/// Every reserved permit is, at any moment, exactly one of: spent here, returned, lapsed
/// (its window ended first, or it could not be returned), or still held:
/// `reserved == spent + returned + lapsed + held`. Lapsed permits, and the batches of
/// reservations whose answer never came ([`unsettled`](Self::unsettled)), are what the tier
/// cost in admissions: permits counted as used that nobody was granted.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::rate_limit::{FixedWindow, HotKeys, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let window = FixedWindow::new(&Coordination::memory(), "api", 100, Duration::from_secs(60))?
///     .with_hot_keys(HotKeys::new(10))?;
/// let limiter = RateLimiter::from(window.clone());
/// limiter.try_acquire(b"k", 1).await?;
/// assert_eq!(window.return_reserved().await?, 10);
/// let tier = limiter.statistics().hot_keys().expect("the tier is on");
/// assert_eq!((tier.reserved(), tier.returned(), tier.held()), (10, 10, 0));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HotKeyStatistics {
    reserved: u64,
    spent: u64,
    returned: u64,
    lapsed: u64,
    held: u64,
    unsettled: u64,
    in_flight: u64,
}

impl HotKeyStatistics {
    /// Permits reserved in batches, beyond the requests that reserved them.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Reserved permits granted here, without a round trip.
    pub fn spent(&self) -> u64 {
        self.spent
    }

    /// Reserved permits given back to their window.
    pub fn returned(&self) -> u64 {
        self.returned
    }

    /// Reserved permits neither spent nor returned before their window ended.
    pub fn lapsed(&self) -> u64 {
        self.lapsed
    }

    /// Reserved permits held now, for windows that have not ended.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// Reservations whose answer never came once sent (the request failed or timed out, was
    /// dropped, or the runtime of a background one shut down): each may have taken up to a
    /// batch that nobody will spend.
    pub fn unsettled(&self) -> u64 {
        self.unsettled
    }

    /// Reservations on their way now, for a request or in the background: their batches are
    /// in none of the counts yet.
    pub fn in_flight(&self) -> u64 {
        self.in_flight
    }
}

/// One instance's reservations, per client key.
#[derive(Debug)]
pub(crate) struct Reservations {
    settings: HotKeys,
    entries: Mutex<HashMap<Box<[u8]>, Reservation>>,
    reserved: AtomicU64,
    spent: AtomicU64,
    returned: AtomicU64,
    lapsed: AtomicU64,
    unsettled: AtomicU64,
    /// Set by a return of everything: no more batches in the background.
    closing: AtomicBool,
    /// While the map is full of live reservations, the earliest moment one of them can
    /// lapse (capped: see `spend`): a new key before it goes without a scan of the map (one
    /// is O(max_keys), and a flood of distinct keys would pay it per request). Written under
    /// the entries' lock.
    no_room_until: Mutex<Option<Instant>>,
    /// Scans of a full map, for the tests.
    #[cfg(test)]
    sweeps: AtomicU64,
}

/// What this instance holds for one client key.
#[derive(Debug)]
struct Reservation {
    /// Reserved permits not yet spent.
    left: u64,
    /// When they may be spent no more: the window's end, measured from when the
    /// reservation was sent.
    usable_until: Instant,
    /// What names the window to return to (0: none can be returned).
    window: u64,
    /// What the window had left for everyone else after the reservation.
    unreserved: u64,
    /// The latest batch's size: a fifth of it left asks for the next.
    batch: u64,
    /// A reservation for this key is on its way.
    reserving: bool,
}

impl Reservation {
    fn is_live(&self, now: Instant) -> bool {
        now < self.usable_until
    }
}

/// What the tier makes of a request.
pub(crate) enum Spend {
    /// Granted here, from a reservation; with the next batch to reserve in the background
    /// when this one runs low.
    Granted(RateLimitDecision, Option<Pending>),
    /// Ask the backend, reserving a batch beside the request.
    Reserve(Pending),
    /// Ask the backend, without a batch (one is on its way, or no room for the key).
    Plain,
}

/// A reservation on its way: settled by its answer, or counted as unsettled when dropped
/// without one. Either way the key may reserve again.
pub(crate) struct Pending {
    reservations: Arc<Reservations>,
    key: Box<[u8]>,
    sent_at: Instant,
    settled: bool,
    /// Dropped unsettled: the reservation may have taken its batch (the answer was lost, or
    /// the request dropped) unless a certain failure says otherwise.
    may_have_applied: bool,
}

impl Reservations {
    pub(crate) fn new(settings: HotKeys) -> Self {
        Reservations {
            settings,
            entries: Mutex::new(HashMap::new()),
            reserved: AtomicU64::new(0),
            spent: AtomicU64::new(0),
            returned: AtomicU64::new(0),
            lapsed: AtomicU64::new(0),
            unsettled: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            no_room_until: Mutex::new(None),
            #[cfg(test)]
            sweeps: AtomicU64::new(0),
        }
    }

    /// Stops reserving batches in the background, for good: the instance is returning what
    /// it holds.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
    }

    /// Whether [`close`](Self::close) was called.
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    pub(crate) fn settings(&self) -> &HotKeys {
        &self.settings
    }

    /// Spends `permits` of `key`'s reservation if it holds them (starting the next batch's
    /// reservation when a fifth of this one is left, if `refill`); otherwise, when `reserve`
    /// and no reservation for the key is on its way, starts one for the request.
    pub(crate) fn spend(
        self: &Arc<Self>,
        key: &[u8],
        permits: u64,
        limit: u64,
        reserve: bool,
        refill: bool,
    ) -> Spend {
        let now = Instant::now();
        let mut entries = self.lock();
        if let Some(entry) = entries.get_mut(key) {
            if !entry.is_live(now) {
                self.lapse(entry);
            }
            if entry.left >= permits {
                entry.left -= permits;
                self.spent.fetch_add(permits, Ordering::Relaxed);
                let remaining = entry.unreserved.saturating_add(entry.left).min(limit);
                let reset_after = entry.usable_until.saturating_duration_since(now);
                let decision = RateLimitDecision::new(true, limit, remaining, reset_after, None);
                // Running low in a window the server names: the next batch, before this one
                // is spent.
                let next = (refill
                    && entry.batch > 0
                    && entry.left <= entry.batch / 5
                    && !entry.reserving
                    && entry.window != 0
                    && !self.is_closing())
                .then(|| {
                    entry.reserving = true;
                    self.pending(key, now)
                });
                return Spend::Granted(decision, next);
            }
            if !reserve || entry.reserving {
                return Spend::Plain;
            }
            entry.reserving = true;
        } else {
            if !reserve {
                return Spend::Plain;
            }
            if entries.len() >= self.settings.max_keys {
                // Forget the keys whose reservations lapsed; if every one is live, this key
                // goes without, and so does every new key until the first can lapse.
                let mut no_room_until = self
                    .no_room_until
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if no_room_until.is_some_and(|until| now < until) {
                    return Spend::Plain;
                }
                #[cfg(test)]
                self.sweeps.fetch_add(1, Ordering::Relaxed);
                let mut earliest: Option<Instant> = None;
                let mut reserving = false;
                entries.retain(|_, entry| {
                    if entry.reserving {
                        reserving = true;
                        return true;
                    }
                    if entry.is_live(now) {
                        earliest = Some(
                            earliest.map_or(entry.usable_until, |at| at.min(entry.usable_until)),
                        );
                        return true;
                    }
                    self.lapse(entry);
                    false
                });
                if entries.len() >= self.settings.max_keys {
                    // A reservation in flight may settle (or fail) with an earlier end, and a
                    // settled one may be shortened: the wait is capped, 10 ms while one is in
                    // flight, 100 ms otherwise, so a scan comes at most that often.
                    let cap = now
                        + if reserving {
                            Duration::from_millis(10)
                        } else {
                            Duration::from_millis(100)
                        };
                    *no_room_until = Some(earliest.map_or(cap, |at| at.min(cap)));
                    return Spend::Plain;
                }
                *no_room_until = None;
            }
            entries.insert(
                key.into(),
                Reservation {
                    left: 0,
                    usable_until: now,
                    window: 0,
                    unreserved: 0,
                    batch: 0,
                    reserving: true,
                },
            );
        }
        Spend::Reserve(self.pending(key, now))
    }

    fn pending(self: &Arc<Self>, key: &[u8], now: Instant) -> Pending {
        Pending {
            reservations: Arc::clone(self),
            key: key.into(),
            sent_at: now,
            settled: false,
            may_have_applied: false,
        }
    }

    /// Takes every live reservation's unspent permits, to return them: `(key, permits,
    /// window)`. They count as lapsed until [`record_return`](Self::record_return) says
    /// which were returned, so that none goes uncounted if the return never ends.
    pub(crate) fn take_unspent(&self) -> Vec<(Box<[u8]>, u64, u64)> {
        let now = Instant::now();
        let mut entries = self.lock();
        let mut taken = Vec::new();
        for (key, entry) in entries.iter_mut() {
            if !entry.is_live(now) {
                self.lapse(entry);
            } else if entry.left > 0 {
                taken.push((key.clone(), entry.left, entry.window));
                self.lapse(entry);
            }
        }
        taken
    }

    /// Takes the unspent permits of `key`'s live reservation, as
    /// [`take_unspent`](Self::take_unspent) does for every key: `(permits, window)`.
    pub(crate) fn take_unspent_of(&self, key: &[u8]) -> Option<(u64, u64)> {
        let now = Instant::now();
        let mut entries = self.lock();
        let entry = entries.get_mut(key)?;
        let taken = (entry.is_live(now) && entry.left > 0).then_some((entry.left, entry.window));
        self.lapse(entry);
        taken
    }

    /// Counts `returned` of `taken` permits as returned rather than lapsed.
    pub(crate) fn record_return(&self, taken: u64, returned: u64) {
        let returned = returned.min(taken);
        // Under the lock, as every count of the invariant changes: a snapshot sees both
        // counts moved or neither.
        let _entries = self.lock();
        self.lapsed.fetch_sub(returned, Ordering::Relaxed);
        self.returned.fetch_add(returned, Ordering::Relaxed);
    }

    pub(crate) fn statistics(&self) -> HotKeyStatistics {
        let now = Instant::now();
        let entries = self.lock();
        let (mut held, mut lapsing, mut in_flight) = (0u64, 0u64, 0u64);
        for entry in entries.values() {
            in_flight += u64::from(entry.reserving);
            if entry.is_live(now) {
                held = held.saturating_add(entry.left);
            } else {
                lapsing = lapsing.saturating_add(entry.left);
            }
        }
        HotKeyStatistics {
            reserved: self.reserved.load(Ordering::Relaxed),
            spent: self.spent.load(Ordering::Relaxed),
            returned: self.returned.load(Ordering::Relaxed),
            lapsed: self.lapsed.load(Ordering::Relaxed).saturating_add(lapsing),
            held,
            unsettled: self.unsettled.load(Ordering::Relaxed),
            in_flight,
        }
    }

    /// The unspent permits of a reservation whose window ended.
    fn lapse(&self, entry: &mut Reservation) {
        self.lapsed.fetch_add(entry.left, Ordering::Relaxed);
        entry.left = 0;
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Box<[u8]>, Reservation>> {
        // Every update leaves the map whole before anything that could panic.
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Pending {
    /// Marks the reservation sent: dropped from now on without an answer, it may have taken
    /// its batch.
    pub(crate) fn sending(&mut self) {
        self.may_have_applied = true;
    }

    /// Records the reservation's answer, taken at `limit` permits per window, of which the
    /// instance spends nothing in the last `stop` (see [`stop_before`]).
    pub(crate) fn settle(mut self, reply: &FixedWindowReservation, limit: u64, stop: Duration) {
        self.settled = true;
        let reservations = &*self.reservations;
        let mut entries = reservations.lock();
        let Some(entry) = entries.get_mut(&*self.key) else {
            return;
        };
        entry.reserving = false;
        let Some(ttl_ms) = reply.decided.ttl_ms.filter(|_| reply.decided.granted) else {
            return;
        };
        // Measured from the send, since the server counted the window's rest later than
        // that, and ended early by what the clocks may disagree on.
        let usable_until = crate::time::after(
            self.sent_at,
            Duration::from_millis(ttl_ms).saturating_sub(stop),
        );
        if !entry.is_live(Instant::now()) || reply.window == 0 || entry.window != reply.window {
            // Ended here, or a new window, or one the server cannot name (which may be new):
            // whatever was left lapses, and never counts in this one.
            reservations.lapse(entry);
            entry.window = reply.window;
            entry.usable_until = usable_until;
        } else {
            // Held permits of this window keep the end their own answer gave them.
            entry.usable_until = entry.usable_until.min(usable_until);
        }
        entry.left = entry.left.saturating_add(reply.batch);
        // A batch of 0 (the window full, or ending) asks for no next one in this window.
        entry.batch = reply.batch;
        entry.unreserved = limit.saturating_sub(reply.decided.count);
        reservations
            .reserved
            .fetch_add(reply.batch, Ordering::Relaxed);
    }
}

impl Pending {
    /// Records a reservation that failed: unsettled only when it may have been applied.
    pub(crate) fn fail(mut self, err: &Error) {
        self.may_have_applied = err.is_outcome_uncertain();
    }

    /// Gives up a reservation that was never sent.
    pub(crate) fn cancel(mut self) {
        self.may_have_applied = false;
    }

    /// The client key it reserves for.
    pub(crate) fn key(&self) -> &[u8] {
        &self.key
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let reservations = &*self.reservations;
        if self.may_have_applied {
            reservations.unsettled.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(entry) = reservations.lock().get_mut(&*self.key) {
            entry.reserving = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::steps::fixed_window::FixedWindowReply;

    /// What a 1 s window stops before its end.
    const STOP: Duration = Duration::from_millis(102);

    fn reservation(batch: u64, count: u64, ttl_ms: u64, window: u64) -> FixedWindowReservation {
        FixedWindowReservation {
            decided: FixedWindowReply {
                granted: true,
                count,
                ttl_ms: Some(ttl_ms),
                free_in_ms: Some(ttl_ms + 1),
            },
            batch,
            window,
        }
    }

    fn granted(spend: Spend) -> Option<RateLimitDecision> {
        match spend {
            Spend::Granted(decision, next) => {
                if let Some(next) = next {
                    next.cancel();
                }
                Some(decision)
            }
            _ => None,
        }
    }

    /// A reservation is spent to its last permit and never beyond, and one in flight keeps a
    /// second from starting.
    #[tokio::test(start_paused = true)]
    async fn spends_what_was_reserved_and_no_more() {
        let tier = Arc::new(Reservations::new(HotKeys::new(3)));
        let Spend::Reserve(ticket) = tier.spend(b"k", 1, 100, true, true) else {
            panic!("a cold key reserves");
        };
        assert!(matches!(tier.spend(b"k", 1, 100, true, true), Spend::Plain));
        ticket.settle(&reservation(3, 4, 1_000, 7), 100, STOP);
        for _ in 0..3 {
            assert!(granted(tier.spend(b"k", 1, 100, true, true)).is_some());
        }
        assert!(matches!(
            tier.spend(b"k", 1, 100, false, true),
            Spend::Plain
        ));
        // Dropped before it was sent: nothing may have been taken.
        assert!(matches!(
            tier.spend(b"k", 1, 100, true, true),
            Spend::Reserve(_)
        ));
        assert_eq!(tier.statistics().unsettled(), 0);
        // Dropped once sent, without an answer: it may have taken a batch.
        let Spend::Reserve(mut sent) = tier.spend(b"k", 1, 100, true, true) else {
            panic!("nothing held, nothing on its way: reserves");
        };
        sent.sending();
        drop(sent);
        let stats = tier.statistics();
        assert_eq!((stats.reserved(), stats.spent(), stats.held()), (3, 3, 0));
        assert_eq!((stats.unsettled(), stats.in_flight()), (1, 0));
    }

    /// A batch of 0 in the same window (the window full) asks for no next one.
    #[tokio::test(start_paused = true)]
    async fn a_batch_of_nothing_asks_for_no_next_one() {
        let tier = Arc::new(Reservations::new(HotKeys::new(10)));
        let Spend::Reserve(pending) = tier.spend(b"k", 1, 1_000, true, true) else {
            panic!("a cold key reserves");
        };
        pending.settle(&reservation(10, 11, 60_000, 7), 1_000, STOP);
        for _ in 0..7 {
            assert!(granted(tier.spend(b"k", 1, 1_000, false, true)).is_some());
        }
        let Spend::Granted(_, Some(next)) = tier.spend(b"k", 1, 1_000, false, true) else {
            panic!("the next batch");
        };
        next.settle(&reservation(0, 1_000, 59_000, 7), 1_000, STOP);
        assert!(matches!(
            tier.spend(b"k", 1, 1_000, false, true),
            Spend::Granted(_, None)
        ));
        assert!(matches!(
            tier.spend(b"k", 1, 1_000, false, true),
            Spend::Granted(_, None)
        ));
        assert_eq!(tier.statistics().held(), 0);
    }

    /// A late answer for the same window never lets held permits outlive their own end.
    #[tokio::test(start_paused = true)]
    async fn a_later_answer_never_extends_held_permits() {
        let tier = Arc::new(Reservations::new(HotKeys::new(10)));
        let Spend::Reserve(pending) = tier.spend(b"k", 1, 1_000, true, true) else {
            panic!("a cold key reserves");
        };
        pending.settle(&reservation(10, 11, 1_000, 7), 1_000, STOP);
        for _ in 0..8 {
            assert!(granted(tier.spend(b"k", 1, 1_000, false, true)).is_some());
        }
        // 200 ms later, the next batch's answer says the window has 950 ms left (a server
        // clock that went back, say): the held permit ends at 898 ms all the same.
        tokio::time::advance(Duration::from_millis(200)).await;
        let Spend::Granted(_, Some(next)) = tier.spend(b"k", 1, 1_000, false, true) else {
            panic!("the next batch");
        };
        next.settle(&reservation(5, 16, 950, 7), 1_000, STOP);
        tokio::time::advance(Duration::from_millis(697)).await;
        assert!(granted(tier.spend(b"k", 1, 1_000, false, false)).is_some());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(granted(tier.spend(b"k", 1, 1_000, false, false)).is_none());
    }

    /// A fifth of a batch left starts the next batch's reservation, once, in a window the
    /// server names; none while it is on its way.
    #[tokio::test(start_paused = true)]
    async fn a_fifth_left_reserves_the_next_batch() {
        let tier = Arc::new(Reservations::new(HotKeys::new(10)));
        let Spend::Reserve(pending) = tier.spend(b"k", 1, 1_000, true, true) else {
            panic!("a cold key reserves");
        };
        pending.settle(&reservation(10, 11, 60_000, 7), 1_000, STOP);
        for _ in 0..7 {
            assert!(matches!(
                tier.spend(b"k", 1, 1_000, false, true),
                Spend::Granted(_, None)
            ));
        }
        // 2 left of 10.
        let Spend::Granted(_, Some(next)) = tier.spend(b"k", 1, 1_000, false, true) else {
            panic!("the next batch");
        };
        assert_eq!(tier.statistics().in_flight(), 1);
        assert!(matches!(
            tier.spend(b"k", 1, 1_000, false, true),
            Spend::Granted(_, None)
        ));
        next.settle(&reservation(10, 21, 59_000, 7), 1_000, STOP);
        let stats = tier.statistics();
        assert_eq!(
            (stats.reserved(), stats.held(), stats.in_flight()),
            (20, 11, 0)
        );
    }

    /// Permits are spent only before the window's end as measured from the send, and what
    /// was left lapses.
    #[tokio::test(start_paused = true)]
    async fn a_reservation_ends_with_its_window_from_the_send() {
        let tier = Arc::new(Reservations::new(HotKeys::new(10)));
        let Spend::Reserve(ticket) = tier.spend(b"k", 1, 100, true, true) else {
            panic!("a cold key reserves");
        };
        // The answer took 300 ms; the window had 1000 ms left when the server counted, and
        // spending stops 102 ms before (a clock step, drift, rounding): 898 ms from the send.
        tokio::time::advance(Duration::from_millis(300)).await;
        ticket.settle(&reservation(10, 11, 1_000, 7), 100, STOP);
        tokio::time::advance(Duration::from_millis(597)).await;
        let decision = granted(tier.spend(b"k", 1, 100, false, true)).expect("still live");
        assert_eq!(decision.remaining(), 89 + 9);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(granted(tier.spend(b"k", 1, 100, false, true)).is_none());
        let stats = tier.statistics();
        assert_eq!((stats.spent(), stats.lapsed(), stats.held()), (1, 9, 0));
    }

    /// A server that cannot name its windows (no `PEXPIRETIME`) may answer from a new one:
    /// what the old reservation left lapses rather than joining the new batch.
    #[tokio::test(start_paused = true)]
    async fn an_unnamed_window_never_inherits_permits() {
        let tier = Arc::new(Reservations::new(HotKeys::new(5)));
        let Spend::Reserve(ticket) = tier.spend(b"k", 1, 100, true, true) else {
            panic!("a cold key reserves");
        };
        ticket.settle(&reservation(5, 6, 60_000, 0), 100, STOP);
        assert!(granted(tier.spend(b"k", 3, 100, false, true)).is_some());
        // 2 left; a request for 3 reserves, and its answer comes from a window that may be new.
        let Spend::Reserve(ticket) = tier.spend(b"k", 3, 100, true, true) else {
            panic!("not enough held: reserves");
        };
        ticket.settle(&reservation(5, 8, 60_000, 0), 100, STOP);
        let stats = tier.statistics();
        assert_eq!((stats.lapsed(), stats.held()), (2, 5), "{stats:?}");
    }

    /// Returning takes the unspent permits out first, so they cannot be spent as well.
    #[tokio::test(start_paused = true)]
    async fn returned_permits_are_not_spent() {
        let tier = Arc::new(Reservations::new(HotKeys::new(5)));
        let Spend::Reserve(ticket) = tier.spend(b"k", 1, 100, true, true) else {
            panic!("a cold key reserves");
        };
        ticket.settle(&reservation(5, 6, 1_000, 7), 100, STOP);
        let taken = tier.take_unspent();
        assert_eq!(taken.len(), 1);
        assert_eq!((taken[0].1, taken[0].2), (5, 7));
        assert!(granted(tier.spend(b"k", 1, 100, false, true)).is_none());
        // Taken out, they count as lapsed until the return says otherwise.
        assert_eq!(tier.statistics().lapsed(), 5);
        tier.record_return(5, 3);
        let stats = tier.statistics();
        assert_eq!(
            (
                stats.reserved(),
                stats.returned(),
                stats.lapsed(),
                stats.held()
            ),
            (5, 3, 2, 0)
        );
    }

    /// With every key's reservation live, a new key goes without one.
    #[tokio::test(start_paused = true)]
    async fn a_full_tier_reserves_for_no_new_key() {
        let tier = Arc::new(Reservations::new(HotKeys::new(5).max_keys(1)));
        let Spend::Reserve(ticket) = tier.spend(b"a", 1, 100, true, true) else {
            panic!("a cold key reserves");
        };
        ticket.settle(&reservation(5, 6, 1_000, 7), 100, STOP);
        assert!(matches!(tier.spend(b"b", 1, 100, true, true), Spend::Plain));
        tokio::time::advance(Duration::from_millis(1_000)).await;
        assert!(matches!(
            tier.spend(b"b", 1, 100, true, true),
            Spend::Reserve(_)
        ));
        assert_eq!(tier.statistics().lapsed(), 5);
    }

    /// A map full of live reservations is scanned once per moment one can lapse (at most
    /// every 100 ms), not once per new key: a flood of distinct keys goes without
    /// reservations at O(1) each, and a key comes in once the first reservation lapsed.
    #[tokio::test(start_paused = true)]
    async fn a_full_map_is_scanned_once_until_a_reservation_can_lapse() {
        let tier = Arc::new(Reservations::new(HotKeys::new(10).max_keys(3)));
        for (key, ttl_ms) in [(b"a", 1_000), (b"b", 2_000), (b"c", 3_000)] {
            let Spend::Reserve(pending) = tier.spend(key, 1, 1_000, true, true) else {
                panic!("a cold key reserves");
            };
            pending.settle(&reservation(10, 10, ttl_ms, 7), 1_000, STOP);
        }
        for i in 0..1_000u32 {
            let key = i.to_be_bytes();
            assert!(matches!(
                tier.spend(&key, 1, 1_000, true, true),
                Spend::Plain
            ));
        }
        assert_eq!(
            tier.sweeps.load(Ordering::Relaxed),
            1,
            "one scan for 1,000 keys"
        );
        // Past a's end (less the stop its window keeps): a new key takes its place.
        tokio::time::advance(Duration::from_millis(1_000)).await;
        assert!(matches!(
            tier.spend(b"d", 1, 1_000, true, true),
            Spend::Reserve(_)
        ));
        assert_eq!(tier.sweeps.load(Ordering::Relaxed), 2);
    }
}
