//! A counting semaphore on one set.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::SemaphorePermit;
use super::permit::{acquire_permit, acquire_permit_with, try_acquire_permit};
use super::sets::PermitSets;
use crate::Coordination;
use crate::coordination::Attempt;
use crate::coordination::{ByOwner, DEFAULT_POLL_INTERVAL, ManagedOptions, OwnerToken, name};
use crate::error::{Error, Result};

/// A counting semaphore shared through the backend: at most `capacity` permits held at once,
/// by any number of processes.
///
/// Acquisition is immediate: [`try_acquire`](Self::try_acquire) never waits or queues, and
/// promises no fairness; a caller that finds it full decides whether and when to retry (its
/// [`retry_after`](Attempt::retry_after) says when expiries free a slot). Each permit has its
/// own owner token; see [`SemaphorePermit`](super::SemaphorePermit) for releasing, renewing
/// and what failures do.
///
/// Every user of a name must give the same capacity. While any permit is held, an
/// acquisition with another capacity fails with
/// [`ErrorKind::CapacityMismatch`](crate::ErrorKind::CapacityMismatch); once every permit is
/// released or expired, a new capacity is accepted. A lower capacity never revokes permits
/// already held.
///
/// Cheap to clone: clones share the same semaphore.
///
/// # Storage
///
/// One Redis key, `<prefix>sem:<name length>:<name>`: a sorted set of the permits (member `p:<token>`,
/// score = expiry in server milliseconds; `+inf` only for a permit taken without expiry by
/// an earlier version) and of the capacity (member `c`, score = -capacity). It expires 1 ms
/// after its latest permit and is deleted with its last permit. Expired permits are pruned by the next step
/// on the key, so abandoned capacity comes back without a cleanup worker. The name is binary
/// safe; give it a hash tag (`{...}`) to choose its cluster slot. Use a name no other
/// primitive uses.
///
/// # Servers
///
/// The scripts read the server clock (`TIME`) before writing, which needs effects
/// replication of scripts: Redis 7+ and Valkey 7.2+ always use it, and on Redis 6.2 every
/// script asks for it first (`redis.replicate_commands()`). Expiries are absolute
/// server timestamps: after a failover to a replica whose clock differs, permits expire
/// early or late, and an asynchronous failover can lose recent grants and releases.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::Release;
/// use leasehold::coordination::semaphore::Semaphore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let coordination = Coordination::memory();
/// let semaphore = Semaphore::new(&coordination, "{batch:42}:workers", 2)?;
///
/// let a = semaphore.try_acquire(Duration::from_secs(30)).await?;
/// let b = semaphore.try_acquire(Duration::from_secs(30)).await?;
/// assert!(a.is_acquired() && b.is_acquired());
/// assert!(!semaphore.try_acquire(Duration::from_secs(30)).await?.is_acquired());
/// assert_eq!(semaphore.held().await?, 2);
///
/// let mut a = a.acquired().expect("acquired");
/// assert_eq!(a.release().await?, Release::Released);
/// assert_eq!(semaphore.held().await?, 1);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    sets: Arc<PermitSets>,
    capacity: u32,
}

impl Semaphore {
    /// A semaphore of `capacity` permits named `name`, stored at
    /// `<prefix>sem:<name length>:<name>`; a
    /// name longer than [`MAX_NAME_LEN`](crate::coordination::MAX_NAME_LEN) bytes is stored
    /// as its digest.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) when
    /// `capacity` is 0. Nothing is sent.
    pub fn new(coordination: &Coordination, name: impl AsRef<[u8]>, capacity: u32) -> Result<Self> {
        if capacity == 0 {
            return Err(Error::invalid_argument(
                "a semaphore needs a capacity of at least 1",
            ));
        }
        // Length-prefixed, as a keyed semaphore's name is within its hash tag: no name makes
        // this key another semaphore's (`sem:{...}` starts with a brace, this with a digit).
        let key = name::length_prefixed(b"sem", name.as_ref());
        Ok(Semaphore {
            sets: Arc::new(PermitSets::new(
                coordination.backend().clone(),
                vec![key],
                vec![capacity],
            )),
            capacity,
        })
    }

    /// The number of permits.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Takes a permit now if one is free, in one atomic step; never waits or queues.
    ///
    /// `expiry` is how long the permit lasts unless renewed, in whole milliseconds of the
    /// backend's clock (sub-millisecond parts are dropped). Every permit expires, so a
    /// process that crashes holding one, or whose background release fails, frees its slot
    /// at that expiry at the latest; for work of unknown length, keep it renewed with a
    /// [`ManagedPermit`](super::ManagedPermit).
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for an
    /// expiry under 1 ms or over about 34 years (nothing is sent),
    /// [`ErrorKind::CapacityMismatch`](crate::ErrorKind::CapacityMismatch) when the held
    /// permits were taken under another capacity, and
    /// [`ErrorKind::CorruptState`](crate::ErrorKind::CorruptState) when the key holds
    /// something else (nothing is changed).
    ///
    /// # Cancel safety
    ///
    /// A request whose answer is lost on the way (no reply in time, a connection lost
    /// mid-flight) is sent again, with the same owner token and deadline, while the
    /// backend's `transient_retry` lasts: a delivery that finds its own token is a grant, so
    /// a failover or a cut connection costs latency.
    ///
    /// Cancel safe in effect: if the future is dropped after the request was sent, or the
    /// outcome stays unknown ([`is_outcome_uncertain`](crate::Error::is_outcome_uncertain),
    /// or a server error reply, which may follow writes), a background release of the permit's
    /// token is spawned before the error is returned, so a permit granted without an answer
    /// does not stay taken; its expiry is the fallback if that release fails too. On Redis the
    /// request carries a deadline on the server's clock and the release waits until it has
    /// passed, so a request delayed past its release is a no-op when it arrives.
    pub async fn try_acquire(&self, expiry: Duration) -> Result<Attempt<SemaphorePermit>> {
        try_acquire_permit(&self.sets, expiry).await
    }

    /// Takes a permit, waiting as long as it takes; see [`try_acquire`](Self::try_acquire)
    /// for `expiry` and the errors.
    ///
    /// On Redis the waiter does not poll: before each attempt it registers for the next
    /// invalidation of the semaphore's set, so a release or an expiry during the attempt
    /// leaves a wake-up; after a full answer it sleeps until one of them changes, or until
    /// expiries alone would free a slot, and tries the atomic step again. Elsewhere (the
    /// memory backend, a server that refuses tracking) attempts are 50 ms apart with
    /// jitter. Waiters are not served in order: the first attempt after a slot frees wins.
    /// Bound the wait with `tokio::time::timeout`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops waiting; an attempt in flight then is not
    /// replayed, and a permit it may have been granted is released by owner token in the
    /// background (see [`try_acquire`](Self::try_acquire)).
    pub async fn acquire(&self, expiry: Duration) -> Result<SemaphorePermit> {
        acquire_permit(&self.sets, expiry, DEFAULT_POLL_INTERVAL).await
    }

    /// [`acquire`](Self::acquire) with the lease (as the expiry) and the poll interval of
    /// `options`, validated first: what the [`Permit`](crate::extract::Permit) extractor
    /// waits with.
    pub(crate) async fn acquire_with(&self, options: &ManagedOptions) -> Result<SemaphorePermit> {
        acquire_permit_with(&self.sets, options).await
    }

    /// The permit held under `owner`, from any process: renewed, verified and released with
    /// the checks a [`SemaphorePermit`]'s own steps make (see [`ByOwner`]), for a permit
    /// whose handle was [detached](crate::coordination::Held::detach). Nothing is sent until a step
    /// is asked.
    pub fn by_owner(&self, owner: OwnerToken) -> ByOwner {
        ByOwner::new(Arc::clone(&self.sets), owner)
    }

    /// The permits held now (expired ones are not counted), whatever capacity they were
    /// taken under; useful for tests and metrics. Changes nothing.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn held(&self) -> Result<u32> {
        let counts = self.sets.held().await?;
        Ok(counts.first().copied().unwrap_or_default())
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("key", &format_args!("{}", self.sets))
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}
