//! A semaphore permit that renews itself, and says when it is lost.

use std::fmt;

use super::SemaphorePermit;
use super::sets::PermitSets;
use crate::coordination::owner::Managed;
use crate::coordination::ownership::OwnershipLost;
use crate::coordination::{ManagedOptions, Release};
use crate::error::Result;

/// A [`SemaphorePermit`] kept by a background task: renewed at half its expiry until it is
/// released, dropped (by default), lost, or past its lifetime limit.
///
/// A renewal that gets no answer is tried again while the permit's conservative local
/// estimate lasts, so a stall shorter than the estimate costs nothing; the permit is lost
/// ([`OwnershipLost`] fires) only when a renewal finds it gone, or when the estimate runs out
/// (never later than the server lets it go). The signal fires before the permit is released.
/// The first renewal gives the permit the managed lease as its expiry.
///
/// This is what holds the slot of each streaming response behind
/// [`RedisConcurrencyLimitLayer`](crate::layer::concurrency_limit::RedisConcurrencyLimitLayer).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::{ManagedOptions, Release};
/// use leasehold::coordination::semaphore::{ManagedPermit, Semaphore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let semaphore = Semaphore::new(&Coordination::memory(), "exports", 2)?;
/// let options = ManagedOptions::new().lease(Duration::from_secs(10));
/// let permit = ManagedPermit::try_acquire(&semaphore, &options).await?.expect("free");
/// let mut lost = permit.ownership();
///
/// let export = async { /* long work, holding one of the two slots */ };
/// tokio::select! {
///     () = export => {}
///     reason = lost.lost() => println!("stopped: {reason}"),
/// }
/// assert_eq!(permit.release().await?, Release::Released);
/// # Ok(()) }
/// ```
pub struct ManagedPermit {
    kept: Managed<PermitSets>,
}

impl ManagedPermit {
    /// Takes over `permit` and keeps it as `options` say.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for
    /// invalid options, or without a tokio runtime to run the keeper (then `permit` is
    /// dropped, which releases it).
    pub fn keep(permit: SemaphorePermit, options: &ManagedOptions) -> Result<ManagedPermit> {
        Ok(ManagedPermit {
            kept: Managed::keep(permit.into_holding(), options)?,
        })
    }

    /// Waits for a permit of `semaphore` (see [`Semaphore::acquire`](super::Semaphore::acquire):
    /// invalidations on Redis, attempts every [poll interval](ManagedOptions::poll_interval)
    /// elsewhere), taken with the lease of `options` as its expiry, then keeps it as
    /// `options` say. For a [`KeyedSemaphore`](super::KeyedSemaphore), acquire the permit and
    /// [`keep`](Self::keep) it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Semaphore::acquire`](super::Semaphore::acquire) is.
    pub async fn acquire(
        semaphore: &super::Semaphore,
        options: &ManagedOptions,
    ) -> Result<ManagedPermit> {
        let permit = semaphore.acquire_with(options).await?;
        ManagedPermit::keep(permit, options)
    }

    /// Takes a permit of `semaphore` now if one is free (see
    /// [`Semaphore::try_acquire`](super::Semaphore::try_acquire)), with the lease of `options`
    /// as its expiry, and keeps it; `None` when every permit is held.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect, as [`Semaphore::try_acquire`](super::Semaphore::try_acquire) is.
    pub async fn try_acquire(
        semaphore: &super::Semaphore,
        options: &ManagedOptions,
    ) -> Result<Option<ManagedPermit>> {
        options.validate()?;
        match semaphore
            .try_acquire(options.lease_duration())
            .await?
            .into_permit()
        {
            Some(permit) => ManagedPermit::keep(permit, options).map(Some),
            None => Ok(None),
        }
    }

    /// The permit's owner token (as a
    /// [`ManagedLease`](crate::coordination::lock::ManagedLease)'s is).
    pub fn owner_token(&self) -> &str {
        self.kept.owner_token()
    }

    /// The signal that fires when the permit is lost (or released).
    pub fn ownership(&self) -> OwnershipLost {
        self.kept.ownership()
    }

    /// Whether the permit is lost.
    pub fn is_lost(&self) -> bool {
        self.kept.is_lost()
    }

    /// Stops renewing, fires [`OwnershipLost`] with
    /// [`LossReason::Detached`](crate::coordination::ownership::LossReason::Detached), and
    /// lets go of the permit without releasing it, as [`SemaphorePermit::detach`] does: `None`
    /// when it was no longer held (lost, or released at its lifetime limit).
    ///
    /// # Cancel safety
    ///
    /// Nothing is asked until the future is first polled (dropped unpolled, the keeper goes
    /// on as its options say); then a renewal in flight is answered first, and dropped
    /// before it returns, the permit is released in the background.
    pub async fn detach(self) -> Option<crate::coordination::Detached> {
        self.kept.detach().await
    }

    /// Stops renewing, fires [`OwnershipLost`] with
    /// [`LossReason::Released`](crate::coordination::ownership::LossReason::Released), then
    /// releases the permit (owner-checked): [`Release::Released`] when it was still held,
    /// [`Release::AlreadyReleased`] when it no longer was (lost, or released at its lifetime
    /// limit). A failure is the held one's release's
    /// (one more attempt on an unavailable backend, bounded by about a second); a release
    /// that may have run without an answer goes on in the background.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: the release is asked of the keeper when this is called, and
    /// goes on there if the future is dropped, polled or not.
    pub fn release(self) -> impl Future<Output = Result<Release>> + Send {
        self.kept.release()
    }
}

impl fmt::Debug for ManagedPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedPermit")
            .field("token", &self.kept.owner_token())
            .field("lost", &self.kept.ownership().reason())
            .finish_non_exhaustive()
    }
}
