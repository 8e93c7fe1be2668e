//! A fenced lease that renews itself, and says when its ownership is lost.

use std::fmt;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use super::{FencedLease, FencedLock, Release};
use crate::error::{Error, ErrorKind, Result};

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
    lease: Duration,
    release_on_drop: bool,
    max_lifetime: Option<Duration>,
    poll_interval: Duration,
}

impl ManagedLeaseOptions {
    /// A 30-second lease, renewed every 15 seconds, released when the handle is dropped, with
    /// no lifetime limit, polling every 50 ms where waiting cannot use invalidations.
    pub fn new() -> Self {
        ManagedLeaseOptions {
            lease: Duration::from_secs(30),
            release_on_drop: true,
            max_lifetime: None,
            poll_interval: Duration::from_millis(50),
        }
    }

    /// The lease asked of the backend on acquisition and on each renewal, renewed at half of
    /// it; from [`MIN_MANAGED_LEASE`] to [`MAX_MANAGED_LEASE`].
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Whether dropping the [`ManagedLease`] releases the lease (the default). Without it,
    /// a dropped handle leaves the lease renewing on its own until ownership is lost or the
    /// [lifetime limit](Self::max_lifetime) is reached: for work that outlives the code that
    /// acquired the lease, which keeps an [`OwnershipLost`] to know when to stop.
    pub fn release_on_drop(mut self, release: bool) -> Self {
        self.release_on_drop = release;
        self
    }

    /// The longest the lease is kept in all, from its acquisition; then it is released and
    /// [`OwnershipLost`] fires with [`LossReason::LifetimeLimit`]. At least a millisecond.
    /// Default: no limit.
    pub fn max_lifetime(mut self, limit: Option<Duration>) -> Self {
        self.max_lifetime = limit;
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
        self.lease
    }

    /// The poll interval of waiting acquisitions.
    pub fn poll_interval_duration(&self) -> Duration {
        self.poll_interval
    }

    /// Fails with [`ErrorKind::InvalidArgument`] for a value out of its range.
    pub(crate) fn validate(&self) -> Result<()> {
        if !(MIN_MANAGED_LEASE..=MAX_MANAGED_LEASE).contains(&self.lease) {
            return Err(Error::invalid_argument(format!(
                "a managed lease must be between {MIN_MANAGED_LEASE:?} and {MAX_MANAGED_LEASE:?}, not {:?}",
                self.lease
            )));
        }
        if self
            .max_lifetime
            .is_some_and(|limit| limit < Duration::from_millis(1))
        {
            return Err(Error::invalid_argument(
                "a managed lease's lifetime limit must be at least 1 ms",
            ));
        }
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

/// Why a [`ManagedLease`] stopped holding its lease.
///
/// # Example
///
/// ```
/// use leasehold::coordination::lock::LossReason;
///
/// // Only a release was asked for; anything else means the work may overlap another holder's.
/// fn should_alert(reason: LossReason) -> bool {
///     reason != LossReason::Released
/// }
/// assert!(should_alert(LossReason::NotRenewed));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// A renewal found the lease gone or another holder's.
    NotRenewed,
    /// Renewals failed without a clear answer, and the local estimate of the lease ran out:
    /// another holder may have it now.
    Uncertain,
    /// The [lifetime limit](ManagedLeaseOptions::max_lifetime) was reached; the lease was
    /// released.
    LifetimeLimit,
    /// The holder released it.
    Released,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::NotRenewed => "the lease was gone or another holder's when renewed",
            LossReason::Uncertain => "renewals failed until the lease's estimate ran out",
            LossReason::LifetimeLimit => "the lease reached its lifetime limit",
            LossReason::Released => "the lease was released",
        })
    }
}

/// Fires when a [`ManagedLease`] no longer holds its lease: a cancellation signal for the
/// protected work. Cheap to clone; every clone sees the same event.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::lock::{FencedLock, LossReason, ManagedLease, ManagedLeaseOptions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = FencedLock::named(&Coordination::memory(), "compaction");
/// let lease = ManagedLease::acquire(&lock, &ManagedLeaseOptions::new()).await?;
/// let mut ownership = lease.ownership();
/// assert!(!ownership.is_lost());
///
/// // A task doing the protected work stops when ownership ends.
/// let worker = tokio::spawn(async move { ownership.lost().await });
/// lease.release().await?;
/// assert_eq!(worker.await.expect("worker"), LossReason::Released);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct OwnershipLost {
    reason: watch::Receiver<Option<LossReason>>,
}

impl OwnershipLost {
    /// Whether ownership is lost (or the lease released).
    pub fn is_lost(&self) -> bool {
        self.reason().is_some()
    }

    /// Why ownership was lost; `None` while it is held.
    pub fn reason(&self) -> Option<LossReason> {
        *self.reason.borrow()
    }

    /// Completes when ownership is lost, with the reason.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future changes nothing.
    pub async fn lost(&mut self) -> LossReason {
        match self.reason.wait_for(Option::is_some).await {
            Ok(reason) => reason.unwrap_or(LossReason::Released),
            // The keeper is gone without a word: it can no longer vouch for the lease.
            Err(_) => LossReason::Uncertain,
        }
    }
}

enum Command {
    /// Release now, and answer with the outcome.
    Release(oneshot::Sender<Result<Release>>),
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
    ownership: OwnershipLost,
    control: Option<oneshot::Sender<Command>>,
    release_on_drop: bool,
}

impl ManagedLease {
    /// Takes over `lease` and keeps it as `options` say.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`] for invalid options, or without a tokio
    /// runtime to run the keeper (then `lease` is dropped, which releases it).
    pub fn keep(lease: FencedLease, options: &ManagedLeaseOptions) -> Result<ManagedLease> {
        options.validate()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::new(
                ErrorKind::InvalidArgument,
                "a managed lease needs a tokio runtime to renew it",
            )
        })?;
        let (control, commands) = oneshot::channel();
        let (lost, reason) = watch::channel(None);
        let managed = ManagedLease {
            fencing_token: lease.fencing_token(),
            owner_token: lease.owner_token().to_owned(),
            ownership: OwnershipLost { reason },
            control: Some(control),
            release_on_drop: options.release_on_drop,
        };
        runtime.spawn(keeper(lease, *options, commands, lost));
        Ok(managed)
    }

    /// Waits for `lock` (see [`FencedLock::acquire`]: invalidations on Redis, attempts every
    /// [poll interval](ManagedLeaseOptions::poll_interval) elsewhere), then keeps its lease
    /// as `options` say.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`FencedLock::acquire`] is.
    pub async fn acquire(lock: &FencedLock, options: &ManagedLeaseOptions) -> Result<ManagedLease> {
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
        match lock.try_acquire(options.lease).await?.into_lease() {
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
        self.ownership.clone()
    }

    /// Whether ownership is lost.
    pub fn is_lost(&self) -> bool {
        self.ownership.is_lost()
    }

    /// Stops renewing and releases the lease (owner-checked).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: the release goes on in the keeper if the future is dropped.
    pub async fn release(mut self) -> Result<Release> {
        let Some(control) = self.control.take() else {
            return Ok(Release::AlreadyReleased);
        };
        let (reply, outcome) = oneshot::channel();
        if control.send(Command::Release(reply)).is_err() {
            // The keeper ended: the lease was lost, or it hit its lifetime limit and was
            // released then.
            return Ok(Release::AlreadyReleased);
        }
        outcome.await.unwrap_or(Ok(Release::AlreadyReleased))
    }
}

impl Drop for ManagedLease {
    fn drop(&mut self) {
        if let Some(control) = self.control.take()
            && self.release_on_drop
        {
            // Nobody waits for the answer: the keeper releases in the background.
            let (reply, _) = oneshot::channel();
            let _ = control.send(Command::Release(reply));
        }
        // Otherwise the control channel closes and the keeper goes on alone.
    }
}

impl fmt::Debug for ManagedLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedLease")
            .field("fencing_token", &self.fencing_token)
            .field("lost", &self.ownership.reason())
            .finish_non_exhaustive()
    }
}

/// Renews `lease` every half lease until told to release, the lifetime limit, or a loss.
async fn keeper(
    mut lease: FencedLease,
    options: ManagedLeaseOptions,
    mut commands: oneshot::Receiver<Command>,
    lost: watch::Sender<Option<LossReason>>,
) {
    let started = Instant::now();
    let lifetime_end = options.max_lifetime.map(|limit| started + limit);
    let period = options.lease / 2;
    let retry = (options.lease / 10).min(Duration::from_secs(1));
    let mut next = Instant::now() + period;
    // After the caller dropped its handle without releasing: no more commands will come.
    let mut detached = false;
    loop {
        let wake = lifetime_end.map_or(next, |end| end.min(next));
        tokio::select! {
            biased;
            command = &mut commands, if !detached => match command {
                Ok(Command::Release(reply)) => return release_on_request(lease, &lost, reply).await,
                Err(_) => detached = true,
            },
            () = tokio::time::sleep_until(wake) => {}
        }
        if lifetime_end.is_some_and(|end| Instant::now() >= end) {
            tracing::info!(
                fencing_token = lease.fencing_token(),
                "managed lease reached its lifetime limit; releasing it"
            );
            let _ = release(&mut lease).await;
            lost.send_replace(Some(LossReason::LifetimeLimit));
            return;
        }
        if Instant::now() < next {
            continue;
        }
        // The lease certainly lasts until here, whatever the renewal's fate.
        let estimate_end = Instant::now() + lease.remaining_estimate();
        match lease.renew(options.lease).await {
            Ok(true) => next = Instant::now() + period,
            Ok(false) if lease.is_released() => {
                tracing::warn!(
                    fencing_token = lease.fencing_token(),
                    "managed lease lost: gone or another holder's at renewal"
                );
                lost.send_replace(Some(LossReason::NotRenewed));
                return;
            }
            // Not renewable without being lost: an earlier renewal's fate is unknown, or the
            // estimate ran out. Ownership lasts at most until the estimate ends.
            Ok(false) | Err(_) if estimate_end <= Instant::now() || !lease_is_renewable(&lease) => {
                // A release asked for meanwhile is not kept waiting for the estimate.
                let asked = tokio::select! {
                    biased;
                    command = &mut commands, if !detached => command.ok(),
                    () = tokio::time::sleep_until(estimate_end) => None,
                };
                if let Some(Command::Release(reply)) = asked {
                    return release_on_request(lease, &lost, reply).await;
                }
                tokio::time::sleep_until(estimate_end).await;
                tracing::warn!(
                    fencing_token = lease.fencing_token(),
                    "managed lease uncertain past its estimate; treating it as lost"
                );
                lost.send_replace(Some(LossReason::Uncertain));
                // A release settles it on the server if it is still ours.
                let _ = release(&mut lease).await;
                return;
            }
            Ok(false) | Err(_) => {
                tracing::debug!(
                    fencing_token = lease.fencing_token(),
                    "managed lease renewal failed; retrying"
                );
                next = Instant::now() + retry;
            }
        }
    }
}

/// Releases `lease` as its holder asked, and answers with the outcome.
async fn release_on_request(
    mut lease: FencedLease,
    lost: &watch::Sender<Option<LossReason>>,
    reply: oneshot::Sender<Result<Release>>,
) {
    let outcome = release(&mut lease).await;
    lost.send_replace(Some(LossReason::Released));
    let _ = reply.send(outcome);
}

/// Whether a renewal can still be sent: a refused connection left the handle as it was.
fn lease_is_renewable(lease: &FencedLease) -> bool {
    !lease.is_released() && !lease.remaining_estimate().is_zero()
}

/// Releases `lease`, bounded; past the bound, dropping it retries in the background.
async fn release(lease: &mut FencedLease) -> Result<Release> {
    match tokio::time::timeout(Duration::from_secs(1), lease.release()).await {
        Ok(outcome) => outcome,
        Err(_) => Err(Error::new(
            ErrorKind::Timeout,
            "releasing a managed lease took over a second; retrying in the background",
        )
        .uncertain(true)),
    }
}
