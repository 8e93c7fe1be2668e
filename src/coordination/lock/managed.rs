//! A fenced lease that renews itself, and says when its ownership is lost.

use std::fmt;
use std::time::Duration;

use super::keys::LockKeys;
use super::{FencedLease, FencedLock, Release};
use crate::coordination::owner::{KeepOptions, Keeper};
pub use crate::coordination::ownership::{LossReason, OwnershipLost};
use crate::error::{Error, Result};

/// The shortest lease a [`ManagedLease`] keeps.
pub const MIN_MANAGED_LEASE: Duration = Duration::from_secs(1);
/// The longest lease a [`ManagedLease`] keeps: a crashed holder blocks others this long.
pub const MAX_MANAGED_LEASE: Duration = Duration::from_secs(300);

/// How a [`ManagedLease`] keeps its lease.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::coordination::lock::ManagedLeaseOptions;
///
/// let options = ManagedLeaseOptions::new()
///     .lease(Duration::from_secs(10))
///     // Work handed to the background keeps the lease after its handle is dropped,
///     // for at most five minutes in all.
///     .release_on_drop(false)
///     .max_lifetime(Some(Duration::from_secs(300)));
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManagedLeaseOptions {
    keep: KeepOptions,
    poll_interval: Duration,
}

impl ManagedLeaseOptions {
    /// A 30-second lease, renewed every 15 seconds, released when the handle is dropped, with
    /// no lifetime limit, polling every 50 ms where waiting cannot use invalidations.
    pub fn new() -> Self {
        ManagedLeaseOptions {
            keep: KeepOptions {
                lease: Duration::from_secs(30),
                release_on_drop: true,
                max_lifetime: None,
                hold_limit: None,
            },
            poll_interval: Duration::from_millis(50),
        }
    }

    /// The lease asked of the backend on acquisition and on each renewal, renewed at half of
    /// it; from [`MIN_MANAGED_LEASE`] to [`MAX_MANAGED_LEASE`].
    pub fn lease(mut self, lease: Duration) -> Self {
        self.keep.lease = lease;
        self
    }

    /// Whether dropping the [`ManagedLease`] releases the lease (the default). Without it,
    /// a dropped handle leaves the lease renewing on its own until ownership is lost or the
    /// [lifetime limit](Self::max_lifetime) is reached: for work that outlives the code that
    /// acquired the lease, which keeps an [`OwnershipLost`] to know when to stop.
    pub fn release_on_drop(mut self, release: bool) -> Self {
        self.keep.release_on_drop = release;
        self
    }

    /// The longest a detached lease is kept in all, from its acquisition; then
    /// [`OwnershipLost`] fires with [`LossReason::LifetimeLimit`] and, after that, the lease
    /// is released. At least a millisecond, and only with
    /// [`release_on_drop(false)`](Self::release_on_drop): a lease released with its handle
    /// needs no limit, and the combination is refused. Default: no limit.
    pub fn max_lifetime(mut self, limit: Option<Duration>) -> Self {
        self.keep.max_lifetime = limit;
        self
    }

    /// How often a waiting acquisition tries again where it cannot wait for invalidations
    /// (the memory backend), with up to a tenth of random jitter; from 1 ms to 1 s.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// The lease asked of the backend.
    pub fn lease_duration(&self) -> Duration {
        self.keep.lease
    }

    /// The poll interval of waiting acquisitions.
    pub fn poll_interval_duration(&self) -> Duration {
        self.poll_interval
    }

    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a value out of its range, or a lifetime
    /// limit on a lease released with its handle.
    pub(crate) fn validate(&self) -> Result<()> {
        let lease = self.keep.lease;
        if !(MIN_MANAGED_LEASE..=MAX_MANAGED_LEASE).contains(&lease) {
            return Err(Error::invalid_argument(format!(
                "a managed lease must be between {MIN_MANAGED_LEASE:?} and {MAX_MANAGED_LEASE:?}, not {lease:?}"
            )));
        }
        self.keep.validate()?;
        if !(Duration::from_millis(1)..=Duration::from_secs(1)).contains(&self.poll_interval) {
            return Err(Error::invalid_argument(format!(
                "a poll interval must be between 1 ms and 1 s, not {:?}",
                self.poll_interval
            )));
        }
        Ok(())
    }
}

impl Default for ManagedLeaseOptions {
    fn default() -> Self {
        ManagedLeaseOptions::new()
    }
}

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
/// use leasehold::coordination::lock::{FencedLock, ManagedLease, ManagedLeaseOptions, Release};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = FencedLock::named(&Coordination::memory(), "nightly-report");
/// let options = ManagedLeaseOptions::new().lease(Duration::from_secs(10));
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
    owner_token: String,
    keeper: Keeper<LockKeys>,
}

impl ManagedLease {
    /// Takes over `lease` and keeps it as `options` say.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for invalid options, or without a tokio
    /// runtime to run the keeper (then `lease` is dropped, which releases it).
    pub fn keep(lease: FencedLease, options: &ManagedLeaseOptions) -> Result<ManagedLease> {
        options.validate()?;
        Ok(ManagedLease {
            fencing_token: lease.fencing_token(),
            owner_token: lease.owner_token().to_owned(),
            keeper: Keeper::spawn(lease.into_holding(), options.keep)?,
        })
    }

    /// Waits for `lock` (see [`FencedLock::acquire`]: invalidations on Redis, attempts every
    /// [poll interval](ManagedLeaseOptions::poll_interval) elsewhere), then keeps its lease
    /// as `options` say.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`FencedLock::acquire`] is.
    pub async fn acquire(lock: &FencedLock, options: &ManagedLeaseOptions) -> Result<ManagedLease> {
        options.validate()?;
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
        options: &ManagedLeaseOptions,
    ) -> Result<Option<ManagedLease>> {
        options.validate()?;
        match lock.try_acquire(options.keep.lease).await?.into_lease() {
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
        &self.owner_token
    }

    /// The signal that fires when ownership is lost.
    pub fn ownership(&self) -> OwnershipLost {
        self.keeper.ownership()
    }

    /// Whether ownership is lost.
    pub fn is_lost(&self) -> bool {
        self.keeper.ownership().is_lost()
    }

    /// Stops renewing, fires [`OwnershipLost`] with [`LossReason::Released`], then releases
    /// the lease (owner-checked).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: the release goes on in the keeper if the future is dropped.
    pub async fn release(self) -> Result<Release> {
        // The keeper ended before: the lease was lost, or released at its lifetime limit.
        match self.keeper.release().await {
            Some(released) => released.map(super::fenced_lease::release_answer),
            None => Ok(Release::AlreadyReleased),
        }
    }
}

impl fmt::Debug for ManagedLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedLease")
            .field("fencing_token", &self.fencing_token)
            .field("lost", &self.keeper.ownership().reason())
            .finish_non_exhaustive()
    }
}
