//! A semaphore's permit: what a [`Semaphore`] or a [`KeyedSemaphore`](super::KeyedSemaphore)
//! holds, its handles ([`Held`], [`Managed`]), and the acquisition both semaphores share.

use std::sync::Arc;
use std::time::Duration;

use super::Semaphore;
use super::sets::PermitSets;
use crate::coordination::owner::{HoldingKeys, acquire_waiting, try_acquire};
use crate::coordination::{Acquirable, Attempt, Held, HeldKind, Managed, ManagedOptions};
use crate::error::Result;

/// One permit of a [`Semaphore`](super::Semaphore) or a
/// [`KeyedSemaphore`](super::KeyedSemaphore), held under a unique owner token (128 random
/// bits, in hex) that only this handle knows.
///
/// Releasing, verifying, renewing (which gives it a new expiry), detaching and dropping it,
/// and what each does when it fails, are [`Held`]'s, the same for every held primitive: the
/// handle **fails closed**. Past its [estimate](Held::remaining_estimate), the permit may be
/// another holder's slot by now: stop the work it guards, and release it (which settles it).
///
/// Its [`verify_still_held`](Held::verify_still_held) prunes expired permits, so on Redis it
/// runs on the primary and needs write permission for the key.
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
/// let semaphore = Semaphore::new(&Coordination::memory(), "exports", 1)?;
/// let Some(mut permit) = semaphore.try_acquire(Duration::from_secs(30)).await?.acquired()
/// else {
///     return Ok(()); // someone else is exporting
/// };
/// assert_eq!(permit.owner_token().len(), 32);
/// assert!(permit.remaining_estimate() <= Duration::from_secs(30));
///
/// // Long work: check in, and extend the expiry.
/// assert!(permit.verify_still_held().await?);
/// assert!(permit.renew(Duration::from_secs(30)).await?);
///
/// assert_eq!(permit.release().await?, Release::Released);
/// assert!(permit.is_released());
/// assert_eq!(permit.remaining_estimate(), Duration::ZERO);
/// # Ok(()) }
/// ```
pub type SemaphorePermit = Held<Semaphore>;

/// A [`SemaphorePermit`] kept by a background task (see [`Managed`]): renewed at half its expiry until it is
/// released, dropped (by default), lost, or past its lifetime limit.
///
/// A renewal that gets no answer is tried again while the permit's conservative local
/// estimate lasts, so a stall shorter than the estimate costs nothing; the permit is lost
/// ([`OwnershipLost`](crate::coordination::ownership::OwnershipLost) fires) only when a renewal finds it gone, or when the estimate runs out
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
pub type ManagedPermit = Managed<Semaphore>;

impl crate::coordination::owner::Sealed for Semaphore {}

impl HeldKind for Semaphore {
    type Keys = PermitSets;
    type Own = ();
    const HANDLE: &'static str = "SemaphorePermit";
    const MANAGED: &'static str = "ManagedPermit";
}

impl Acquirable for Semaphore {
    async fn acquire_held(&self, options: &ManagedOptions) -> Result<SemaphorePermit> {
        self.acquire_with(options).await
    }

    async fn try_acquire_held(&self, expiry: Duration) -> Result<Attempt<SemaphorePermit>> {
        self.try_acquire(expiry).await
    }
}

/// Takes a permit of `sets` now, if one is free.
pub(super) async fn try_acquire_permit(
    sets: &Arc<PermitSets>,
    expiry: Duration,
) -> Result<Attempt<SemaphorePermit>> {
    let expiry_ms = expiry_ms(expiry)?;
    try_acquire(sets, expiry_ms, Held::new).await
}

/// Waits for a permit of `sets`: woken when its sets change (on Redis), else every `poll`.
pub(super) async fn acquire_permit(
    sets: &Arc<PermitSets>,
    expiry: Duration,
    poll: Duration,
) -> Result<SemaphorePermit> {
    let keys: Vec<&[u8]> = sets.keys().iter().map(Vec::as_slice).collect();
    acquire_waiting(sets.backend(), &keys, poll, || {
        try_acquire_permit(sets, expiry)
    })
    .await
}

/// [`acquire_permit`] with the expiry and poll interval of `options`.
pub(super) async fn acquire_permit_with(
    sets: &Arc<PermitSets>,
    options: &ManagedOptions,
) -> Result<SemaphorePermit> {
    options.validate()?;
    acquire_permit(sets, options.lease_duration(), options.poll()).await
}

pub(super) fn expiry_ms(expiry: Duration) -> Result<Option<u64>> {
    crate::coordination::owner::expiry_ms("a permit expiry", expiry).map(Some)
}
