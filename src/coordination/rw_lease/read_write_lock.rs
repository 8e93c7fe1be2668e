//! A lease that many may hold to read, or one to write, and where it lives on a backend.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{Access, RwAttempt, RwLease};
use crate::Coordination;
use crate::backend::Backend;
use crate::backend::steps::rw_lease::{
    RwAcquireReply, RwAcquireStep, RwDowngradeReply, RwDowngradeStep, RwHeld, RwReleaseStep,
    RwRenewStep, RwStep, RwVerifyStep,
};
use crate::coordination::name;
use crate::coordination::owner::{
    Acquire, Acquisition, HoldingKeys, acquire_waiting, expiry_ms, lease_expiry, new_token,
    try_acquire,
};
use crate::coordination::{
    DEFAULT_POLL_INTERVAL, MAX_MANAGED_LEASE, MIN_MANAGED_LEASE, ManagedOptions,
};
use crate::error::{Error, Result};

/// A read-write lock shared through the backend: any number of readers at once, or one
/// writer alone, each holding an expiring [`RwLease`] of its own.
///
/// [`try_read`](Self::try_read) and [`try_write`](Self::try_write) are immediate: they take
/// the lease now or say how long until the holders in the way run out.
/// [`read`](Self::read) and [`write`](Self::write) wait for it, woken when the set changes
/// (on Redis). See the [module documentation](super) for the guarantee, the failure cases and
/// writer preference.
///
/// Cheap to clone: clones share the same key and settings.
///
/// # Storage
///
/// One sorted set, `rwlease:{<name length>:<name>}` under the backend's prefix: one member per
/// holder (and per waiting writer) named by its owner token, scored by its deadline on the
/// backend's clock. The key expires 1 ms after its latest deadline and is gone with its last
/// holder. Beside it, in its slot, the writers' fencing counter
/// `rwlease:{<name length>:<name>}:fence`, created by the first write lease, which never
/// expires. Acquisition, renewal, release and downgrade fail with
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
/// let mut first = lock.try_read(lease).await?.into_lease().expect("free");
/// let mut second = lock.try_read(lease).await?.into_lease().expect("readers share");
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
    /// How long a waiting writer's record keeps new readers out; `None`: no preference.
    writer_preference: Option<Duration>,
}

impl ReadWriteLock {
    /// The lock named `name`, any bytes (a name longer than
    /// [`MAX_NAME_LEN`](crate::coordination::MAX_NAME_LEN) is stored as its digest), without
    /// writer preference. Nothing is sent.
    pub fn named(coordination: &Coordination, name: impl AsRef<[u8]>) -> Self {
        // One hash tag for the set and its writers' counter: one slot.
        let key = name::hash_tagged(b"rwlease", name.as_ref());
        let counter = [key.as_slice(), b":fence"].concat();
        ReadWriteLock {
            keys: Arc::new(RwKeys::new(coordination.backend().clone(), key, counter)),
            writer_preference: None,
        }
    }

    /// Writer preference: a writer waiting in [`write`](Self::write) (or
    /// [`ManagedRwLease::write`](super::ManagedRwLease::write)) records that it waits, and
    /// while the record lasts no new reader is let in, so that a steady stream of readers
    /// cannot starve it. The record lasts `bound` from when it was written; the waiting
    /// writer asks again at least every half of `bound` and writes it anew once a quarter
    /// of it has passed, so it never lapses while the writer waits, and a writer that
    /// crashes or stops waiting keeps readers out for `bound` at most.
    /// [`try_write`](Self::try_write) records nothing: it does not wait.
    ///
    /// Every handle that reads honours a waiting writer's record, whatever its own setting;
    /// the setting says whether this handle's writers leave one. Fails with
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a bound under
    /// 100 ms or over an hour.
    pub fn writer_preference(mut self, bound: Duration) -> Result<Self> {
        if !(MIN_MANAGED_LEASE..=MAX_MANAGED_LEASE).contains(&bound) {
            return Err(Error::invalid_argument(format!(
                "a writer preference bound must be between {MIN_MANAGED_LEASE:?} and \
                 {MAX_MANAGED_LEASE:?}, not {bound:?}"
            )));
        }
        self.writer_preference = Some(bound);
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
    /// step; never waits. The lease lasts `lease` (whole milliseconds of the backend's clock)
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
    pub async fn try_read(&self, lease: Duration) -> Result<RwAttempt> {
        self.try_acquire(Access::Read, lease, None).await
    }

    /// Takes the write lease now if nobody holds the lock, in one atomic step; never waits
    /// and never records itself as waiting. As [`try_read`](Self::try_read) otherwise.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect, as [`try_read`](Self::try_read) is.
    pub async fn try_write(&self, lease: Duration) -> Result<RwAttempt> {
        self.try_acquire(Access::Write, lease, None).await
    }

    /// Waits for a read lease: tries, and after a busy answer sleeps until the set changes
    /// (RESP3 invalidations on Redis) or the holders in the way run out, then tries again
    /// (every 50 ms, with jitter, where there are no invalidations). An error ends the wait.
    /// Bound it with `tokio::time::timeout`.
    ///
    /// Readers that wait on one lock wake together when it changes: each tries again, and
    /// the atomic step decides.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops waiting; a lease an attempt in flight may have
    /// been granted is released by owner token in the background.
    pub async fn read(&self, lease: Duration) -> Result<RwLease> {
        self.wait(Access::Read, lease, DEFAULT_POLL_INTERVAL).await
    }

    /// Waits for the write lease, as [`read`](Self::read) waits for a read lease; with
    /// [writer preference](Self::writer_preference), it keeps new readers out meanwhile.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops waiting; a lease an attempt in flight may have
    /// been granted is released by owner token in the background. A waiting writer's record
    /// is left to expire within the preference's bound.
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
        // One waiter id for the whole wait: each try renews the same record.
        let waiting = match (access, self.writer_preference) {
            (Access::Write, Some(bound)) => Some((new_token()?, bound)),
            _ => None,
        };
        let keys = [self.key()];
        acquire_waiting(self.keys.backend(), &keys, poll, || async {
            let waiting = waiting
                .as_ref()
                .map(|(waiter, bound)| (waiter.as_str(), *bound));
            let attempt = self.try_acquire(access, lease, waiting).await?;
            // Back before the record runs out, whatever else wakes the waiter.
            Ok(match (attempt, waiting) {
                (crate::coordination::Attempt::Busy { retry_after }, Some((_, bound))) => {
                    crate::coordination::Attempt::Busy {
                        retry_after: Some(
                            retry_after.map_or(bound / 2, |after| after.min(bound / 2)),
                        ),
                    }
                }
                (attempt, _) => attempt,
            })
        })
        .await
    }

    async fn try_acquire(
        &self,
        access: Access,
        lease: Duration,
        waiting: Option<(&str, Duration)>,
    ) -> Result<RwAttempt> {
        let lease_ms = expiry_ms("a lease", lease)?;
        let waiting = match waiting {
            Some((waiter, bound)) => Some((waiter, expiry_ms("a writer preference bound", bound)?)),
            None => None,
        };
        let ask = RwAsk {
            write: access == Access::Write,
            lease_ms,
            waiting: waiting.map(|(waiter, bound_ms)| (waiter.to_owned(), bound_ms)),
        };
        try_acquire(&self.keys, ask, |holding, fencing_token| {
            RwLease::new(holding, access, fencing_token)
        })
        .await
    }
}

impl fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadWriteLock")
            .field("key", &String::from_utf8_lossy(self.keys.key()))
            .field("writer_preference", &self.writer_preference)
            .finish_non_exhaustive()
    }
}

/// The user keys of a read-write lease set and of its writers' fencing counter, in one slot
/// (the backend applies its prefix), on their backend.
pub(super) struct RwKeys {
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
pub(super) struct RwAsk {
    /// A write lease, or a read lease.
    write: bool,
    /// The lease, in whole milliseconds.
    lease_ms: u64,
    /// A writer's waiter id and how long its record lasts (ms), when readers must let it in
    /// first (writer preference); recorded when it is refused.
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
