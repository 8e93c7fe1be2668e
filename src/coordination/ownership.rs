//! The signal every self-renewing holding gives when it stops holding: a
//! [`ManagedLease`](super::lock::ManagedLease) or a
//! [`ManagedPermit`](super::semaphore::ManagedPermit).

use std::fmt;

use tokio::sync::watch;

/// Why a managed holding (a [`ManagedLease`](super::lock::ManagedLease) or a
/// [`ManagedPermit`](super::semaphore::ManagedPermit)) stopped holding.
///
/// # Example
///
/// ```
/// use leasehold::coordination::ownership::LossReason;
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
    /// A renewal found the holding gone or another holder's.
    NotRenewed,
    /// Renewals got no answer (or were refused) until the local estimate ran out: another
    /// holder may have it now. The estimate is conservative, so this fires no later than the
    /// backend lets the holding go.
    Uncertain,
    /// The lifetime limit was reached; the holder was told, then the holding released.
    LifetimeLimit,
    /// The holder released it.
    Released,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::NotRenewed => "it was gone or another holder's when renewed",
            LossReason::Uncertain => "renewals failed until its estimate ran out",
            LossReason::LifetimeLimit => "it reached its lifetime limit",
            LossReason::Released => "it was released",
        })
    }
}

/// Fires when a managed holding no longer holds: a cancellation signal for the protected
/// work. Cheap to clone; every clone sees the same event. It fires **before** the holding is
/// released on the backend, so that work stops before anyone else can take over.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::ManagedOptions;
/// use leasehold::coordination::lock::{FencedLock, ManagedLease};
/// use leasehold::coordination::ownership::LossReason;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = FencedLock::named(&Coordination::memory(), "compaction");
/// let lease = ManagedLease::acquire(&lock, &ManagedOptions::new()).await?;
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
    pub(crate) fn new(reason: watch::Receiver<Option<LossReason>>) -> Self {
        OwnershipLost { reason }
    }

    /// Whether ownership is lost (or the holding released).
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
            // The keeper is gone without a word: it can no longer vouch for the holding.
            Err(_) => LossReason::Uncertain,
        }
    }
}

/// At which stage of a holding's life a release ran without its holder, for
/// [`AbandonedReleases`] and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReleaseStage {
    /// The handle was dropped unreleased.
    Dropped,
    /// A release was cancelled mid-flight.
    CancelledRelease,
    /// An acquisition may have been granted although no answer arrived.
    UncertainAcquire,
    /// A grant arrived after its expiry had run out by the local estimate.
    LateGrant,
}

impl ReleaseStage {
    const ALL: [ReleaseStage; 4] = [
        ReleaseStage::Dropped,
        ReleaseStage::CancelledRelease,
        ReleaseStage::UncertainAcquire,
        ReleaseStage::LateGrant,
    ];

    fn index(self) -> usize {
        match self {
            ReleaseStage::Dropped => 0,
            ReleaseStage::CancelledRelease => 1,
            ReleaseStage::UncertainAcquire => 2,
            ReleaseStage::LateGrant => 3,
        }
    }
}

impl fmt::Display for ReleaseStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReleaseStage::Dropped => "dropped unreleased",
            ReleaseStage::CancelledRelease => "release cancelled",
            ReleaseStage::UncertainAcquire => "acquisition uncertain",
            ReleaseStage::LateGrant => "grant arrived after its expiry",
        })
    }
}

/// Why a background release was given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AbandonCause {
    /// There was no tokio runtime to run it on (dropped outside a runtime).
    NoRuntime,
    /// The backend stayed unavailable for the whole minute of retries.
    Unavailable,
    /// The backend refused it (an ACL, credentials, a script error): retrying would not help.
    Refused,
}

impl AbandonCause {
    const ALL: [AbandonCause; 3] = [
        AbandonCause::NoRuntime,
        AbandonCause::Unavailable,
        AbandonCause::Refused,
    ];

    fn index(self) -> usize {
        match self {
            AbandonCause::NoRuntime => 0,
            AbandonCause::Unavailable => 1,
            AbandonCause::Refused => 2,
        }
    }
}

/// The releases of one primitive that were given up since the process started, by stage and
/// cause: a metric to export (see
/// [`lock::abandoned_release_counts`](super::lock::abandoned_release_counts) and
/// [`semaphore::abandoned_release_counts`](super::semaphore::abandoned_release_counts)).
///
/// # Example
///
/// ```
/// use leasehold::coordination::lock;
/// use leasehold::coordination::ownership::{AbandonCause, ReleaseStage};
///
/// let counts = lock::abandoned_release_counts();
/// let refused = counts.get(ReleaseStage::Dropped, AbandonCause::Refused);
/// assert!(counts.total() >= refused);
/// assert_eq!(counts.total(), lock::abandoned_releases());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AbandonedReleases {
    counts: [[u64; 3]; 4],
}

impl AbandonedReleases {
    /// How many releases at `stage` were given up for `cause`.
    pub fn get(&self, stage: ReleaseStage, cause: AbandonCause) -> u64 {
        self.counts[stage.index()][cause.index()]
    }

    /// How many releases were given up in all.
    pub fn total(&self) -> u64 {
        self.counts.iter().flatten().sum()
    }

    /// Every non-zero count, with its stage and cause.
    pub fn iter(&self) -> impl Iterator<Item = (ReleaseStage, AbandonCause, u64)> + '_ {
        ReleaseStage::ALL.into_iter().flat_map(move |stage| {
            AbandonCause::ALL
                .into_iter()
                .map(move |cause| (stage, cause, self.get(stage, cause)))
                .filter(|(.., count)| *count > 0)
        })
    }
}

/// The live counters behind [`AbandonedReleases`], one set per primitive.
#[derive(Debug)]
pub(crate) struct AbandonedCounters {
    counts: [[std::sync::atomic::AtomicU64; 3]; 4],
}

impl AbandonedCounters {
    pub(crate) const fn new() -> Self {
        #[allow(clippy::declare_interior_mutable_const)] // copied into each cell only
        const ZERO: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        #[allow(clippy::declare_interior_mutable_const)]
        const ROW: [std::sync::atomic::AtomicU64; 3] = [ZERO; 3];
        AbandonedCounters { counts: [ROW; 4] }
    }

    pub(crate) fn add(&self, stage: ReleaseStage, cause: AbandonCause) {
        self.counts[stage.index()][cause.index()]
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> AbandonedReleases {
        let mut counts = [[0; 3]; 4];
        for (row, cells) in counts.iter_mut().zip(&self.counts) {
            for (count, cell) in row.iter_mut().zip(cells) {
                *count = cell.load(std::sync::atomic::Ordering::Relaxed);
            }
        }
        AbandonedReleases { counts }
    }
}
