//! A read-write lease: what a [`ReadWriteLock`] holds, and what its handles add to the
//! shared lifecycle ([`Held`], [`Managed`]): the access, a write lease's fencing token, and
//! the downgrade.

use std::time::Duration;

use super::read_write_lock::RwKeys;
use super::{Access, ReadWriteLock};
use crate::backend::steps::rw_lease::RwDowngradeReply;
use crate::coordination::{Held, HeldKind, Managed, ManagedOptions};
use crate::error::Result;

/// A read or a write lease on a [`ReadWriteLock`](super::ReadWriteLock), held under a random
/// owner token that only this handle knows, with its own expiry on the backend's clock.
///
/// Every step compares the owner token on the backend and touches this holder's entry
/// alone: a renewal never changes another reader's expiry, and a stale handle can never
/// renew or remove a later holder's lease. Renew it with [`renew`](Held::renew) before it
/// runs out (or keep it with a [`ManagedRwLease`]), and release it
/// with [`release`](Held::release) or by dropping it.
///
/// A write lease can become a read lease with [`downgrade`](Self::downgrade), in one step:
/// no writer can come in between. A read lease can never become a write lease: two readers
/// upgrading at once would each wait for the other forever. Release it and ask for a write
/// lease instead, and read again under that.
///
/// # Failures
///
/// Its lifecycle, and what each step of it does when it fails, are [`Held`]'s: the handle
/// **fails closed**. Once its [`remaining_estimate`](Held::remaining_estimate) is zero,
/// [`downgrade`](Self::downgrade) too answers `false` without sending.
///
/// A downgrade without an answer (or whose future is dropped after sending) leaves the
/// handle a reader: [`access`](Self::access) says [`Access::Read`], since readers may have
/// come in. The backend may still hold it as the writer; that keeps other readers out until
/// the next [`downgrade`](Self::downgrade), which is sent again and settles it, or the
/// release. It never lets another writer in.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::Release;
/// use leasehold::coordination::rw_lease::{Access, ReadWriteLock};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = ReadWriteLock::named(&Coordination::memory(), "catalog");
/// let mut writer = lock.try_write(Duration::from_secs(10)).await?.acquired().expect("free");
/// // ... rebuild the catalog, then keep reading it while others read too:
/// assert!(writer.downgrade().await?);
/// assert_eq!(writer.access(), Access::Read);
/// let other = lock.try_read(Duration::from_secs(10)).await?.acquired().expect("shared");
///
/// assert!(writer.renew(Duration::from_secs(20)).await?);
/// assert_eq!(writer.release().await?, Release::Released);
/// # drop(other);
/// # Ok(()) }
/// ```
pub type RwLease = Held<ReadWriteLock>;

/// An [`RwLease`] kept by a background task (see [`Managed`]): renewed at half its lease
/// until it is released, dropped (by default), lost, or past its lifetime limit. Ownership loss (a renewal
/// that finds it gone, or renewals failing until the local estimate ran out) fires
/// [`OwnershipLost`](crate::coordination::ownership::OwnershipLost): stop reading or writing then.
///
/// A write lease can be [downgraded](Self::downgrade) to a read lease under the same keeper:
/// its renewals go on, whatever it holds.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::{ManagedOptions, Release};
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
/// assert_eq!(lease.release().await?, Release::Released);
/// # Ok(()) }
/// ```
pub type ManagedRwLease = Managed<ReadWriteLock>;

/// What a read-write lease's handle knows of its own: its access, and a write lease's
/// fencing token.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RwOwn {
    mode: Mode,
    fencing_token: Option<u64>,
}

/// The handle's own view of its access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Read,
    Write,
    /// A downgrade was sent without an answer: a reader, which sends it again.
    Downgrading,
}

/// Shown as its access, and a write lease's fencing token.
impl std::fmt::Debug for RwOwn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.fencing_token {
            Some(token) => write!(f, "{:?} (fencing token {token})", self.access()),
            None => write!(f, "{:?}", self.access()),
        }
    }
}

impl RwOwn {
    pub(super) fn new(access: Access, fencing_token: Option<u64>) -> Self {
        let mode = match access {
            Access::Read => Mode::Read,
            Access::Write => Mode::Write,
        };
        RwOwn {
            mode,
            fencing_token,
        }
    }

    fn access(&self) -> Access {
        match self.mode {
            Mode::Write => Access::Write,
            Mode::Read | Mode::Downgrading => Access::Read,
        }
    }

    /// Downgrades by the keys' step, the handle's mode following (see
    /// [`RwLease::downgrade`](Held::downgrade)): `Ok(false)` when the lease is gone.
    async fn downgrade(&mut self, keys: &RwKeys, token: &str) -> Result<bool> {
        if self.mode == Mode::Read {
            return Ok(true);
        }
        // Until the answer comes (or if it never does), readers may be in.
        let before = self.mode;
        self.mode = Mode::Downgrading;
        match keys.downgrade(token).await {
            Ok(RwDowngradeReply::Downgraded | RwDowngradeReply::AlreadyRead) => {
                self.mode = Mode::Read;
                tracing::debug!(keys = %keys, "write lease downgraded");
                Ok(true)
            }
            Ok(RwDowngradeReply::NotHeld) => {
                tracing::debug!(keys = %keys, "write lease lost before its downgrade");
                Ok(false)
            }
            Err(err) if !err.may_have_applied() => {
                // As before: a write lease, or one whose earlier downgrade is unsettled.
                self.mode = before;
                Err(err)
            }
            Err(err) => Err(err),
        }
    }
}

impl crate::coordination::owner::Sealed for ReadWriteLock {}

/// A write lease's fencing token, kept through a downgrade.
impl crate::coordination::owner::OwnPart for RwOwn {
    fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }
}

impl HeldKind for ReadWriteLock {
    type Keys = RwKeys;
    type Own = RwOwn;
    const HANDLE: &'static str = "RwLease";
    const MANAGED: &'static str = "ManagedRwLease";
    const OWN: &'static str = "access";

    /// A downgrade sent without an answer is sent again, so that what is handed on is
    /// known to read.
    async fn settle(held: &mut RwLease) -> bool {
        held.own.mode != Mode::Downgrading || matches!(held.downgrade().await, Ok(true))
    }

    async fn settle_kept(kept: &mut ManagedRwLease) -> bool {
        kept.own.mode != Mode::Downgrading || matches!(kept.downgrade().await, Ok(true))
    }
}

impl Held<ReadWriteLock> {
    /// A write lease's fencing token (`None` for a read lease): greater than every token a
    /// write lease of the same lock took before it, even when the lock's counter was lost
    /// (as a [`FencedLease`'s](crate::coordination::lock::FencedLease)); at least the
    /// server's clock in microseconds since the epoch at the acquisition. Send it with every
    /// protected write, and have the resource refuse a token lower than the highest it has
    /// accepted: a writer paused past its lease, or whose lease Redis lost in a restart, is
    /// then refused. A renewal keeps it, and so does a downgrade (the reads that follow the
    /// writes it fenced).
    pub fn fencing_token(&self) -> Option<u64> {
        self.own.fencing_token
    }

    /// Whether this handle may write ([`Access::Write`]) or only read. A handle whose
    /// downgrade is unsettled reads.
    pub fn access(&self) -> Access {
        self.own.access()
    }

    /// Turns this write lease into a read lease with the same expiry, in one atomic step:
    /// readers may come in from then on, and no writer can come in between.
    ///
    /// `Ok(true)`: it is a read lease now (a read lease answers so without sending).
    /// `Ok(false)`: it is gone (the handle is then lost), or nothing was sent because the
    /// handle is released, lost, uncertain or past its estimate. A failure that certainly
    /// changed nothing leaves it a write lease; one that may have applied leaves it a reader
    /// (see [Failures](RwLease#failures)), and calling `downgrade` again settles it.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe in effect: dropping the future after the downgrade was
    /// sent leaves the handle as an unanswered downgrade does, a reader.
    pub async fn downgrade(&mut self) -> Result<bool> {
        if self.remaining_estimate() == Duration::ZERO {
            return Ok(false);
        }
        let downgraded = self
            .own
            .downgrade(self.holding.keys(), self.holding.token())
            .await?;
        if !downgraded {
            self.holding.found_gone();
        }
        Ok(downgraded)
    }
}

impl Managed<ReadWriteLock> {
    /// Waits for a read lease on `lock` (see [`ReadWriteLock::read`]: invalidations on
    /// Redis, attempts every [poll interval](ManagedOptions::poll_interval) elsewhere) and
    /// keeps it.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe, as [`ReadWriteLock::read`] is.
    pub async fn read(lock: &ReadWriteLock, options: &ManagedOptions) -> Result<ManagedRwLease> {
        let lease = lock.acquire_with(Access::Read, options).await?;
        Managed::keep(lease, options)
    }

    /// Waits for the write lease on `lock` (see [`ReadWriteLock::write`]: invalidations on
    /// Redis, attempts every [poll interval](ManagedOptions::poll_interval) elsewhere) and
    /// keeps it.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe, as [`ReadWriteLock::write`] is.
    pub async fn write(lock: &ReadWriteLock, options: &ManagedOptions) -> Result<ManagedRwLease> {
        let lease = lock.acquire_with(Access::Write, options).await?;
        Managed::keep(lease, options)
    }

    /// Takes a read lease on `lock` now if it can (see [`ReadWriteLock::try_read`]) and
    /// keeps it; `None` when it is busy.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe in effect, as [`ReadWriteLock::try_read`] is.
    pub async fn try_read(
        lock: &ReadWriteLock,
        options: &ManagedOptions,
    ) -> Result<Option<ManagedRwLease>> {
        options.validate()?;
        Managed::kept(lock.try_read(options.lease_duration()).await?, options)
    }

    /// Takes the write lease on `lock` now if it can (see [`ReadWriteLock::try_write`]) and
    /// keeps it; `None` when it is busy.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe in effect, as [`ReadWriteLock::try_write`] is.
    pub async fn try_write(
        lock: &ReadWriteLock,
        options: &ManagedOptions,
    ) -> Result<Option<ManagedRwLease>> {
        options.validate()?;
        Managed::kept(lock.try_write(options.lease_duration()).await?, options)
    }

    /// A write lease's fencing token (`None` for a read lease), kept through a downgrade: see
    /// [`RwLease::fencing_token`](Held::fencing_token).
    pub fn fencing_token(&self) -> Option<u64> {
        self.own.fencing_token
    }

    /// Whether it may write; a lease whose downgrade is unsettled reads.
    pub fn access(&self) -> Access {
        self.own.access()
    }

    /// Turns the write lease into a read lease in one step, as
    /// [`RwLease::downgrade`](Held::downgrade) does; the keeper goes on renewing it.
    /// `Ok(true)`: it reads now (a read lease answers so without sending); `Ok(false)`: it
    /// was lost (the keeper's next renewal fires the ownership signal too). A failure that
    /// may have applied leaves it a reader, and calling `downgrade` again settles it.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe in effect: dropping the future after the step was sent
    /// leaves it a reader whose downgrade is unsettled.
    pub async fn downgrade(&mut self) -> Result<bool> {
        if self.is_lost() {
            return Ok(false);
        }
        self.own.downgrade(&self.keys, &self.owner_token).await
    }
}
