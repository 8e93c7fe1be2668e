//! The answer to an immediate acquisition of a read or a write lease.

use super::RwLease;
use crate::coordination::Attempt;

/// The outcome of [`ReadWriteLock::try_read`](super::ReadWriteLock::try_read) and
/// [`try_write`](super::ReadWriteLock::try_write): a lease, or [`Attempt::Busy`] with how long
/// until the holders in the way run out (see [`Attempt`], shared with the lock and the
/// semaphores).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::rw_lease::{ReadWriteLock, RwAttempt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = ReadWriteLock::named(&Coordination::memory(), "catalog");
/// let reading: RwAttempt = lock.try_read(Duration::from_secs(10)).await?;
/// let _reader = reading.into_lease().expect("nobody writes");
/// let writing = lock.try_write(Duration::from_secs(10)).await?;
/// assert!(writing.retry_after().is_some(), "a reader holds it");
/// # Ok(()) }
/// ```
pub type RwAttempt = Attempt<RwLease>;

impl Attempt<RwLease> {
    /// The lease, if it was acquired.
    pub fn into_lease(self) -> Option<RwLease> {
        self.acquired()
    }
}
