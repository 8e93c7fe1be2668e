//! A semaphore permit that renews itself, and says when it is lost.

use std::fmt;
use std::time::Duration;

use super::SemaphorePermit;
use super::sets::PermitSets;
use crate::coordination::owner::{KeepOptions, Keeper};
pub use crate::coordination::ownership::{LossReason, OwnershipLost};
use crate::error::{Error, Result};

/// The shortest expiry a [`ManagedPermit`] keeps (renewed every 50 ms).
pub const MIN_MANAGED_PERMIT: Duration = Duration::from_millis(100);
/// The longest expiry a [`ManagedPermit`] keeps: a crashed holder keeps a slot this long.
pub const MAX_MANAGED_PERMIT: Duration = Duration::from_secs(3600);

/// How a [`ManagedPermit`] keeps its permit.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::coordination::semaphore::ManagedPermitOptions;
///
/// let options = ManagedPermitOptions::new(Duration::from_secs(10))
///     // A job handed to the background keeps its slot after its handle is dropped, for
///     // an hour at most.
///     .release_on_drop(false)
///     .max_lifetime(Some(Duration::from_secs(3600)));
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManagedPermitOptions {
    keep: KeepOptions,
}

impl ManagedPermitOptions {
    /// Renews the permit to an expiry of `expiry` every half of it, releases it when the
    /// handle is dropped, with no lifetime limit. `expiry` goes from [`MIN_MANAGED_PERMIT`]
    /// to [`MAX_MANAGED_PERMIT`].
    pub fn new(expiry: Duration) -> Self {
        ManagedPermitOptions {
            keep: KeepOptions {
                lease: expiry,
                release_on_drop: true,
                max_lifetime: None,
                hold_limit: None,
            },
        }
    }

    /// Whether dropping the [`ManagedPermit`] releases the permit (the default). Without it,
    /// a dropped handle leaves the permit renewing on its own until it is lost or the
    /// [lifetime limit](Self::max_lifetime) is reached.
    pub fn release_on_drop(mut self, release: bool) -> Self {
        self.keep.release_on_drop = release;
        self
    }

    /// The longest a detached permit is kept in all; then [`OwnershipLost`] fires with
    /// [`LossReason::LifetimeLimit`] and, after that, the permit is released. At least a
    /// millisecond, and only with [`release_on_drop(false)`](Self::release_on_drop).
    /// Default: no limit.
    pub fn max_lifetime(mut self, limit: Option<Duration>) -> Self {
        self.keep.max_lifetime = limit;
        self
    }

    /// The longest the crate keeps the permit, though it is released with its handle (see
    /// `KeepOptions::hold_limit`): for the concurrency layer's longest hold.
    pub(crate) fn hold_limit(mut self, limit: Option<Duration>) -> Self {
        self.keep.hold_limit = limit;
        self
    }

    /// The expiry asked on each renewal.
    pub fn expiry(&self) -> Duration {
        self.keep.lease
    }

    fn validate(&self) -> Result<()> {
        let expiry = self.keep.lease;
        if !(MIN_MANAGED_PERMIT..=MAX_MANAGED_PERMIT).contains(&expiry) {
            return Err(Error::invalid_argument(format!(
                "a managed permit's expiry must be between {MIN_MANAGED_PERMIT:?} and {MAX_MANAGED_PERMIT:?}, not {expiry:?}"
            )));
        }
        self.keep.validate()
    }
}

/// A [`SemaphorePermit`] kept by a background task: renewed at half its expiry until it is
/// released, dropped (by default), lost, or past its lifetime limit.
///
/// A renewal that gets no answer is tried again while the permit's conservative local
/// estimate lasts, so a stall shorter than the estimate costs nothing; the permit is lost
/// ([`OwnershipLost`] fires) only when a renewal finds it gone, or when the estimate runs out
/// (never later than the server lets it go). The signal fires before the permit is released.
/// The first renewal gives a permit acquired without an expiry the managed expiry.
///
/// This is what holds the slot of each streaming response behind
/// [`RedisConcurrencyLimitLayer`](crate::layer::concurrency_limit::RedisConcurrencyLimitLayer).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::semaphore::{ManagedPermit, ManagedPermitOptions, Semaphore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let semaphore = Semaphore::new(&Coordination::memory(), "exports", 2)?;
/// let expiry = Duration::from_secs(10);
/// let permit = semaphore.try_acquire(Some(expiry)).await?.into_permit().expect("free");
/// let permit = ManagedPermit::keep(permit, &ManagedPermitOptions::new(expiry))?;
/// let mut lost = permit.ownership();
///
/// let export = async { /* long work, holding one of the two slots */ };
/// tokio::select! {
///     () = export => {}
///     reason = lost.lost() => println!("stopped: {reason}"),
/// }
/// assert!(permit.release().await?);
/// # Ok(()) }
/// ```
pub struct ManagedPermit {
    token: String,
    keeper: Keeper<PermitSets>,
}

impl ManagedPermit {
    /// Takes over `permit` and keeps it as `options` say.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for
    /// invalid options, or without a tokio runtime to run the keeper (then `permit` is
    /// dropped, which releases it).
    pub fn keep(permit: SemaphorePermit, options: &ManagedPermitOptions) -> Result<ManagedPermit> {
        options.validate()?;
        Ok(ManagedPermit {
            token: permit.owner_token().to_owned(),
            keeper: Keeper::spawn(permit.into_holding(), options.keep)?,
        })
    }

    /// The permit's owner token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The signal that fires when the permit is lost (or released).
    pub fn ownership(&self) -> OwnershipLost {
        self.keeper.ownership()
    }

    /// Whether the permit is lost.
    pub fn is_lost(&self) -> bool {
        self.keeper.ownership().is_lost()
    }

    /// Stops renewing, fires [`OwnershipLost`] with [`LossReason::Released`], then releases
    /// the permit: `Ok(true)` when it was still held, `Ok(false)` when it no longer was
    /// (lost, or released at its lifetime limit).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: the release goes on in the keeper if the future is dropped.
    pub async fn release(self) -> Result<bool> {
        match self.keeper.release().await {
            Some(released) => released.map(|held| held.unwrap_or(false)),
            None => Ok(false),
        }
    }
}

impl fmt::Debug for ManagedPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedPermit")
            .field("token", &self.token)
            .field("lost", &self.keeper.ownership().reason())
            .finish_non_exhaustive()
    }
}
