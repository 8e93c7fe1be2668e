//! A semaphore per client key, under an optional global one, acquired together.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::permit::{acquire_permit, acquire_permit_with, try_acquire_permit};
use super::sets::PermitSets;
use super::{Capacity, SemaphorePermit};
use crate::Coordination;
use crate::backend::Backend;
use crate::coordination::Attempt;
use crate::coordination::{ByOwner, DEFAULT_POLL_INTERVAL, ManagedOptions, OwnerToken, name};
use crate::error::{Error, Result};

/// Per-client-key and/or global capacity, acquired in one atomic step on one slot: a permit
/// is taken in the client key's semaphore and in the global one, or in neither. A client
/// whose own semaphore is full takes nothing from the global one.
///
/// Everything [`Semaphore`](super::Semaphore) says of permits, capacities, expiries and
/// failures holds for each of the two sets; a permit's steps (release, renew, verify) act
/// on both at once.
///
/// Cheap to clone: clones share the same semaphores.
///
/// # Storage
///
/// Up to two Redis keys per client key, both in the slot of the hash tag
/// `{<name length>:<name>}`:
///
/// - `<prefix>sem:{<name length>:<name>}:key:<client key>` with a per-key capacity;
/// - `<prefix>sem:{<name length>:<name>}:global` with a global capacity, shared by every
///   client key.
///
/// A name or a client key longer than [`MAX_NAME_LEN`](crate::coordination::MAX_NAME_LEN)
/// bytes is stored as its digest, `sha256:<hex>` (a client key that already is a digest, as
/// a layer's header key is, is stored as it is).
///
/// Each is a sorted set laid out, and expiring, as a [`Semaphore`](super::Semaphore)'s key
/// is: it goes with its last permit, so idle client keys leave nothing behind. All of one
/// name's keys live in one cluster slot (that is what lets one step take both), so one
/// name's load is not spread over a cluster.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::semaphore::{Capacity, KeyedSemaphore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// // At most 1 report per client, and 2 in all.
/// let capacity = Capacity::per_key(1).and_global(2);
/// let reports = KeyedSemaphore::new(&Coordination::memory(), "reports", capacity)?;
/// let expiry = Duration::from_secs(60);
///
/// let alice = reports.try_acquire(b"alice", expiry).await?;
/// assert!(alice.is_acquired());
/// assert!(!reports.try_acquire(b"alice", expiry).await?.is_acquired()); // alice is full
/// let bob = reports.try_acquire(b"bob", expiry).await?;
/// assert!(bob.is_acquired());
/// assert!(!reports.try_acquire(b"carol", expiry).await?.is_acquired()); // all are taken
///
/// assert_eq!(reports.held(b"alice").await?, (Some(1), Some(2)));
/// drop(bob); // released in the background
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct KeyedSemaphore {
    backend: Backend,
    /// `sem:{<name length>:<name>}`, which every key starts with.
    tagged: Arc<[u8]>,
    per_key: Option<u32>,
    global: Option<u32>,
}

impl KeyedSemaphore {
    /// The backend its permits live on.
    pub(crate) fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Semaphores named `name`, with `capacity` permits for each client key, in all, or
    /// both (a side it leaves out is unlimited).
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) when
    /// either capacity is 0. Nothing is sent.
    pub fn new(
        coordination: &Coordination,
        name: impl AsRef<[u8]>,
        capacity: Capacity,
    ) -> Result<Self> {
        let (per_key, global) = (capacity.of_each_key(), capacity.in_all());
        if per_key == Some(0) || global == Some(0) {
            return Err(Error::invalid_argument(
                "a keyed semaphore's capacities must be at least 1",
            ));
        }
        Ok(KeyedSemaphore {
            backend: coordination.backend().clone(),
            tagged: name::hash_tagged(b"sem", name.as_ref()).into(),
            per_key,
            global,
        })
    }

    /// The permits of each client key; `None` when unlimited.
    pub fn per_key(&self) -> Option<u32> {
        self.per_key
    }

    /// The permits of all client keys together; `None` when unlimited.
    pub fn global(&self) -> Option<u32> {
        self.global
    }

    /// Takes a permit for the client key `key` now, in its own semaphore and in the global
    /// one at once, or in neither; never waits or queues. When either is full,
    /// [`Attempt::Busy`] says how long until expiries free a slot in every full one.
    ///
    /// `expiry` and the errors are as for
    /// [`Semaphore::try_acquire`](super::Semaphore::try_acquire); a capacity mismatch names
    /// the key whose held permits use another capacity.
    ///
    /// # Cancel safety
    ///
    /// As for [`Semaphore::try_acquire`](super::Semaphore::try_acquire): a permit whose
    /// answer was lost or whose future was dropped mid-flight is released in the background.
    pub async fn try_acquire(
        &self,
        key: &[u8],
        expiry: Duration,
    ) -> Result<Attempt<SemaphorePermit>> {
        try_acquire_permit(&Arc::new(self.sets(key)), expiry).await
    }

    /// Takes a permit for `key`, waiting as long as it takes; see
    /// [`try_acquire`](Self::try_acquire) for `key`, `expiry` and the errors.
    ///
    /// On Redis the waiter does not poll: before each attempt it registers for the next
    /// invalidation of the semaphore's sets (the key's and the global one), so a release or an expiry during the attempt
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
    pub async fn acquire(&self, key: &[u8], expiry: Duration) -> Result<SemaphorePermit> {
        acquire_permit(&Arc::new(self.sets(key)), expiry, DEFAULT_POLL_INTERVAL).await
    }

    /// [`acquire`](Self::acquire) with the lease (as the expiry) and the poll interval of
    /// `options`, validated first: what the [`Permit`](crate::extract::Permit) extractor
    /// waits with.
    pub(crate) async fn acquire_with(
        &self,
        key: &[u8],
        options: &ManagedOptions,
    ) -> Result<SemaphorePermit> {
        acquire_permit_with(&Arc::new(self.sets(key)), options).await
    }

    /// The permit of the client key `key` held under `owner`, from any process: renewed,
    /// verified and released in both its sets with the checks a [`SemaphorePermit`]'s own
    /// steps make (see [`ByOwner`]), for a permit whose handle was
    /// [detached](crate::coordination::Held::detach). Nothing is sent until a step is asked.
    pub fn by_owner(&self, key: &[u8], owner: OwnerToken) -> ByOwner {
        ByOwner::new(Arc::new(self.sets(key)), owner)
    }

    /// The permits held now by the client key `key` and by all keys together (expired ones
    /// are not counted); `None` for a side without a limit. Changes nothing.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn held(&self, key: &[u8]) -> Result<(Option<u32>, Option<u32>)> {
        let sets = self.sets(key);
        let mut counts = sets.held().await?.into_iter();
        let per_key = self.per_key.and_then(|_| counts.next());
        let global = self.global.and_then(|_| counts.next());
        Ok((per_key, global))
    }

    /// The sets a permit of `key` lives in, per-key first, with their capacities.
    fn sets(&self, key: &[u8]) -> PermitSets {
        let mut keys = Vec::with_capacity(2);
        let mut capacities = Vec::with_capacity(2);
        if let Some(capacity) = self.per_key {
            let key = name::shortened(key);
            let mut per_key = Vec::with_capacity(self.tagged.len() + 5 + key.len());
            per_key.extend_from_slice(&self.tagged);
            per_key.extend_from_slice(b":key:");
            per_key.extend_from_slice(&key);
            keys.push(per_key);
            capacities.push(capacity);
        }
        if let Some(capacity) = self.global {
            let mut global = self.tagged.to_vec();
            global.extend_from_slice(b":global");
            keys.push(global);
            capacities.push(capacity);
        }
        PermitSets::new(self.backend.clone(), keys, capacities)
    }
}

impl fmt::Debug for KeyedSemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedSemaphore")
            .field("name", &String::from_utf8_lossy(&self.tagged))
            .field("per_key", &self.per_key)
            .field("global", &self.global)
            .finish_non_exhaustive()
    }
}
