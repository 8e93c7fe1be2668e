//! A read or write lease that renews itself, and says when it is lost.

use std::fmt;
use std::sync::Arc;

use super::keys::RwKeys;
use super::{Access, ReadWriteLock, RwLease};
use crate::backend::steps::rw_lease::RwDowngradeReply;
use crate::coordination::ManagedOptions;
use crate::coordination::owner::Keeper;
use crate::coordination::ownership::OwnershipLost;
use crate::error::Result;

/// An [`RwLease`] kept by a background task: renewed at half its lease until it is
/// released, dropped, lost, or past its lifetime limit, as a
/// [`ManagedLease`](crate::coordination::lock::ManagedLease) is. Ownership loss (a renewal
/// that finds it gone, or renewals failing until the local estimate ran out) fires
/// [`OwnershipLost`]: stop reading or writing then.
///
/// A write lease can be [downgraded](Self::downgrade) to a read lease under the same keeper:
/// its renewals go on, whatever it holds.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::ManagedOptions;
/// use leasehold::coordination::rw_lease::{Access, ManagedRwLease, ReadWriteLock};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = ReadWriteLock::named(&Coordination::memory(), "catalog");
/// let options = ManagedOptions::new().lease(Duration::from_secs(10));
/// let mut lease = ManagedRwLease::write(&lock, &options).await?;
/// let mut lost = lease.ownership();
///
/// let rebuild = async { /* exclusive work */ };
/// tokio::select! {
///     () = rebuild => {}
///     reason = lost.lost() => println!("stopped: {reason}"),
/// }
/// assert!(lease.downgrade().await?);
/// assert_eq!(lease.access(), Access::Read);
/// assert!(lease.release().await?);
/// # Ok(()) }
/// ```
pub struct ManagedRwLease {
    access: Access,
    /// A downgrade was sent without an answer: sent again by the next one.
    downgrading: bool,
    keys: Arc<RwKeys>,
    owner_token: String,
    keeper: Keeper<RwKeys>,
}

impl ManagedRwLease {
    /// Takes over `lease` and keeps it as `options` say.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for
    /// invalid options, or without a tokio runtime to run the keeper (then `lease` is
    /// dropped, which releases it).
    pub fn keep(lease: RwLease, options: &ManagedOptions) -> Result<ManagedRwLease> {
        options.validate()?;
        let access = lease.access();
        let owner_token = lease.owner_token().to_owned();
        let holding = lease.into_holding();
        Ok(ManagedRwLease {
            access,
            downgrading: false,
            keys: Arc::clone(holding.keys()),
            owner_token,
            keeper: Keeper::spawn(holding, options.keep())?,
        })
    }

    /// Waits for a read lease on `lock` (see [`ReadWriteLock::read`]) and keeps it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`ReadWriteLock::read`] is.
    pub async fn read(lock: &ReadWriteLock, options: &ManagedOptions) -> Result<ManagedRwLease> {
        let lease = lock.acquire_with(Access::Read, options).await?;
        ManagedRwLease::keep(lease, options)
    }

    /// Waits for the write lease on `lock` (see [`ReadWriteLock::write`]) and keeps it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`ReadWriteLock::write`] is.
    pub async fn write(lock: &ReadWriteLock, options: &ManagedOptions) -> Result<ManagedRwLease> {
        let lease = lock.acquire_with(Access::Write, options).await?;
        ManagedRwLease::keep(lease, options)
    }

    /// Takes a read lease on `lock` now if it can (see [`ReadWriteLock::try_read`]) and
    /// keeps it; `None` when it is busy.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect, as [`ReadWriteLock::try_read`] is.
    pub async fn try_read(
        lock: &ReadWriteLock,
        options: &ManagedOptions,
    ) -> Result<Option<ManagedRwLease>> {
        options.validate()?;
        match lock.try_read(options.lease_duration()).await?.into_lease() {
            Some(lease) => ManagedRwLease::keep(lease, options).map(Some),
            None => Ok(None),
        }
    }

    /// Takes the write lease on `lock` now if it can (see [`ReadWriteLock::try_write`]) and
    /// keeps it; `None` when it is busy.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect, as [`ReadWriteLock::try_write`] is.
    pub async fn try_write(
        lock: &ReadWriteLock,
        options: &ManagedOptions,
    ) -> Result<Option<ManagedRwLease>> {
        options.validate()?;
        match lock.try_write(options.lease_duration()).await?.into_lease() {
            Some(lease) => ManagedRwLease::keep(lease, options).map(Some),
            None => Ok(None),
        }
    }

    /// Whether it may write; a lease whose downgrade is unsettled reads.
    pub fn access(&self) -> Access {
        self.access
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

    /// Turns the write lease into a read lease in one step, as [`RwLease::downgrade`] does;
    /// the keeper goes on renewing it. `Ok(true)`: it reads now (a read lease answers so
    /// without sending); `Ok(false)`: it was lost (the keeper's next renewal fires
    /// [`OwnershipLost`] too). A failure that may have applied leaves it a reader, and
    /// calling `downgrade` again settles it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: dropping the future after the step was sent leaves it a
    /// reader whose downgrade is unsettled.
    pub async fn downgrade(&mut self) -> Result<bool> {
        if self.is_lost() {
            return Ok(false);
        }
        if self.access == Access::Read && !self.downgrading {
            return Ok(true);
        }
        (self.access, self.downgrading) = (Access::Read, true);
        match self.keys.downgrade(&self.owner_token).await {
            Ok(RwDowngradeReply::Downgraded | RwDowngradeReply::AlreadyRead) => {
                self.downgrading = false;
                Ok(true)
            }
            Ok(RwDowngradeReply::NotHeld) => Ok(false),
            Err(err) if !err.may_have_applied() => {
                (self.access, self.downgrading) = (Access::Write, false);
                Err(err)
            }
            Err(err) => Err(err),
        }
    }

    /// Stops renewing, fires [`OwnershipLost`] with
    /// [`LossReason::Released`](crate::coordination::ownership::LossReason::Released), then
    /// releases the lease (owner-checked): `Ok(true)` when it was still held, `Ok(false)`
    /// when it no longer was (lost, or released at its lifetime limit).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: the release is asked of the keeper when this is called, and
    /// goes on there if the future is dropped, polled or not.
    pub fn release(self) -> impl Future<Output = Result<bool>> + Send {
        let released = self.keeper.release();
        async move {
            match released.await {
                Some(released) => released.map(|held| held.unwrap_or(false)),
                None => Ok(false),
            }
        }
    }
}

impl fmt::Debug for ManagedRwLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedRwLease")
            .field("access", &self.access)
            .field("lost", &self.keeper.ownership().reason())
            .finish_non_exhaustive()
    }
}
