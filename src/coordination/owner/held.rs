//! The one public handle of a held thing (a lock's lease, a permit, a read-write lease, a
//! field's lease, a session): the lifecycle every primitive shares, written once over the
//! kit's [`Holding`], with each primitive's own part beside it.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use super::managed::ReleaseReply;
use super::{Detached, Holding, HoldingKeys, expiry_ms};
use crate::coordination::Release;
use crate::error::Result;

/// A primitive whose holdings a [`Held`] and a [`Managed`](super::Managed) keep: what its
/// holdings are and what its handles add to the shared lifecycle (a fencing token, an
/// access, a field).
///
/// Sealed: the crate's held primitives implement it ([`FencedLock`](crate::coordination::lock::FencedLock),
/// [`RedlockGroup`](crate::coordination::redlock::RedlockGroup),
/// [`Semaphore`](crate::coordination::semaphore::Semaphore),
/// [`ReadWriteLock`](crate::coordination::rw_lease::ReadWriteLock),
/// [`LeaseHash`](crate::coordination::hash_lease::LeaseHash) and
/// [`Sessions`](crate::coordination::session::Sessions)); a type outside the crate cannot.
// `HoldingKeys` and `ReleaseReply` are the crate's own, and so is `Sealed`.
#[allow(private_bounds)]
pub trait HeldKind: sealed::Sealed + Sized + Send + Sync + 'static {
    /// Where the holdings live and the owner-checked steps on them.
    #[doc(hidden)]
    type Keys: HoldingKeys<Released: ReleaseReply>;
    /// What a handle keeps of its own beside the holding: a `u64` is its fencing token.
    #[doc(hidden)]
    type Own: OwnPart;
    /// The handle's name in `Debug`.
    #[doc(hidden)]
    const HANDLE: &'static str;
    /// The managed handle's name in `Debug`.
    #[doc(hidden)]
    const MANAGED: &'static str;
    /// What [`Own`](Self::Own) is called in `Debug`; empty: nothing to show.
    #[doc(hidden)]
    const OWN: &'static str = "";

    /// Settles, before the handle lets go of its holding, what the primitive's own steps
    /// left unsettled (a downgrade sent without an answer): `false` when it cannot, and the
    /// holding is then dropped as the handle is.
    #[doc(hidden)]
    fn settle(_held: &mut Held<Self>) -> impl Future<Output = bool> + Send {
        std::future::ready(true)
    }

    /// [`settle`](Self::settle), for a managed handle.
    #[doc(hidden)]
    fn settle_kept(_kept: &mut super::Managed<Self>) -> impl Future<Output = bool> + Send {
        std::future::ready(true)
    }
}

/// What a handle keeps of its own beside its holding (nothing, a fencing token, an access),
/// and the fencing token a detached holding carries on.
pub(crate) trait OwnPart: fmt::Debug + Send + Sync + 'static {
    fn fencing_token(&self) -> Option<u64>;
}

impl OwnPart for () {
    fn fencing_token(&self) -> Option<u64> {
        None
    }
}

/// A fencing token, and nothing else: a lock's lease, a Redlock lease.
impl OwnPart for u64 {
    fn fencing_token(&self) -> Option<u64> {
        Some(*self)
    }
}

/// The seal of [`HeldKind`]: a type outside the crate cannot implement it, so that the trait
/// may grow.
pub(crate) mod sealed {
    pub trait Sealed {}
}

/// A holding of the primitive `P` (see [`HeldKind`]): a lock's lease
/// ([`FencedLease`](crate::coordination::lock::FencedLease)), a Redlock group's
/// ([`RedlockLease`](crate::coordination::redlock::RedlockLease)), a semaphore's permit
/// ([`SemaphorePermit`](crate::coordination::semaphore::SemaphorePermit)), a read-write
/// lease ([`RwLease`](crate::coordination::rw_lease::RwLease)), a field's lease
/// ([`FieldLease`](crate::coordination::hash_lease::FieldLease)) or a session
/// ([`Session`](crate::coordination::session::Session)). The lifecycle is the same for all,
/// and written here once; what is each primitive's own (a fencing token, an access, a
/// field, the keys attached to a session) is in its own module.
///
/// It is held under a random owner token that only this handle knows. Renew it with
/// [`renew`](Self::renew) before it runs out, check it with
/// [`verify_still_held`](Self::verify_still_held), and release it with
/// [`release`](Self::release) or by dropping it (see [Dropping](#dropping)). Every one of
/// these compares the owner token on the backend, so a stale handle can never renew or
/// remove a later holder's holding. [`Managed`](super::Managed) keeps one renewed in the
/// background, with a signal for its loss.
///
/// # Failures
///
/// The handle **fails closed**: whenever it cannot be sure the holding is still its own, it
/// says it is not, and only [`release`](Self::release) can settle the question. The states
/// and what each step does in each are in the
/// [holding table](crate::coordination::ownership#the-holding-table).
///
/// - [`remaining_estimate`](Self::remaining_estimate) is measured from before the request
///   that set the expiry was sent, so it ends no later than the holding on the backend.
///   Once it is zero, [`renew`](Self::renew) and [`verify_still_held`](Self::verify_still_held)
///   answer `false` without contacting the backend: stop protected work then.
/// - A [`renew`](Self::renew) refused before anything was sent (an invalid lease, a refused
///   connection) leaves the handle as it was: retry it while the estimate lasts.
/// - A renewal whose outcome is unknown (a timeout, a connection lost after sending, a
///   server error, or the future dropped mid-flight) leaves the handle **held**, with the
///   estimate both outcomes guarantee: the earlier of the old expiry and the one the renewal
///   asked for, counted from before it was sent. A renewal only ever extends a holding it
///   still finds under its owner token, so a late one cannot revive a released or
///   taken-over holding; retrying [`renew`](Self::renew) while the estimate lasts is safe,
///   which is how a [`Managed`](super::Managed) handle rides out a stall.
/// - A renewal that finds the holding gone or another holder's marks the handle lost
///   ([`is_released`](Self::is_released) is then true).
/// - A failed [`release`](Self::release) is retried once, bounded by about a second. If
///   neither attempt answers, a release that may have run leaves the handle **uncertain**:
///   [`renew`](Self::renew) and [`verify_still_held`](Self::verify_still_held) answer `false`
///   without sending, the estimate is zero, and only `release` (or dropping the handle)
///   settles it.
/// - A failed or cancelled [`verify_still_held`](Self::verify_still_held) leaves the handle
///   as it was.
///
/// # Dropping
///
/// Dropping a handle that is held or uncertain never blocks: it spawns a task on the current
/// tokio runtime that releases it by owner token, retrying with capped, jittered backoff
/// (50 ms doubling to 2 s) for up to a minute. A release given up then, or that finds no
/// runtime, is counted by
/// [`abandoned_releases`](crate::coordination::ownership::abandoned_releases) and logged as a
/// warning; the holding then stays until it expires.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::Release;
/// use leasehold::coordination::lock::FencedLock;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = FencedLock::named(&Coordination::memory(), "invoice:42");
/// let Some(mut lease) = lock.try_acquire(Duration::from_secs(30)).await?.acquired() else {
///     return Ok(()); // someone else holds it
/// };
/// assert_eq!(lease.owner_token().len(), 32);
/// assert_eq!(lease.lease(), Duration::from_secs(30));
/// assert!(lease.remaining_estimate() <= Duration::from_secs(30));
///
/// // Long work: check in, and extend the lease.
/// assert!(lease.verify_still_held().await?);
/// assert!(lease.renew(Duration::from_secs(60)).await?);
///
/// assert_eq!(lease.release().await?, Release::Released);
/// assert!(lease.is_released());
/// assert_eq!(lease.remaining_estimate(), Duration::ZERO);
/// # Ok(()) }
/// ```
pub struct Held<P: HeldKind> {
    pub(crate) holding: Holding<P::Keys>,
    pub(crate) own: P::Own,
}

impl<P: HeldKind> Held<P> {
    pub(crate) fn new(holding: Holding<P::Keys>, own: P::Own) -> Self {
        Held { holding, own }
    }

    /// The owner token: 32 lower-case hex digits (128 random bits), unique to this holding.
    pub fn owner_token(&self) -> &str {
        self.holding.token()
    }

    /// The lease asked for at acquisition or at the last successful renewal, in whole
    /// milliseconds.
    pub fn lease(&self) -> Duration {
        self.holding.expiry().unwrap_or_default()
    }

    /// A conservative local estimate of the time the holding has left: measured from
    /// **before** the request that set its expiry was sent, since the backend counted from a
    /// later moment, and after a renewal without an answer, the earlier of the expiry before
    /// it and the one it asked for. Zero once released, lost, uncertain, or past the lease.
    ///
    /// An estimate only: the backend's clock decides, and it says nothing of a holding taken
    /// away by hand; [`verify_still_held`](Self::verify_still_held) asks the backend.
    pub fn remaining_estimate(&self) -> Duration {
        self.holding.remaining_estimate().unwrap_or_default()
    }

    /// Whether this handle no longer holds it: released by it, or found gone or another
    /// holder's. False for an uncertain handle (see [Failures](#failures)), which still
    /// needs a release.
    pub fn is_released(&self) -> bool {
        self.holding.is_released()
    }

    /// Gives the holding a new expiry of `lease`, counted from now on the backend's clock,
    /// if it is still held under this handle's owner token. What the primitive adds (a
    /// fencing token, an access, a session's attached keys) is kept.
    ///
    /// `Ok(true)`: renewed, and the estimate starts again from this request. `Ok(false)`:
    /// it is gone or another holder's (the handle is then lost), or nothing was sent because
    /// the handle is released, lost or uncertain, or its
    /// [`remaining_estimate`](Self::remaining_estimate) has run out. A renewal sent within
    /// the estimate may still answer `true` after it ran out: the new expiry counts from the
    /// renewal. A Redlock lease is renewed on every node of its group and counts as renewed
    /// when a quorum renewed it; otherwise it is lost, and its token removed from the nodes
    /// that did renew it.
    ///
    /// A lease under a millisecond or over about 34 years (for a Redlock lease, also one not
    /// longer than three of its node timeouts) fails with
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) before anything is
    /// sent. A failure that certainly changed nothing (a refused connection) leaves the
    /// handle as it was; one that may have applied leaves it held with the estimate both
    /// outcomes guarantee (see [Failures](#failures)).
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe in effect (see
    /// [the contract](crate::coordination::ownership#cancel-safety)): dropping the future after
    /// the renewal was sent leaves the handle as an unanswered renewal does, held with the
    /// narrower estimate.
    pub async fn renew(&mut self, lease: Duration) -> Result<bool> {
        let keys = std::sync::Arc::clone(self.holding.keys());
        keys.check_expiry(lease)?;
        let lease_ms = expiry_ms("a lease", lease)?;
        let was_held = !self.holding.is_released();
        let renewed = self.holding.renew(Some(lease_ms)).await?;
        if was_held && self.holding.is_released() {
            // Lost by this renewal: what is left of it (a quorum lease's token on the
            // nodes that renewed it) is let go of.
            keys.after_lost_renewal(self.holding.token());
        }
        Ok(renewed)
    }

    /// Whether it is still held under this handle's owner token, asked of the backend: a
    /// point-in-time answer, which cannot promise anything of a later write (a fencing
    /// token does that).
    ///
    /// `Ok(false)` without contacting the backend when the handle is released, lost or
    /// uncertain, or its [`remaining_estimate`](Self::remaining_estimate) has run out; and
    /// `Ok(false)` when the estimate ran out while the question was in flight, whatever the
    /// answer. A failure leaves the handle as it was.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: the step only reads, and the handle is unchanged.
    pub async fn verify_still_held(&self) -> Result<bool> {
        self.holding.verify().await
    }

    /// Releases it if it is still held under this handle's owner token; never another
    /// holder's.
    ///
    /// [`Release::Released`] when it was held and is now removed;
    /// [`Release::AlreadyReleased`] when nothing of this handle's existed (it expired), or
    /// when this handle had already released it (then nothing is sent);
    /// [`Release::NotOwned`] when another holder's lease stands where this one was (only the
    /// exclusive leases can tell). A lost or uncertain handle sends the release too, which
    /// settles it. A session's release removes the keys attached to it with it.
    ///
    /// On an unavailable backend, one more release is tried, bounded by about a second, and
    /// its answer is returned if it gets one. A refusal is not tried again: it leaves the
    /// handle as it was, or uncertain if it may have applied. A release that may have run
    /// without an answer leaves the handle uncertain (see [Failures](#failures)): call
    /// `release` again, or drop the handle to release it in the background.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe in effect: if the future is dropped after the request was
    /// sent, the release goes on in a background task (retried as on drop) and the handle
    /// counts as released.
    pub async fn release(&mut self) -> Result<Release> {
        let found = self.holding.release().await?;
        Ok(ReleaseReply::into_release(found))
    }

    /// Lets go of the holding without releasing it, for another owner to go on with by its
    /// owner token (see [`Detached`], and each primitive's `by_owner`): it stays held until
    /// it expires or is released by that token, and a fencing token stays the handle's.
    /// `None` when this handle no longer holds it (released, lost, uncertain, or past its
    /// estimate); it is then dropped as the handle is (released in the background unless
    /// already).
    ///
    /// Returns at once, unless the acquisition was sent twice (its first delivery lost on
    /// the way): it then first waits until that delivery can no longer land (the
    /// acquisition's deadline: its timeouts and retry bound), since landing after the
    /// holding was released by its token it would take it again, for nobody. A read-write
    /// lease whose downgrade was sent without an answer sends it again first, so that what
    /// is handed on is known to read (`None` when that fails or finds it gone).
    ///
    /// # Cancel safety
    ///
    /// Dropped before it returns, the holding is released in the background, as when the
    /// handle is dropped.
    pub async fn detach(mut self) -> Option<Detached> {
        if !P::settle(&mut self).await {
            return None;
        }
        let fencing_token = self.own.fencing_token();
        self.holding
            .detach()
            .await
            .map(|detached| detached.with_fencing_token(fencing_token))
    }
}

/// What a lock's lease and a Redlock lease add to the lifecycle: their fencing token.
impl<P: HeldKind<Own = u64>> Held<P> {
    /// The fencing token: greater than every token granted before it under the same name
    /// (for a lock even when its counter was lost, see
    /// [Tokens never go back](crate::coordination::lock::FencedLock#tokens-never-go-back);
    /// for a [Redlock group](crate::coordination::redlock) as long as a quorum of its nodes
    /// keeps its counter); at least the server's clock in microseconds since the epoch at the
    /// acquisition, and at most `i64::MAX`. A renewal keeps it, and so does a
    /// [detached](Held::detach) lease. Tokens skip values.
    ///
    /// Send it with every write to the protected resource, and have the resource refuse a
    /// token lower than the highest it has accepted.
    pub fn fencing_token(&self) -> u64 {
        self.own
    }
}

impl<P: HeldKind> fmt::Debug for Held<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct(P::HANDLE);
        debug.field("keys", &format_args!("{}", self.holding.keys()));
        if !P::OWN.is_empty() {
            debug.field(P::OWN, &self.own);
        }
        debug
            // A credential: shown as far as a log needs to tell holdings apart.
            .field(
                "owner_token",
                &format_args!("{}…", super::shown_token(self.holding.token())),
            )
            .field("lease", &self.lease())
            .field("state", &self.holding.state())
            .finish()
    }
}
