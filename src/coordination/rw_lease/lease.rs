//! One held read or write lease (its access, its owner token, its local estimate, the
//! downgrade of a write lease), and the same kept renewed.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::read_write_lock::RwKeys;
use super::{Access, ReadWriteLock};
use crate::backend::steps::rw_lease::RwDowngradeReply;
use crate::coordination::owner::{Holding, Managed, expiry_ms};
use crate::coordination::ownership::OwnershipLost;
use crate::coordination::{ManagedOptions, Release};
use crate::error::Result;

/// A read or a write lease on a [`ReadWriteLock`](super::ReadWriteLock), held under a random
/// owner token that only this handle knows, with its own expiry on the backend's clock.
///
/// Every step compares the owner token on the backend and touches this holder's entry
/// alone: a renewal never changes another reader's expiry, and a stale handle can never
/// renew or remove a later holder's lease. Renew it with [`renew`](Self::renew) before it
/// runs out (or keep it with a [`ManagedRwLease`]), and release it
/// with [`release`](Self::release) or by dropping it.
///
/// A write lease can become a read lease with [`downgrade`](Self::downgrade), in one step:
/// no writer can come in between. A read lease can never become a write lease: two readers
/// upgrading at once would each wait for the other forever. Release it and ask for a write
/// lease instead, and read again under that.
///
/// # Failures
///
/// As a [`FencedLease`](crate::coordination::lock::FencedLease)'s: the handle **fails
/// closed**. Its [`remaining_estimate`](Self::remaining_estimate) counts from before the
/// request that set the expiry was sent, and ends no later than the lease on the backend;
/// once it is zero, [`renew`](Self::renew), [`verify_still_held`](Self::verify_still_held)
/// and [`downgrade`](Self::downgrade) answer `false` without sending. A renewal without an
/// answer leaves it held with the earlier of the two expiries; a release without an answer
/// leaves it uncertain until released again.
///
/// A downgrade without an answer (or whose future is dropped after sending) leaves the
/// handle a reader: [`access`](Self::access) says [`Access::Read`], since readers may have
/// come in. The backend may still hold it as the writer; that keeps other readers out until
/// the next [`downgrade`](Self::downgrade), which is sent again and settles it, or the
/// release. It never lets another writer in.
///
/// # Dropping
///
/// Dropping a lease that is held or uncertain spawns an owner-checked release on the
/// current tokio runtime, retried with backoff for up to a minute (see
/// [`FencedLease`'s](crate::coordination::lock::FencedLease#dropping)).
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
/// let mut writer = lock.try_write(Duration::from_secs(10)).await?.into_lease().expect("free");
/// // ... rebuild the catalog, then keep reading it while others read too:
/// assert!(writer.downgrade().await?);
/// assert_eq!(writer.access(), Access::Read);
/// let other = lock.try_read(Duration::from_secs(10)).await?.into_lease().expect("shared");
///
/// assert!(writer.renew(Duration::from_secs(20)).await?);
/// assert_eq!(writer.release().await?, Release::Released);
/// # drop(other);
/// # Ok(()) }
/// ```
pub struct RwLease {
    holding: Holding<RwKeys>,
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

impl RwLease {
    pub(super) fn new(
        holding: Holding<RwKeys>,
        access: Access,
        fencing_token: Option<u64>,
    ) -> Self {
        let mode = match access {
            Access::Read => Mode::Read,
            Access::Write => Mode::Write,
        };
        RwLease {
            holding,
            mode,
            fencing_token,
        }
    }

    /// A write lease's fencing token (`None` for a read lease): greater than every token a
    /// write lease of the same lock took before it, even when the lock's counter was lost
    /// (as a [`FencedLease`'s](crate::coordination::lock::FencedLease::fencing_token)); at
    /// least the server's clock in microseconds since the epoch at the acquisition. Send it
    /// with every protected write, and have the resource refuse a token lower than the
    /// highest it has accepted: a writer paused past its lease, or whose lease Redis lost in
    /// a restart, is then refused. A renewal keeps it, and so does a downgrade (the reads that
    /// follow the writes it fenced).
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    /// Whether this handle may write ([`Access::Write`]) or only read. A handle whose
    /// downgrade is unsettled reads.
    pub fn access(&self) -> Access {
        match self.mode {
            Mode::Write => Access::Write,
            Mode::Read | Mode::Downgrading => Access::Read,
        }
    }

    /// The owner token: 32 lower-case hex digits (128 random bits), unique to this lease.
    pub fn owner_token(&self) -> &str {
        self.holding.token()
    }

    /// The lease asked for at acquisition or at the last successful renewal, in whole
    /// milliseconds.
    pub fn lease(&self) -> Duration {
        self.holding.expiry().unwrap_or_default()
    }

    /// A conservative local estimate of the time the lease has left (see
    /// [Failures](#failures)): zero once released, lost, uncertain, or past the lease.
    pub fn remaining_estimate(&self) -> Duration {
        self.holding.remaining_estimate().unwrap_or_default()
    }

    /// Whether this handle no longer holds its lease: released by it, or found gone. False
    /// for an uncertain handle (see [Failures](#failures)), which still needs a release.
    pub fn is_released(&self) -> bool {
        self.holding.is_released()
    }

    /// Gives the lease a new expiry of `lease`, counted from now on the backend's clock, if
    /// this handle still holds it; nothing else in the set changes.
    ///
    /// `Ok(true)`: renewed, and the estimate starts again from this request. `Ok(false)`: it
    /// is gone (the handle is then lost), or nothing was sent because the handle is released,
    /// lost or uncertain, or past its estimate. A lease under a millisecond or over about 34
    /// years fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// before anything is sent. A failure that certainly changed nothing leaves the handle as
    /// it was; one that may have applied leaves it held with the estimate both outcomes
    /// guarantee (see [Failures](#failures)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: dropping the future after the renewal was sent leaves the handle
    /// as an unanswered renewal does, held with the narrower estimate.
    pub async fn renew(&mut self, lease: Duration) -> Result<bool> {
        let lease_ms = expiry_ms("a lease", lease)?;
        self.holding.renew(Some(lease_ms)).await
    }

    /// Whether this handle still holds its lease, asked of the backend: a point-in-time
    /// answer. `Ok(false)` without sending when the handle is released, lost, uncertain or
    /// past its estimate; and `Ok(false)` when the estimate ran out while the question was in
    /// flight. A failure leaves the handle as it was.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the step only reads, and the handle is unchanged.
    pub async fn verify_still_held(&self) -> Result<bool> {
        self.holding.verify().await
    }

    /// Turns this write lease into a read lease with the same expiry, in one atomic step:
    /// readers may come in from then on, and no writer can come in between.
    ///
    /// `Ok(true)`: it is a read lease now (a read lease answers so without sending).
    /// `Ok(false)`: it is gone (the handle is then lost), or nothing was sent because the
    /// handle is released, lost, uncertain or past its estimate. A failure that certainly
    /// changed nothing leaves it a write lease; one that may have applied leaves it a reader
    /// (see [Failures](#failures)), and calling `downgrade` again settles it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: dropping the future after the downgrade was sent leaves the
    /// handle as an unanswered downgrade does, a reader.
    pub async fn downgrade(&mut self) -> Result<bool> {
        if self.remaining_estimate() == Duration::ZERO {
            return Ok(false);
        }
        if self.mode == Mode::Read {
            return Ok(true);
        }
        // Until the answer comes (or if it never does), readers may be in.
        let before = self.mode;
        self.mode = Mode::Downgrading;
        match self.holding.keys().downgrade(self.holding.token()).await {
            Ok(RwDowngradeReply::Downgraded | RwDowngradeReply::AlreadyRead) => {
                self.mode = Mode::Read;
                tracing::debug!(keys = %self.holding.keys(), "write lease downgraded");
                Ok(true)
            }
            Ok(RwDowngradeReply::NotHeld) => {
                self.holding.found_gone();
                tracing::debug!(keys = %self.holding.keys(), "write lease lost before its downgrade");
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

    /// Releases the lease if this handle still holds it; never another holder's.
    ///
    /// [`Release::Released`] when it was held and is now removed;
    /// [`Release::AlreadyReleased`] when no lease of this handle's existed (it expired), or
    /// when this handle had already released it (then nothing is sent). A lost or uncertain
    /// handle sends the release too, which settles it.
    ///
    /// On an unavailable backend, one more release is tried, bounded by about a second, and
    /// its answer is returned if it gets one. A refusal is not tried again: it leaves the
    /// handle as it was, or uncertain if it may have applied. A release that may have run
    /// without an answer leaves the handle uncertain (see [Failures](#failures)): call
    /// `release` again, or drop the handle to release it in the background.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: if the future is dropped after the request was sent, the
    /// release goes on in a background task (retried as on drop) and the handle counts as
    /// released.
    pub async fn release(&mut self) -> Result<Release> {
        Ok(Release::from_found(self.holding.release().await?))
    }

    /// Lets go of the lease without releasing it, for another owner to go on with by its
    /// owner token (see [`Detached`](crate::coordination::Detached) and [`ReadWriteLock::by_owner`](super::ReadWriteLock::by_owner)): it
    /// stays held until it expires or is released by that token. A write lease's
    /// fencing token stays [`fencing_token`](Self::fencing_token)'s. `None` when this
    /// handle no longer holds it (released, lost, uncertain, or past its estimate); it is
    /// then dropped as the handle is (released in the background unless already).
    ///
    /// Returns at once, unless the acquisition was sent twice (its first delivery lost on
    /// the way): it then first waits until that delivery can no longer land (the acquisition's
    /// deadline: its timeouts and retry bound), since landing after the lease was released by its
    /// token it would take it again, for nobody.
    ///
    /// # Cancel safety
    ///
    /// Dropped before it returns, the lease is released in the background, as when the
    /// handle is dropped.
    ///
    /// A downgrade sent without an answer is sent again first, so that what is handed on
    /// is known to read (`None` when that fails or finds the lease gone).
    pub async fn detach(mut self) -> Option<crate::coordination::Detached> {
        if self.downgrade_unsettled() && !matches!(self.downgrade().await, Ok(true)) {
            return None;
        }
        let fencing_token = self.fencing_token();
        self.holding
            .detach()
            .await
            .map(|detached| detached.with_fencing_token(fencing_token))
    }

    /// The holding, to be kept by a [`ManagedRwLease`].
    pub(super) fn into_holding(self) -> Holding<RwKeys> {
        self.holding
    }

    /// Whether a downgrade was sent without an answer: the next one is sent again.
    fn downgrade_unsettled(&self) -> bool {
        self.mode == Mode::Downgrading
    }
}

impl fmt::Debug for RwLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLease")
            .field("key", &format_args!("{}", self.holding.keys()))
            .field("access", &self.access())
            .field("owner_token", &self.holding.token())
            .field("lease", &self.lease())
            .field("state", &self.holding.state())
            .finish()
    }
}

/// An [`RwLease`] kept by a background task: renewed at half its lease until it is
/// released, dropped (by default), lost, or past its lifetime limit, as a
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
pub struct ManagedRwLease {
    access: Access,
    fencing_token: Option<u64>,
    /// A downgrade was sent without an answer: sent again by the next one.
    downgrading: bool,
    keys: Arc<RwKeys>,
    kept: Managed<RwKeys>,
}

impl ManagedRwLease {
    /// Takes over `lease` and keeps it as `options` say.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for
    /// invalid options, or without a tokio runtime to run the keeper (then `lease` is
    /// dropped, which releases it).
    pub fn keep(lease: RwLease, options: &ManagedOptions) -> Result<ManagedRwLease> {
        let (access, downgrading) = (lease.access(), lease.downgrade_unsettled());
        let fencing_token = lease.fencing_token();
        let holding = lease.into_holding();
        Ok(ManagedRwLease {
            access,
            fencing_token,
            downgrading,
            keys: Arc::clone(holding.keys()),
            kept: Managed::keep(holding, options)?,
        })
    }

    /// Waits for a read lease on `lock` (see [`ReadWriteLock::read`]: invalidations on Redis, attempts every
    /// [poll interval](ManagedOptions::poll_interval) elsewhere) and keeps it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`ReadWriteLock::read`] is.
    pub async fn read(lock: &ReadWriteLock, options: &ManagedOptions) -> Result<ManagedRwLease> {
        let lease = lock.acquire_with(Access::Read, options).await?;
        ManagedRwLease::keep(lease, options)
    }

    /// Waits for the write lease on `lock` (see [`ReadWriteLock::write`]: invalidations on Redis, attempts every
    /// [poll interval](ManagedOptions::poll_interval) elsewhere) and keeps it.
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

    /// A write lease's fencing token (`None` for a read lease), kept through a downgrade: see
    /// [`RwLease::fencing_token`].
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    /// Whether it may write; a lease whose downgrade is unsettled reads.
    pub fn access(&self) -> Access {
        self.access
    }

    /// The owner token of the lease.
    pub fn owner_token(&self) -> &str {
        self.kept.owner_token()
    }

    /// The signal that fires when ownership is lost (or the lease released).
    pub fn ownership(&self) -> OwnershipLost {
        self.kept.ownership()
    }

    /// Whether ownership is lost.
    pub fn is_lost(&self) -> bool {
        self.kept.is_lost()
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
        let before = (self.access, self.downgrading);
        (self.access, self.downgrading) = (Access::Read, true);
        match self.keys.downgrade(self.kept.owner_token()).await {
            Ok(RwDowngradeReply::Downgraded | RwDowngradeReply::AlreadyRead) => {
                self.downgrading = false;
                Ok(true)
            }
            Ok(RwDowngradeReply::NotHeld) => Ok(false),
            Err(err) if !err.may_have_applied() => {
                (self.access, self.downgrading) = before;
                Err(err)
            }
            Err(err) => Err(err),
        }
    }

    /// Stops renewing, fires [`OwnershipLost`] with
    /// [`LossReason::Detached`](crate::coordination::ownership::LossReason::Detached), and
    /// lets go of the lease without releasing it, as [`RwLease::detach`] does: `None`
    /// when it was no longer held (lost, or released at its lifetime limit).
    ///
    /// # Cancel safety
    ///
    /// Nothing is asked until the future is first polled (dropped unpolled, the keeper goes
    /// on as its options say); then a renewal in flight is answered first, and dropped
    /// before it returns, the lease is released in the background.
    ///
    /// A downgrade sent without an answer is sent again first, as [`RwLease::detach`]
    /// does.
    pub async fn detach(mut self) -> Option<crate::coordination::Detached> {
        if self.downgrading && !matches!(self.downgrade().await, Ok(true)) {
            // Not known to read: dropped, as the handle would be.
            drop(self);
            return None;
        }
        let fencing_token = self.fencing_token();
        self.kept
            .detach()
            .await
            .map(|detached| detached.with_fencing_token(fencing_token))
    }

    /// Stops renewing, fires [`OwnershipLost`] with
    /// [`LossReason::Released`](crate::coordination::ownership::LossReason::Released), then
    /// releases the lease (owner-checked): [`Release::Released`] when it was still held,
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

impl fmt::Debug for ManagedRwLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedRwLease")
            .field("access", &self.access)
            .field("lost", &self.kept.ownership().reason())
            .finish_non_exhaustive()
    }
}
