//! The answer to an immediate acquisition.

use std::time::Duration;

use super::FencedLease;

/// The outcome of [`FencedLock::try_acquire`](super::FencedLock::try_acquire): a lease, or a
/// lock held by someone else and how long its lease has left.
///
/// Dropping an `Acquired` attempt drops its lease, which releases it in the background.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::lock::{FencedLock, LockAttempt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = FencedLock::named(&Coordination::memory(), "nightly-export");
/// let first = lock.try_acquire(Duration::from_secs(10)).await?;
/// assert!(first.is_acquired());
///
/// match lock.try_acquire(Duration::from_secs(10)).await? {
///     LockAttempt::Acquired(_lease) => unreachable!("the lock is held"),
///     LockAttempt::Held { retry_after } => {
///         // The first lease expires within 10 s unless it is released or renewed.
///         assert!(retry_after.is_some_and(|wait| wait <= Duration::from_secs(10)));
///     }
/// }
/// # Ok(()) }
/// ```
#[must_use = "dropping an acquired lease releases it"]
#[derive(Debug)]
pub enum LockAttempt {
    /// The lock is held under this lease.
    Acquired(FencedLease),
    /// Another lease holds the lock; nothing changed.
    Held {
        /// How long the holder's lease has left on the backend's clock (its `PTTL`): when it
        /// expires unless it is renewed or released first. Suitable for `Retry-After`.
        /// `None` when the lease key has no expiry (something other than this lock wrote
        /// it), or when a grant arrived too late to be used (see
        /// [`FencedLock::try_acquire`](super::FencedLock::try_acquire)).
        retry_after: Option<Duration>,
    },
}

impl LockAttempt {
    /// Whether the lock was acquired.
    pub fn is_acquired(&self) -> bool {
        matches!(self, LockAttempt::Acquired(_))
    }

    /// The lease, if the lock was acquired.
    pub fn into_lease(self) -> Option<FencedLease> {
        match self {
            LockAttempt::Acquired(lease) => Some(lease),
            LockAttempt::Held { .. } => None,
        }
    }

    /// For a held lock, how long the holder's lease has left (see [`LockAttempt::Held`]);
    /// `None` when the lock was acquired.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LockAttempt::Acquired(_) => None,
            LockAttempt::Held { retry_after } => *retry_after,
        }
    }
}
