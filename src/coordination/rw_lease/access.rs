//! What a read-write lease gives its holder.

/// What a [`RwLease`](super::RwLease) allows: shared reading, or exclusive writing.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::rw_lease::{Access, ReadWriteLock};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = ReadWriteLock::named(&Coordination::memory(), "catalog");
/// let lease = lock.try_write(Duration::from_secs(10)).await?.into_lease().expect("free");
/// assert_eq!(lease.access(), Access::Write);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Shared with other readers; no writer holds the lease meanwhile.
    Read,
    /// Exclusive: no reader and no other writer holds the lease meanwhile.
    Write,
}
