//! The answer to an immediate acquisition of a lock.

use super::FencedLease;
use crate::coordination::Attempt;

/// The outcome of [`FencedLock::try_acquire`](super::FencedLock::try_acquire): a lease, or
/// [`Attempt::Busy`] with the holder's time left (see [`Attempt`], shared with the
/// semaphores).
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
/// let lock = FencedLock::named(&Coordination::memory(), "report");
/// let attempt: LockAttempt = lock.try_acquire(Duration::from_secs(10)).await?;
/// let lease = attempt.into_lease().expect("the lock was free");
/// assert!(lease.fencing_token() >= 1);
/// # Ok(()) }
/// ```
pub type LockAttempt = Attempt<FencedLease>;

impl Attempt<FencedLease> {
    /// The lease, if the lock was acquired.
    pub fn into_lease(self) -> Option<FencedLease> {
        self.acquired()
    }
}
