//! A lease that many may hold to read, or one to write, and where it lives on a backend.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::lease::RwOwn;
use super::{Access, RwLease};
use crate::Coordination;
use crate::backend::Backend;
use crate::backend::delivery::Delivery;
use crate::backend::steps::rw_lease::{
    RwAcquireReply, RwAcquireStep, RwDowngradeReply, RwDowngradeStep, RwHeld, RwReleaseStep,
    RwRenewStep, RwStep, RwVerifyStep,
};
use crate::coordination::Held;
use crate::coordination::name;
use crate::coordination::owner::{
    Acquire, Acquisition, HoldingKeys, acquire_waiting, expiry_ms, forget_in_background,
    lease_expiry, new_token, try_acquire,
};
use crate::coordination::{
    Attempt, ByOwner, DEFAULT_POLL_INTERVAL, MAX_MANAGED_LEASE, MIN_MANAGED_LEASE, ManagedOptions,
    OwnerToken,
};
use crate::error::{Error, Result};

/// A read-write lock shared through the backend: any number of readers at once, or one
/// writer alone, each holding an expiring [`RwLease`] of its own.
///
/// [`try_read`](Self::try_read) and [`try_write`](Self::try_write) are immediate: they take
/// the lease now or say how long until the holders in the way run out.
/// [`read`](Self::read) and [`write`](Self::write) wait for it, woken when the set changes
/// (on Redis), in the phase-fair order. See the [module documentation](super) for the
/// guarantee, the order and the failure cases.
///
/// Cheap to clone: clones share the same key and settings.
///
/// # Storage
///
/// One sorted set, `rwlease:{<name length>:<name>}` under the backend's prefix: one member per
/// holder named by its owner token, and one per waiter that waits named by its waiter id,
/// each scored by its deadline on the backend's clock. The key expires 1 ms after its
/// latest deadline and is gone with its last member. Beside it, in its slot, the writers' fencing counter
/// `rwlease:{<name length>:<name>}:fence`, created by the first write lease and kept as a
/// [fenced lock's](crate::coordination::lock::FencedLock#storage) counter is: an hour past
/// the later of the last write lease's end and the clock passing its token. Acquisition, renewal, release and downgrade fail with
/// [`ErrorKind::CorruptState`](crate::ErrorKind::CorruptState), changing nothing, when the
/// set holds another type; a write acquisition does too when the counter is not one.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::rw_lease::ReadWriteLock;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = ReadWriteLock::named(&Coordination::memory(), "catalog");
/// let lease = Duration::from_secs(10);
///
/// let mut first = lock.try_read(lease).await?.acquired().expect("free");
/// let mut second = lock.try_read(lease).await?.acquired().expect("readers share");
/// assert!(!lock.try_write(lease).await?.is_acquired(), "readers hold it");
///
/// first.release().await?;
/// second.release().await?;
/// let writer = lock.write(lease).await?; // free now
/// assert!(!lock.try_read(lease).await?.is_acquired(), "the writer holds it");
/// # drop(writer);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ReadWriteLock {
    keys: Arc<RwKeys>,
    /// How long a waiter's record lasts from when it was written.
    waiting_bound: Duration,
}

/// How long a waiter's record lasts by default (see [`ReadWriteLock::waiting_bound`]).
pub const DEFAULT_WAITING_BOUND: Duration = Duration::from_secs(5);

impl ReadWriteLock {
    /// The lock named `name`, any bytes (a name longer than
    /// [`MAX_NAME_LEN`](crate::coordination::MAX_NAME_LEN) is stored as its digest), whose
    /// waiters' records last [`DEFAULT_WAITING_BOUND`]. Nothing is sent.
    pub fn named(coordination: &Coordination, name: impl AsRef<[u8]>) -> Self {
        // One hash tag for the set and its writers' counter: one slot.
        let key = name::hash_tagged(b"rwlease", name.as_ref());
        let counter = [key.as_slice(), b":fence"].concat();
        ReadWriteLock {
            keys: Arc::new(RwKeys::new(coordination.backend().clone(), key, counter)),
            waiting_bound: DEFAULT_WAITING_BOUND,
        }
    }

    /// How long a waiter that stops asking can still hold the other side back. A reader or a
    /// writer waiting in [`read`](Self::read) or [`write`](Self::write) (or
    /// [`ManagedRwLease::read`](super::ManagedRwLease::read) and
    /// [`write`](super::ManagedRwLease::write)) records that it waits, and the phase-fair
    /// order honours the record (see the [module documentation](super#the-phase-fair-order)):
    /// the record lasts `bound` from when it was written; the waiter asks again at least
    /// every half of `bound` and writes it anew once a quarter of it has passed, so it never
    /// lapses while the waiter waits. A wait that ends without a lease (dropped, timed out,
    /// failed) takes its record out in the background; one whose process crashed, or whose
    /// clean-up does not arrive, holds the others back for `bound` at most. Default:
    /// [`DEFAULT_WAITING_BOUND`].
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a
    /// bound under 100 ms or over an hour.
    pub fn waiting_bound(mut self, bound: Duration) -> Result<Self> {
        if !(MIN_MANAGED_LEASE..=MAX_MANAGED_LEASE).contains(&bound) {
            return Err(Error::invalid_argument(format!(
                "a waiting bound must be between {MIN_MANAGED_LEASE:?} and \
                 {MAX_MANAGED_LEASE:?}, not {bound:?}"
            )));
        }
        self.waiting_bound = bound;
        Ok(self)
    }

    /// The key of the lease set, without the backend's prefix.
    pub fn key(&self) -> &[u8] {
        self.keys.key()
    }

    /// The key of the writers' fencing counter, in the set's slot, without the backend's
    /// prefix: a string of decimal digits, the last token a write lease took. It never
    /// expires; a counter that is gone starts again from the server's clock, above every
    /// token before it (see [`RwLease::fencing_token`]).
    pub fn counter_key(&self) -> &[u8] {
        self.keys.counter_key()
    }

    /// Takes a read lease now if no writer holds the lock or waits for it, in one atomic
    /// step; never waits, and never records itself as waiting. The lease lasts `lease` (whole milliseconds of the backend's clock)
    /// unless renewed or released.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a
    /// lease under 1 ms or over about 34 years (nothing is sent), and with
    /// [`ErrorKind::CorruptState`](crate::ErrorKind::CorruptState) when the key holds
    /// another type (nothing changes).
    ///
    /// # Cancel safety
    ///
    /// A step whose answer is lost on the way (no reply in time, a connection lost
    /// mid-flight) is sent again, with the same owner token and deadline, while the
    /// backend's `transient_retry` lasts: a delivery that finds its own token is a grant, so
    /// this costs latency.
    ///
    /// Cancel safe in effect: if the future is dropped after the step was sent (or its
    /// answer stays unknown), a lease it may have been granted is released
    /// by owner token in the background, once the step's deadline on the server has passed
    /// so that a late delivery cannot take it again.
    pub async fn try_read(&self, lease: Duration) -> Result<Attempt<RwLease>> {
        self.try_acquire(Access::Read, lease, None).await
    }

    /// Takes the write lease now if nobody holds the lock and no reader or writer waits
    /// ahead of it, in one atomic step; never waits, and never records itself as waiting. As [`try_read`](Self::try_read) otherwise.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect, as [`try_read`](Self::try_read) is.
    pub async fn try_write(&self, lease: Duration) -> Result<Attempt<RwLease>> {
        self.try_acquire(Access::Write, lease, None).await
    }

    /// Waits for a read lease, in the phase-fair order: tries, and after a busy answer
    /// records that it waits and sleeps until the set changes (RESP3 invalidations on Redis)
    /// or the holders in the way run out, then tries again (every 50 ms, with jitter, where
    /// there are no invalidations). An error ends the wait. Bound it with
    /// `tokio::time::timeout`.
    ///
    /// Readers that wait on one lock wake together when it changes: each tries again, and
    /// the atomic step decides.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops waiting; a lease an attempt in flight may have
    /// been granted is released by owner token in the background, and the waiter's record
    /// is taken out (see [`waiting_bound`](Self::waiting_bound)).
    pub async fn read(&self, lease: Duration) -> Result<RwLease> {
        self.wait(Access::Read, lease, DEFAULT_POLL_INTERVAL).await
    }

    /// Waits for the write lease, as [`read`](Self::read) waits for a read lease: while it
    /// waits, readers that come after it wait for its turn.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops waiting; a lease an attempt in flight may have
    /// been granted is released by owner token in the background, and the waiter's record
    /// is taken out (see [`waiting_bound`](Self::waiting_bound)).
    pub async fn write(&self, lease: Duration) -> Result<RwLease> {
        self.wait(Access::Write, lease, DEFAULT_POLL_INTERVAL).await
    }

    /// [`read`](Self::read) or [`write`](Self::write) with the lease and poll interval of
    /// `options`.
    pub(crate) async fn acquire_with(
        &self,
        access: Access,
        options: &ManagedOptions,
    ) -> Result<RwLease> {
        options.validate()?;
        self.wait(access, options.lease_duration(), options.poll())
            .await
    }

    async fn wait(&self, access: Access, lease: Duration, poll: Duration) -> Result<RwLease> {
        expiry_ms("a lease", lease)?;
        // One waiter id for the whole wait: each try renews the same record, and a wait that
        // ends without a lease takes it out. It starts with when the wait began on the
        // backend's clock, in digits of one width, so that waiting writers go in the order
        // of their ids, however often their records are written anew.
        let began = self.keys.backend().server_now_ms().await?;
        let waiter = Forget::new(&self.keys, format!("{began:015}.{}", new_token()?));
        let bound = self.waiting_bound;
        let keys = [self.key()];
        let lease = acquire_waiting(self.keys.backend(), &keys, poll, || async {
            let attempt = self
                .try_acquire(access, lease, Some((waiter.id(), bound)))
                .await?;
            // Back before the record runs out, whatever else wakes the waiter.
            Ok(match attempt {
                Attempt::Busy { retry_after } => Attempt::Busy {
                    retry_after: Some(retry_after.map_or(bound / 2, |after| after.min(bound / 2))),
                },
                attempt => attempt,
            })
        })
        .await?;
        // The grant took the record out.
        waiter.disarm();
        Ok(lease)
    }

    async fn try_acquire(
        &self,
        access: Access,
        lease: Duration,
        waiting: Option<(&str, Duration)>,
    ) -> Result<Attempt<RwLease>> {
        let lease_ms = expiry_ms("a lease", lease)?;
        let waiting = match waiting {
            Some((waiter, bound)) => Some((waiter, expiry_ms("a waiting bound", bound)?)),
            None => None,
        };
        let ask = RwAsk {
            write: access == Access::Write,
            lease_ms,
            waiting: waiting.map(|(waiter, bound_ms)| (waiter.to_owned(), bound_ms)),
        };
        try_acquire(&self.keys, ask, |holding, fencing_token| {
            Held::new(holding, RwOwn::new(access, fencing_token))
        })
        .await
    }

    /// The read or write lease held under `owner`, from any process: renewed, verified and
    /// released with the checks an [`RwLease`]'s own steps make (see [`ByOwner`]), for a
    /// lease whose handle was [detached](RwLease::detach). Nothing is sent until a step is
    /// asked.
    pub fn by_owner(&self, owner: OwnerToken) -> ByOwner {
        ByOwner::new(Arc::clone(&self.keys), owner)
    }
}

impl fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadWriteLock")
            .field("key", &String::from_utf8_lossy(self.keys.key()))
            .field("waiting_bound", &self.waiting_bound)
            .finish_non_exhaustive()
    }
}

/// The user keys of a read-write lease set and of its writers' fencing counter, in one slot
/// (the backend applies its prefix), on their backend.
pub struct RwKeys {
    backend: Backend,
    key: Vec<u8>,
    counter: Vec<u8>,
}

impl RwKeys {
    pub(super) fn new(backend: Backend, key: Vec<u8>, counter: Vec<u8>) -> Self {
        RwKeys {
            backend,
            key,
            counter,
        }
    }

    pub(super) fn counter_key(&self) -> &[u8] {
        &self.counter
    }

    pub(super) fn key(&self) -> &[u8] {
        &self.key
    }

    /// Turns `token`'s write lease into a read lease.
    pub(super) async fn downgrade(&self, token: &str) -> Result<RwDowngradeReply> {
        self.backend.run(RwDowngradeStep(self.step(token))).await
    }

    fn step<'a>(&'a self, token: &'a str) -> RwStep<'a> {
        RwStep {
            key: &self.key,
            token,
        }
    }
}

/// What an acquisition asks of the set.
pub struct RwAsk {
    /// A write lease, or a read lease.
    write: bool,
    /// The lease, in whole milliseconds.
    lease_ms: u64,
    /// The waiter id and how long its record lasts (ms), for an acquisition that waits:
    /// recorded when it is refused.
    waiting: Option<(String, u64)>,
}

/// The acquisition: a read or a write lease for the token, if the set lets it in; a write
/// lease with its fencing token.
impl Acquire for RwKeys {
    type Ask = RwAsk;
    /// A write lease's fencing token.
    type Granted = Option<u64>;

    fn expiry_ms(ask: &RwAsk) -> Option<u64> {
        Some(ask.lease_ms)
    }

    async fn acquire(
        &self,
        token: &str,
        ask: &RwAsk,
        not_after_ms: u64,
    ) -> Result<Acquisition<Option<u64>>> {
        let reply = self
            .backend
            .run(RwAcquireStep {
                key: &self.key,
                counter: &self.counter,
                write: ask.write,
                token,
                lease_ms: ask.lease_ms,
                not_after_ms,
                waiting: ask
                    .waiting
                    .as_ref()
                    .map(|(waiter, bound_ms)| (waiter.as_str(), *bound_ms)),
            })
            .await?;
        Ok(match reply {
            RwAcquireReply::Granted { fencing_token } => Acquisition::Granted(fencing_token),
            RwAcquireReply::Busy { retry_after_ms } => Acquisition::Busy {
                retry_after_ms: Some(retry_after_ms),
            },
            RwAcquireReply::Late => Acquisition::Late,
        })
    }
}

/// What the shared holding does with a read or a write lease: every step finds the holder's
/// own entry by its token, whichever kind it is, so that a downgrade changes nothing for
/// the holding (nor for its keeper).
impl HoldingKeys for RwKeys {
    /// Whether a lease was removed.
    type Released = bool;
    const PRIMITIVE: crate::coordination::ownership::Primitive =
        crate::coordination::ownership::Primitive::ReadWriteLease;
    const LEFT_HELD: &'static str =
        "it keeps writers out (and readers, for a write lease) until it expires";

    fn backend(&self) -> &Backend {
        &self.backend
    }

    async fn renew(&self, token: &str, expiry_ms: Option<u64>) -> Result<bool> {
        let lease_ms = lease_expiry::<Self>(expiry_ms)?;
        self.backend
            .run(RwRenewStep {
                lease: self.step(token),
                lease_ms,
            })
            .await
    }

    async fn verify(&self, token: &str) -> Result<bool> {
        let held = self
            .backend
            .run_idempotent(RwVerifyStep(self.step(token)))
            .await?;
        Ok(held != RwHeld::Nothing)
    }

    async fn release(&self, token: &str) -> Result<bool> {
        self.backend.run(RwReleaseStep(self.step(token))).await
    }
}

/// The key, as text (lossy), for logs and messages.
impl fmt::Display for RwKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.key))
    }
}

/// A waiter's id, whose records are taken out in the background (see
/// [`forget_in_background`]) unless the wait ends with a lease, whose grant took them out.
struct Forget {
    keys: Arc<RwKeys>,
    id: String,
    armed: bool,
}

impl Forget {
    fn new(keys: &Arc<RwKeys>, id: String) -> Self {
        Forget {
            keys: Arc::clone(keys),
            id,
            armed: true,
        }
    }

    fn id(&self) -> &str {
        &self.id
    }

    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Forget {
    fn drop(&mut self) {
        if self.armed {
            forget_in_background(Arc::clone(&self.keys), std::mem::take(&mut self.id));
        }
    }
}
