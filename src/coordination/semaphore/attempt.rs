//! The answer to an immediate acquisition of a permit.

use super::SemaphorePermit;

/// The outcome of a semaphore's `try_acquire`: a permit, or
/// [`Busy`](crate::coordination::Attempt::Busy) with how long until expiries alone free a
/// slot (see [`coordination::Attempt`](crate::coordination::Attempt), shared with the lock).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::semaphore::{Attempt, Semaphore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let semaphore = Semaphore::new(&Coordination::memory(), "exports", 1)?;
/// let first: Attempt = semaphore.try_acquire(Duration::from_secs(30)).await?;
/// let permit = first.into_permit().expect("a free slot");
/// assert!(!semaphore.try_acquire(Duration::from_secs(30)).await?.is_acquired());
/// # drop(permit);
/// # Ok(()) }
/// ```
pub type Attempt = crate::coordination::Attempt<SemaphorePermit>;

impl crate::coordination::Attempt<SemaphorePermit> {
    /// The permit, if one was acquired.
    pub fn into_permit(self) -> Option<SemaphorePermit> {
        self.acquired()
    }
}
