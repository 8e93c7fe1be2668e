//! A fenced lease that renews itself, and says when its ownership is lost.

use std::fmt;

use super::keys::LockKeys;
use super::{FencedLease, FencedLock, Release};
use crate::coordination::ManagedOptions;
use crate::coordination::owner::Managed;
use crate::coordination::ownership::OwnershipLost;
use crate::error::Result;

/// A [`FencedLease`] kept by a background task: renewed at half its lease until it is
/// released, dropped (by default), lost, or past its lifetime limit. Ownership loss (a
/// renewal refused, or renewals failing until the local estimate ran out) fires
/// [`OwnershipLost`]: stop the protected work then.
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
pub struct ManagedLease {
    fencing_token: u64,
    kept: Managed<LockKeys>,
}

impl ManagedLease {
    /// Takes over `lease` and keeps it as `options` say.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for invalid options, or without a tokio
    /// runtime to run the keeper (then `lease` is dropped, which releases it).
    pub fn keep(lease: FencedLease, options: &ManagedOptions) -> Result<ManagedLease> {
        Ok(ManagedLease {
            fencing_token: lease.fencing_token(),
            kept: Managed::keep(lease.into_holding(), options)?,
        })
    }

    /// Waits for `lock` (see [`FencedLock::acquire`]: invalidations on Redis, attempts every
    /// [poll interval](ManagedOptions::poll_interval) elsewhere), then keeps its lease
    /// as `options` say.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`FencedLock::acquire`] is.
    pub async fn acquire(lock: &FencedLock, options: &ManagedOptions) -> Result<ManagedLease> {
        let lease = lock.acquire_with(options).await?;
        ManagedLease::keep(lease, options)
    }

    /// Takes `lock` now if it is free (see [`FencedLock::try_acquire`]) and keeps its lease;
    /// `None` when it is held.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect, as [`FencedLock::try_acquire`] is.
    pub async fn try_acquire(
        lock: &FencedLock,
        options: &ManagedOptions,
    ) -> Result<Option<ManagedLease>> {
        options.validate()?;
        match lock
            .try_acquire(options.lease_duration())
            .await?
            .into_lease()
        {
            Some(lease) => ManagedLease::keep(lease, options).map(Some),
            None => Ok(None),
        }
    }

    /// The fencing token to send with every protected write.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The owner token of the lease.
    pub fn owner_token(&self) -> &str {
        self.kept.owner_token()
    }

    /// The signal that fires when ownership is lost.
    pub fn ownership(&self) -> OwnershipLost {
        self.kept.ownership()
    }

    /// Whether ownership is lost.
    pub fn is_lost(&self) -> bool {
        self.kept.is_lost()
    }

    /// Stops renewing, fires [`OwnershipLost`] with [`LossReason::Released`](crate::coordination::ownership::LossReason::Released), then releases
    /// the lease (owner-checked).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: the release is asked of the keeper when this is called, and
    /// goes on there if the future is dropped, polled or not.
    pub fn release(self) -> impl Future<Output = Result<Release>> + Send {
        self.kept.release()
    }
}

impl fmt::Debug for ManagedLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedLease")
            .field("fencing_token", &self.fencing_token)
            .field("lost", &self.kept.ownership().reason())
            .finish_non_exhaustive()
    }
}
