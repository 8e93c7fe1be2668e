//! A lock's lease: what a [`FencedLock`] holds, and what its handles add to the shared
//! lifecycle ([`Held`], [`Managed`]): the fencing token.

use super::FencedLock;
use super::fenced_lock::LockKeys;
use std::time::Duration;

use crate::coordination::{Acquirable, Attempt, Held, HeldKind, Managed, ManagedOptions};
use crate::error::Result;

/// A lease on a [`FencedLock`](super::FencedLock): the lock is held under a random owner
/// token that only this handle knows, and with a fencing token that orders it after every
/// earlier holder.
///
/// Send [`fencing_token`](Self::fencing_token) with every write to the protected resource,
/// and have the resource refuse a token lower than the highest it has accepted: a holder
/// that was paused past its lease (and replaced) is then refused, whatever it believes. The
/// lease itself only says who may try.
///
/// Renewing, verifying, releasing, detaching and dropping it, and what each does when it
/// fails, are [`Held`]'s, the same for every held primitive: the handle **fails closed**.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::lock::{FencedLock, Release};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = FencedLock::named(&Coordination::memory(), "invoice:42");
/// let Some(mut lease) = lock.try_acquire(Duration::from_secs(30)).await?.acquired() else {
///     return Ok(()); // someone else holds it
/// };
/// let token = lease.fencing_token();
/// assert!(token > 0);
/// assert_eq!(lease.owner_token().len(), 32);
/// assert_eq!(lease.lease(), Duration::from_secs(30));
/// assert!(lease.remaining_estimate() <= Duration::from_secs(30));
///
/// // Long work: check in, and extend the lease; the fencing token stays.
/// assert!(lease.verify_still_held().await?);
/// assert!(lease.renew(Duration::from_secs(60)).await?);
/// assert_eq!(lease.fencing_token(), token);
///
/// assert_eq!(lease.release().await?, Release::Released);
/// assert!(lease.is_released());
/// assert_eq!(lease.remaining_estimate(), Duration::ZERO);
/// # Ok(()) }
/// ```
pub type FencedLease = Held<FencedLock>;

/// A [`FencedLease`] kept by a background task (see [`Managed`]): renewed at half its lease until it is
/// released, dropped (by default), lost, or past its lifetime limit. Ownership loss (a
/// renewal that finds the lease gone or another holder's, or renewals failing until the
/// local estimate ran out) fires [`OwnershipLost`](crate::coordination::ownership::OwnershipLost), before the lease is released: stop the
/// protected work then. A stall shorter than the estimate costs nothing.
///
/// Release on drop is best-effort: it never blocks and never removes another owner's lease
/// (releases check the owner token).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::ManagedOptions;
/// use leasehold::coordination::lock::{FencedLock, ManagedLease, Release};
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
pub type ManagedLease = Managed<FencedLock>;

impl crate::coordination::owner::Sealed for FencedLock {}

impl HeldKind for FencedLock {
    type Keys = LockKeys;
    /// The fencing token.
    type Own = u64;
    const HANDLE: &'static str = "FencedLease";
    const MANAGED: &'static str = "ManagedLease";
    const OWN: &'static str = "fencing_token";
}

impl Acquirable for FencedLock {
    async fn acquire_held(&self, options: &ManagedOptions) -> Result<FencedLease> {
        self.acquire_with(options).await
    }

    async fn try_acquire_held(&self, lease: Duration) -> Result<Attempt<FencedLease>> {
        self.try_acquire(lease).await
    }
}
