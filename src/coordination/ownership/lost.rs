//! The signal every self-renewing holding gives when it stops holding: a
//! [`ManagedLease`](crate::coordination::lock::ManagedLease), a
//! [`ManagedPermit`](crate::coordination::semaphore::ManagedPermit), a
//! [`ManagedRwLease`](crate::coordination::rw_lease::ManagedRwLease) or a
//! [`ManagedFieldLease`](crate::coordination::hash_lease::ManagedFieldLease).

use std::fmt;

use tokio::sync::watch;

/// Why a managed holding (a [`ManagedLease`](crate::coordination::lock::ManagedLease), a
/// [`ManagedPermit`](crate::coordination::semaphore::ManagedPermit), a
/// [`ManagedRwLease`](crate::coordination::rw_lease::ManagedRwLease) or a
/// [`ManagedFieldLease`](crate::coordination::hash_lease::ManagedFieldLease)) stopped holding.
///
/// # Example
///
/// ```
/// use leasehold::coordination::ownership::LossReason;
///
/// // Only a release or a detach was asked for; anything else means the work may overlap
/// // another holder's.
/// fn should_alert(reason: LossReason) -> bool {
///     !matches!(reason, LossReason::Released | LossReason::Detached)
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
    /// The holder let go of it unreleased (`detach`), for another owner to go on with by
    /// its owner token: it is still held, by whoever has the token.
    Detached,
    /// An election's leader found another term leading, or nobody, while its session lives
    /// (a failover that lost its promotion, its keys lost): another may lead now.
    Deposed,
}

impl LossReason {
    /// Its label in the loss metric; `None` for an end that is no loss (released, detached).
    pub(crate) const fn loss_label(self) -> Option<&'static str> {
        match self {
            LossReason::NotRenewed => Some("not_renewed"),
            LossReason::Uncertain => Some("uncertain"),
            LossReason::LifetimeLimit => Some("lifetime_limit"),
            LossReason::Deposed => Some("deposed"),
            LossReason::Released | LossReason::Detached => None,
        }
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::NotRenewed => "it was gone or another holder's when renewed",
            LossReason::Uncertain => "renewals failed until its estimate ran out",
            LossReason::LifetimeLimit => "it reached its lifetime limit",
            LossReason::Released => "it was released",
            LossReason::Detached => "it was detached from its handle, unreleased",
            LossReason::Deposed => "another term leads the election, or nobody",
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
