//! The one public managed handle of a held thing, written once: the owner token, the keeper
//! that renews the holding and tells its loss, the release asked of the keeper, and each
//! primitive's own part beside them.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use super::{Detached, Held, HeldKind, HoldingKeys, Keeper, OwnPart};
use crate::backend::steps::lease_release::LeaseReleaseReply;
use crate::coordination::ownership::OwnershipLost;
use crate::coordination::{Attempt, ManagedOptions, Release};
use crate::error::Result;

/// What a primitive's release step answers, as the one [`Release`] every primitive gives.
pub(crate) trait ReleaseReply {
    /// The answer; `None` when nothing was sent (the holding was released already).
    fn into_release(found: Option<Self>) -> Release
    where
        Self: Sized;
}

/// An exclusive lease's release: released, none, or another holder's.
impl ReleaseReply for LeaseReleaseReply {
    fn into_release(found: Option<Self>) -> Release {
        Release::from_reply(found)
    }
}

/// A release that says whether it found its holder's entry.
impl ReleaseReply for bool {
    fn into_release(found: Option<Self>) -> Release {
        Release::from_found(found)
    }
}

/// A [`Held`] handle kept by a background task: renewed at half its lease until it is
/// released, dropped (by default), lost, or past its lifetime limit, as its
/// [`ManagedOptions`] say. Ownership loss (a renewal that finds the holding gone or another
/// holder's, or renewals failing until the local estimate ran out) fires [`OwnershipLost`],
/// before the holding is released: stop the protected work then. A stall shorter than the
/// estimate costs nothing.
///
/// Like [`Held`], it is the same for every held primitive
/// ([`ManagedLease`](crate::coordination::lock::ManagedLease),
/// [`ManagedRedlockLease`](crate::coordination::redlock::ManagedRedlockLease),
/// [`ManagedPermit`](crate::coordination::semaphore::ManagedPermit),
/// [`ManagedRwLease`](crate::coordination::rw_lease::ManagedRwLease),
/// [`ManagedFieldLease`](crate::coordination::hash_lease::ManagedFieldLease),
/// [`ManagedSession`](crate::coordination::session::ManagedSession)); what is each
/// primitive's own, and how to acquire one, is in its own module.
///
/// Release on drop is best-effort: it never blocks and never removes another owner's
/// holding (releases check the owner token).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::{ManagedOptions, Release};
/// use leasehold::coordination::lock::{FencedLock, ManagedLease};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = FencedLock::named(&Coordination::memory(), "nightly-report");
/// let options = ManagedOptions::new().lease(Duration::from_secs(10));
/// let lease = ManagedLease::acquire(&lock, &options).await?;
/// let mut lost = lease.ownership();
/// let token = lease.fencing_token();
///
/// let work = async { /* writes carrying `token` */ };
/// tokio::select! {
///     () = work => {}
///     reason = lost.lost() => println!("stopped: {reason}"),
/// }
/// assert_eq!(lease.release().await?, Release::Released);
/// # let _ = token;
/// # Ok(()) }
/// ```
pub struct Managed<P: HeldKind> {
    pub(crate) owner_token: String,
    pub(crate) keys: Arc<P::Keys>,
    keeper: Keeper<P::Keys>,
    pub(crate) own: P::Own,
}

impl<P: HeldKind> Managed<P> {
    /// Takes over `held` and keeps it as `options` say. A Redlock lease is renewed on every
    /// node of its group, and a renewal that misses its quorum ends it (the signal fires,
    /// then its token is removed from every node).
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for
    /// invalid options (for a Redlock lease, also a lease not longer than three of its node
    /// timeouts), or without a tokio runtime to run the keeper (then `held` is dropped,
    /// which releases it).
    pub fn keep(held: Held<P>, options: &ManagedOptions) -> Result<Managed<P>> {
        options.validate()?;
        let Held { holding, own } = held;
        holding.keys().check_expiry(options.lease_duration())?;
        Ok(Managed {
            owner_token: holding.token().to_owned(),
            keys: Arc::clone(holding.keys()),
            keeper: Keeper::spawn(holding, options.keep())?,
            own,
        })
    }

    /// What a managed form's `try_acquire` answers: what `attempt` acquired, kept as
    /// `options` say; `None` when it was busy.
    pub(crate) fn kept(
        attempt: Attempt<Held<P>>,
        options: &ManagedOptions,
    ) -> Result<Option<Self>> {
        attempt
            .acquired()
            .map(|held| Managed::keep(held, options))
            .transpose()
    }

    /// The owner token of the holding.
    pub fn owner_token(&self) -> &str {
        &self.owner_token
    }

    /// The signal that fires when ownership is lost (or the holding released or detached).
    pub fn ownership(&self) -> OwnershipLost {
        self.keeper.ownership()
    }

    /// Whether ownership is lost.
    pub fn is_lost(&self) -> bool {
        self.keeper.ownership().is_lost()
    }

    /// Stops renewing, fires [`OwnershipLost`] with
    /// [`LossReason::Detached`](crate::coordination::ownership::LossReason::Detached), and
    /// lets go of the holding without releasing it, as [`Held::detach`] does: `None` when
    /// it was no longer held (lost, or released at its lifetime limit), then told as a loss.
    ///
    /// # Cancel safety
    ///
    /// Nothing is asked until the future is first polled (dropped unpolled, the keeper goes
    /// on as its options say); then a renewal in flight is answered first, and dropped
    /// before it returns, the holding is released in the background.
    pub async fn detach(mut self) -> Option<Detached> {
        if !P::settle_kept(&mut self).await {
            // Not known to be what it was: dropped, as the handle would be.
            return None;
        }
        let fencing_token = self.own.fencing_token();
        self.keeper
            .detach()
            .await
            .map(|detached| detached.with_fencing_token(fencing_token))
    }

    /// Stops renewing, fires [`OwnershipLost`] with
    /// [`LossReason::Released`](crate::coordination::ownership::LossReason::Released), then
    /// releases the holding (owner-checked): [`Release::Released`] when it was still held,
    /// [`Release::AlreadyReleased`] when it no longer was (lost, or released at its lifetime
    /// limit), [`Release::NotOwned`] when another holder's lease stands in its place. A
    /// failure is [`Held::release`]'s (one more attempt on an unavailable backend, bounded
    /// by about a second); a release that may have run without an answer goes on in the
    /// background.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe in effect: the release is asked of the keeper when this is
    /// called, and goes on there if the future is dropped, polled or not.
    pub fn release(self) -> impl Future<Output = Result<Release>> + Send + use<P> {
        let released = self.keeper.release();
        async move {
            // The keeper ended before: the holding was lost, or released at its lifetime
            // limit.
            match released.await {
                Some(released) => released.map(ReleaseReply::into_release),
                None => Ok(Release::AlreadyReleased),
            }
        }
    }
}

/// A primitive with one kind of holding, taken by waiting or at once: a
/// [`FencedLock`](crate::coordination::lock::FencedLock)'s lease, a
/// [`Semaphore`](crate::coordination::semaphore::Semaphore)'s permit. What gives
/// [`Managed::acquire`] and [`Managed::try_acquire`]; sealed.
pub trait Acquirable: HeldKind {
    /// Waits for a holding, as the primitive's `acquire` does, with the options' lease and
    /// poll interval.
    #[doc(hidden)]
    fn acquire_held(
        &self,
        options: &ManagedOptions,
    ) -> impl Future<Output = Result<Held<Self>>> + Send;
    /// Takes a holding now if one is free, as the primitive's `try_acquire` does.
    #[doc(hidden)]
    fn try_acquire_held(
        &self,
        lease: std::time::Duration,
    ) -> impl Future<Output = Result<Attempt<Held<Self>>>> + Send;
}

/// Taking and keeping at once, for a primitive with one kind of holding.
impl<P: Acquirable> Managed<P> {
    /// Waits for `primitive` as its `acquire` does (see
    /// [`FencedLock::acquire`](crate::coordination::lock::FencedLock::acquire),
    /// [`Semaphore::acquire`](crate::coordination::semaphore::Semaphore::acquire)), with the
    /// options' lease and [poll interval](ManagedOptions::poll_interval), then keeps what it
    /// took as `options` say.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe, as the primitive's `acquire` is: dropped while it waits,
    /// it takes nothing, and a grant that lands after is released.
    pub async fn acquire(primitive: &P, options: &ManagedOptions) -> Result<Managed<P>> {
        let held = primitive.acquire_held(options).await?;
        Managed::keep(held, options)
    }

    /// Takes `primitive` now if it is free (see its `try_acquire`) and keeps it; `None`
    /// when it is held.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe in effect, as the primitive's `try_acquire` is.
    pub async fn try_acquire(
        primitive: &P,
        options: &ManagedOptions,
    ) -> Result<Option<Managed<P>>> {
        options.validate()?;
        Managed::kept(
            primitive.try_acquire_held(options.lease_duration()).await?,
            options,
        )
    }
}

/// What a kept lock's lease and a kept Redlock lease add: their fencing token.
impl<P: HeldKind<Own = u64>> Managed<P> {
    /// The fencing token to send with every protected write (see
    /// [`Held::fencing_token`](Held#method.fencing_token)).
    pub fn fencing_token(&self) -> u64 {
        self.own
    }
}

impl<P: HeldKind> fmt::Debug for Managed<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct(P::MANAGED);
        debug.field("keys", &format_args!("{}", self.keys));
        if !P::OWN.is_empty() {
            debug.field(P::OWN, &self.own);
        }
        debug
            .field("lost", &self.keeper.ownership().reason())
            .finish_non_exhaustive()
    }
}
