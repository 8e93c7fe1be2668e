//! A lock whose every acquisition carries a fencing token, and where it lives on a backend.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{Durability, FencedLease};
use crate::Coordination;
use crate::backend::redis::Replication;
use crate::backend::steps::fenced_lock::{
    FencedAcquireReply, FencedAcquireStep, LeaseReleaseReply, LeaseReleaseStep, LeaseRenewStep,
    LeaseStep, LeaseVerifyStep,
};
use crate::backend::{Backend, ensure_same_slot};
use crate::coordination::name;
use crate::coordination::owner::{
    Acquire, Acquisition, HoldingKeys, acquire_waiting, expiry_ms, lease_expiry, release_bounded,
    try_acquire,
};
use crate::coordination::ownership::Primitive;
use crate::coordination::{Attempt, Held};
use crate::coordination::{ByOwner, DEFAULT_POLL_INTERVAL, ManagedOptions, OwnerToken};
use crate::error::{Error, ErrorKind, Result};

/// A mutual-exclusion lock shared through the backend, held under an expiring lease, whose
/// every acquisition also takes the next value of a counter: the **fencing token**.
///
/// A lease alone cannot stop a holder that was paused (a long GC, a stalled VM, a slow
/// network) past its lease and woke up believing it still holds the lock. The fencing token
/// can, with the protected resource's help: send it with every write, and have the resource
/// refuse a token lower than the highest it has accepted (equal ones are the same holder).
/// See the [module documentation](super) for the pattern.
///
/// [`try_acquire`](Self::try_acquire) is immediate: it never waits, queues or polls, and
/// promises no fairness; a caller that finds the lock held decides whether and when to retry
/// (its [`retry_after`](Attempt::retry_after) says when the lease runs out).
/// [`acquire`](Self::acquire) waits for the lock, woken when its lease key changes. See [`FencedLease`] for renewing, releasing and what failures do.
///
/// Cheap to clone: clones share the same keys.
///
/// # Storage
///
/// Two Redis keys, which must be in one cluster slot, both under the backend's prefix:
///
/// - the **lease key**: a string holding the holder's owner token, with a `PX` expiry of
///   the lease; deleted on release, gone when the lease runs out;
/// - the **counter key**: a string of decimal digits, the last fencing token granted. It
///   expires an hour after the later of its lease's end and the moment the server's clock
///   passes its value (a token counts microseconds since the epoch): until then it answers
///   an acquisition delivered twice, and after that the clock alone hands out greater
///   tokens (below). So a name used once leaves no key behind for long, whatever names
///   clients choose. A renewal does not touch it.
///
/// [`named`](Self::named) builds both from one name: `lock:{<name length>:<name>}:lease` and
/// `lock:{<name length>:<name>}:fence`, whose common hash tag puts them in one slot. Every
/// contender for one resource must use the same two keys, and nothing else may use them.
///
/// Acquisition validates the counter before it writes: a negative, non-numeric,
/// wrongly typed or exhausted (`i64::MAX`) counter, or a lease key that is not a string,
/// fails with [`ErrorKind::CorruptState`](crate::ErrorKind::CorruptState) and creates
/// nothing.
///
/// # Tokens never go back
///
/// Each token is the larger of the counter plus one and the server's clock in microseconds
/// since the epoch, taken in the same step. So a counter that was lost (Redis restarted
/// without persistence, a failover that lost the last writes before it, `FLUSHALL`, an
/// eviction, a restored backup) starts again above every token handed out before it, and a
/// store holding the last token goes on accepting the next holder's writes. Tokens are exact
/// integers, about 1.8 × 10<sup>15</sup> in 2026: below 2<sup>53</sup> (a JavaScript or JSON
/// number holds them exactly) until the year 2255, and carried exactly by the counter beyond.
///
/// One assumption is left: the clock of the server that hands out a token is not behind the
/// clock of the one that handed out the token before it by more than the time between the
/// two. A restart or a failover takes seconds, and servers kept by NTP agree within
/// milliseconds; a server whose clock was set back by hand, or a restored backup read by a
/// server whose clock is behind the backup's, can break it. A counter that merely expired
/// asks less: its clock passed the last token an hour before, so only a clock set back by
/// more than an hour since could hand out a token that went back.
///
/// What a lost counter does not change: a lease lost with the server's memory frees the lock
/// while its holder may still be working, which is what the fencing token is for; the
/// resource refuses that holder's writes once the next holder has written. The memory
/// backend's counter is kept until its lease ends and its clock, which never goes back, has
/// passed the token (each counter takes one of its bounded keys meanwhile).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::lock::FencedLock;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let coordination = Coordination::memory();
/// // Two keys of one's own, in one slot:
/// let lock = FencedLock::new(&coordination, "{invoice:42}:lease", "{invoice:42}:fence")?;
/// assert_eq!(lock.counter_key(), b"{invoice:42}:fence");
///
/// let mut first = lock.try_acquire(Duration::from_secs(30)).await?.acquired().expect("free");
/// assert!(!lock.try_acquire(Duration::from_secs(30)).await?.is_acquired());
/// first.release().await?;
///
/// let second = lock.try_acquire(Duration::from_secs(30)).await?.acquired().expect("free");
/// assert!(second.fencing_token() > first.fencing_token());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FencedLock {
    keys: Arc<LockKeys>,
}

impl FencedLock {
    /// A lock over a lease key and a counter key of one's own choosing (see
    /// [Storage](#storage)), as given: the backend applies its prefix.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) when the
    /// two keys are the same, and [`ErrorKind::CrossSlot`](crate::ErrorKind::CrossSlot) when
    /// they (with the prefix) fall in different cluster slots, whatever the backend's
    /// topology; give them a common hash tag (`{...}`). Nothing is sent.
    pub fn new(
        coordination: &Coordination,
        lease_key: impl AsRef<[u8]>,
        counter_key: impl AsRef<[u8]>,
    ) -> Result<Self> {
        let (lease, counter) = (lease_key.as_ref(), counter_key.as_ref());
        if lease == counter {
            return Err(Error::invalid_argument(format!(
                "a fenced lock needs two different keys, not {:?} twice",
                String::from_utf8_lossy(lease)
            )));
        }
        let backend = coordination.backend();
        ensure_same_slot(&[backend.physical_key(lease), backend.physical_key(counter)])?;
        Ok(FencedLock {
            keys: Arc::new(LockKeys::new(
                backend.clone(),
                lease.to_vec(),
                counter.to_vec(),
            )),
        })
    }

    /// A lock over the pair `lock:{<name length>:<name>}:lease` and
    /// `lock:{<name length>:<name>}:fence`, which share a hash tag and so a cluster slot,
    /// whatever bytes the name holds. A name longer than
    /// [`MAX_NAME_LEN`](crate::coordination::MAX_NAME_LEN) bytes (one taken from a request,
    /// say) is stored as its digest, `sha256:<hex>`, so that its keys stay short whatever it
    /// holds. Nothing is sent.
    ///
    /// A key prefix that itself starts an empty hash tag (`{}`) would split the pair; the
    /// first acquisition then fails with
    /// [`ErrorKind::CrossSlot`](crate::ErrorKind::CrossSlot) before anything is sent.
    pub fn named(coordination: &Coordination, name: impl AsRef<[u8]>) -> Self {
        let tagged = name::hash_tagged(b"lock", name.as_ref());
        let lease = [tagged.as_slice(), b":lease"].concat();
        let counter = [tagged.as_slice(), b":fence"].concat();
        FencedLock {
            keys: Arc::new(LockKeys::new(
                coordination.backend().clone(),
                lease,
                counter,
            )),
        }
    }

    /// Durable fencing: this lock (and its clones) hands out a lease and its token only once
    /// `durability`'s replicas hold the acquisition; when they do not confirm in time, the
    /// lease is released and the acquisition fails with
    /// [`ErrorKind::Transient`](crate::ErrorKind::Transient), saying how many did. The lock's
    /// steps then go on a connection of its own (a `WAIT` holds its connection until the
    /// replicas answer, and must follow the script on the script's connection); without
    /// this option nothing more is sent.
    ///
    /// Sends `WAIT 0 0` (or `WAITAOF 1 0 0`) now: fails here, once, with the server's
    /// refusal (a managed service or an ACL that forbids it,
    /// [`ErrorKind::Permission`](crate::ErrorKind::Permission) or
    /// [`ErrorKind::Server`](crate::ErrorKind::Server); `WAITAOF` before 7.2 or with the
    /// AOF off), rather than at every acquisition, and with
    /// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) on the memory backend,
    /// which has no replicas.
    ///
    /// # What remains
    ///
    /// A confirmed token survives a failover that promotes one of the replicas that
    /// confirmed: with as many replicas asked as there are, any promoted replica holds it.
    /// The window that remains: a replica that did not confirm may still be promoted
    /// (Sentinel prefers the most up to date, but does not know of `WAIT`), and a renewal
    /// or a release is not confirmed (a failover may bring back an earlier expiry, or a
    /// released lease, which then runs out). The tokens themselves never go back whatever
    /// the failover (see [tokens never go back](Self#tokens-never-go-back)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the connection being made; nothing is
    /// written.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use leasehold::Coordination;
    /// use leasehold::backend::redis::RedisBackend;
    /// use leasehold::coordination::lock::{Durability, FencedLock};
    ///
    /// # async fn example() -> leasehold::Result<()> {
    /// let coordination: Coordination = RedisBackend::sentinel(["redis://127.0.0.1:26379"], "main")
    ///     .key_prefix("myapp:")
    ///     .connect()
    ///     .await?
    ///     .into();
    /// let lock = FencedLock::named(&coordination, "ledger")
    ///     .durable(Durability::replicas(1)?)
    ///     .await?;
    /// let lease = lock.acquire(Duration::from_secs(10)).await?; // on a replica too
    /// # drop(lease);
    /// # Ok(()) }
    /// ```
    pub async fn durable(self, durability: Durability) -> Result<FencedLock> {
        let Some(redis) = self.backend().as_redis() else {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "durable fencing waits for replicas, and the memory backend has none",
            ));
        };
        let own = redis.with_own_connection(durability.timeout());
        let replication = own
            .replication(
                durability.replica_count(),
                durability.timeout(),
                durability.is_written_to_aof(),
            )
            .await?;
        let keys = &self.keys;
        Ok(FencedLock {
            keys: Arc::new(
                LockKeys::new(own.into(), keys.lease.clone(), keys.counter.clone())
                    .replicated(replication),
            ),
        })
    }

    pub(super) fn backend(&self) -> &Backend {
        self.keys.backend()
    }

    /// The lease key, without the backend's prefix.
    pub fn lease_key(&self) -> &[u8] {
        self.keys.lease_key()
    }

    /// The counter key, without the backend's prefix.
    pub fn counter_key(&self) -> &[u8] {
        self.keys.counter_key()
    }

    /// Takes the lock now if no lease holds it, in one atomic step; never waits, queues or
    /// polls. The new lease lasts `lease` (whole milliseconds of the backend's clock;
    /// sub-millisecond parts are dropped) unless renewed or released.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a
    /// lease under 1 ms or over about 34 years (nothing is sent), and
    /// [`ErrorKind::CorruptState`](crate::ErrorKind::CorruptState) when a key holds
    /// something else (see [Storage](#storage); nothing is changed).
    ///
    /// A grant whose answer arrives after `lease` has already run out by the local clock
    /// (measured from before the request was sent) is not handed out: its lease is released
    /// by owner token in the background, and the answer is
    /// [`Attempt::Busy`] with no `retry_after`. The counter has then moved on, as it
    /// does for any grant whose answer is lost: fencing tokens can skip values.
    ///
    /// # Cancel safety
    ///
    /// A request whose answer is lost on the way (no reply in time, a connection lost
    /// mid-flight) is sent again, with the same owner token and deadline, while the
    /// backend's `transient_retry` lasts: a delivery that finds its own token is a grant (the
    /// same fencing token), so a failover or a cut connection costs latency. The estimate
    /// counts from the first delivery's send.
    ///
    /// Cancel safe in effect: if the future is dropped after the request was sent, or the
    /// outcome stays unknown ([`is_outcome_uncertain`](crate::Error::is_outcome_uncertain),
    /// a server error reply, or a reply of an unexpected shape), the request is sent no
    /// more: a background release of the lease's owner token is spawned (before the error is
    /// returned), so a lease granted without an answer does not block the lock; its expiry
    /// is the fallback if that release fails too. On Redis the request carries a deadline on
    /// the server's clock, and the release waits until it has passed: a request delayed in
    /// the network past its release is then a no-op, and cannot take the lock after it. A
    /// request that arrives after its deadline while the caller still waits fails with
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout), certainly without effect.
    pub async fn try_acquire(&self, lease: Duration) -> Result<Attempt<FencedLease>> {
        let lease_ms = expiry_ms("a lease", lease)?;
        try_acquire(&self.keys, lease_ms, Held::new).await
    }

    /// Takes the lock, waiting as long as it takes; see [`try_acquire`](Self::try_acquire)
    /// for `lease` and the errors. Bound the wait with `tokio::time::timeout`.
    ///
    /// On Redis the waiter does not poll. Before each attempt it registers for the lease
    /// key's next invalidation (RESP3 client tracking, see
    /// [`RedisBackend::watch_key`](crate::backend::redis::RedisBackend::watch_key)), so a
    /// release or expiry during the attempt leaves a wake-up; after a refused attempt it
    /// sleeps until that invalidation, or until the holder's lease would expire (one wake
    /// at its time left, so expiry never depends on a notification), and tries the atomic
    /// step again. A lost tracking connection wakes every waiter to try again.
    /// Notifications are only hints: the atomic step alone grants the lock. Where tracking
    /// is not available (the memory backend, or a server that refuses it), attempts are
    /// 50 ms apart with jitter, or as often as
    /// [`ManagedOptions::poll_interval`](crate::coordination::ManagedOptions::poll_interval)
    /// says through [`ManagedLease::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops waiting; an attempt in flight then is not
    /// replayed, and a lease it may have been granted is released by owner token in the
    /// background (see [`try_acquire`](Self::try_acquire)).
    ///
    /// [`ManagedLease::acquire`]: super::ManagedLease::acquire
    pub async fn acquire(&self, lease: Duration) -> Result<FencedLease> {
        self.wait(lease, DEFAULT_POLL_INTERVAL).await
    }

    /// [`acquire`](Self::acquire) with the lease and poll interval of `options`.
    pub(crate) async fn acquire_with(&self, options: &ManagedOptions) -> Result<FencedLease> {
        options.validate()?;
        self.wait(options.lease_duration(), options.poll()).await
    }

    async fn wait(&self, lease: Duration, poll: Duration) -> Result<FencedLease> {
        let keys = [self.lease_key()];
        acquire_waiting(self.backend(), &keys, poll, || self.try_acquire(lease)).await
    }

    /// The lease held under `owner`, from any process: renewed, verified and released with
    /// the checks a [`FencedLease`]'s own steps make (see [`ByOwner`]), for a lease whose
    /// handle was [detached](FencedLease::detach). Nothing is sent until a step is asked.
    pub fn by_owner(&self, owner: OwnerToken) -> ByOwner {
        ByOwner::new(Arc::clone(&self.keys), owner)
    }
}

impl fmt::Debug for FencedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedLock")
            .field("lease_key", &String::from_utf8_lossy(self.keys.lease_key()))
            .field(
                "counter_key",
                &String::from_utf8_lossy(self.keys.counter_key()),
            )
            .finish_non_exhaustive()
    }
}

/// The user keys of a lock (the backend applies its prefix) on their backend. Acquisition
/// runs over both keys; every step on a held lease touches the lease key alone.
pub struct LockKeys {
    backend: Backend,
    lease: Vec<u8>,
    counter: Vec<u8>,
    /// What confirms an acquisition, with durable fencing.
    replication: Option<Replication>,
}

impl LockKeys {
    pub(crate) fn new(backend: Backend, lease: Vec<u8>, counter: Vec<u8>) -> Self {
        LockKeys {
            backend,
            lease,
            counter,
            replication: None,
        }
    }

    /// Every acquisition confirmed by `replication` (durable fencing).
    fn replicated(mut self, replication: Replication) -> Self {
        self.replication = Some(replication);
        self
    }

    pub(crate) fn lease_key(&self) -> &[u8] {
        &self.lease
    }

    pub(crate) fn counter_key(&self) -> &[u8] {
        &self.counter
    }

    fn step<'a>(&'a self, token: &'a str) -> LeaseStep<'a> {
        LeaseStep {
            lease_key: &self.lease,
            token,
        }
    }
}

/// What the shared holding does with a lease: every step on it touches the lease key alone.
impl HoldingKeys for LockKeys {
    type Released = LeaseReleaseReply;
    const PRIMITIVE: Primitive = Primitive::FencedLease;
    const LEFT_HELD: &'static str = "it blocks the lock until it expires";

    fn backend(&self) -> &Backend {
        &self.backend
    }

    async fn renew(&self, token: &str, expiry_ms: Option<u64>) -> Result<bool> {
        let lease_ms = lease_expiry::<Self>(expiry_ms)?;
        self.backend
            .run(LeaseRenewStep {
                lease: self.step(token),
                lease_ms,
            })
            .await
    }

    async fn verify(&self, token: &str) -> Result<bool> {
        self.backend
            .run_idempotent(LeaseVerifyStep(self.step(token)))
            .await
    }

    async fn release(&self, token: &str) -> Result<LeaseReleaseReply> {
        self.backend.run(LeaseReleaseStep(self.step(token))).await
    }
}

/// The acquisition: the lease for the token and the next fencing token, if no lease exists.
impl Acquire for LockKeys {
    /// The lease, in whole milliseconds.
    type Ask = u64;
    /// The fencing token.
    type Granted = u64;

    fn expiry_ms(lease_ms: &u64) -> Option<u64> {
        Some(*lease_ms)
    }

    async fn acquire(
        &self,
        token: &str,
        lease_ms: &u64,
        not_after_ms: u64,
    ) -> Result<Acquisition<u64>> {
        let reply = self
            .backend
            .run(FencedAcquireStep {
                lease_key: &self.lease,
                counter_key: &self.counter,
                token,
                lease_ms: *lease_ms,
                not_after_ms,
                replication: self.replication.as_ref(),
            })
            .await?;
        Ok(match reply {
            FencedAcquireReply::Acquired { fencing_token } => Acquisition::Granted(fencing_token),
            FencedAcquireReply::Held { retry_after_ms } => Acquisition::Busy { retry_after_ms },
            FencedAcquireReply::Late => Acquisition::Late,
            FencedAcquireReply::Unconfirmed { short, .. } => {
                return Err(self.unconfirmed(token, &short).await);
            }
        })
    }
}

impl LockKeys {
    /// Fails closed an acquisition its replicas did not confirm: its lease released, within
    /// the bound of one release, and an error that says so. A release that fails leaves the
    /// error uncertain, so that the acquisition's own clean-up releases it in the background
    /// (or a resend, within the backend's retry bound, finds the lease its own and asks the
    /// replicas again).
    async fn unconfirmed(&self, token: &str, short: &str) -> Error {
        let what = self
            .replication
            .as_ref()
            .map_or_else(String::new, Replication::describe);
        let message = format!("the replicas did not confirm the acquisition ({what}: {short})");
        let released = release_bounded(self, token).await;
        // The lock's name may be a client's (a lease named from a request): at `DEBUG`.
        tracing::warn!(token = crate::coordination::owner::shown_token(token), %message, released = released.is_ok(), "a durable acquisition was not confirmed; its lease is released");
        tracing::debug!(keys = %self, token, "the keys of the unconfirmed acquisition");
        match released {
            Ok(_) => Error::new(
                ErrorKind::Transient,
                format!("{message}; its lease was released"),
            ),
            Err(err) => Error::new(
                ErrorKind::Transient,
                format!("{message}; releasing its lease failed: {err}"),
            )
            .uncertain(true),
        }
    }
}

/// The lease key, as text (lossy), for logs and messages: what a holder contends for.
impl fmt::Display for LockKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.lease))
    }
}
