//! What an owner-checked release found.

/// The answer of [`FencedLease::release`](super::FencedLease::release).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::lock::{FencedLock, Release};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = FencedLock::named(&Coordination::memory(), "report");
/// let mut lease = lock.try_acquire(Duration::from_secs(30)).await?.into_lease().expect("free");
/// assert_eq!(lease.release().await?, Release::Released);
/// assert_eq!(lease.release().await?, Release::AlreadyReleased);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// The lease was held under this handle's owner token and is now deleted: another
    /// holder may acquire the lock at once.
    Released,
    /// No lease existed: it expired, or this handle had already released it.
    AlreadyReleased,
    /// Another holder's lease exists (this one expired and the lock was acquired again); it
    /// was left alone. Work done under this handle's fencing token since it expired must be
    /// expected to be rejected by the protected resource.
    NotOwned,
}

impl Release {
    /// What an owner-checked release of a lease found, as a `Release`: `None` when nothing
    /// was sent (the handle had already released it).
    pub(crate) fn from_reply(
        reply: Option<crate::backend::steps::fenced_lock::LeaseReleaseReply>,
    ) -> Release {
        use crate::backend::steps::fenced_lock::LeaseReleaseReply;
        match reply {
            Some(LeaseReleaseReply::Released) => Release::Released,
            None | Some(LeaseReleaseReply::NoLease) => Release::AlreadyReleased,
            Some(LeaseReleaseReply::OtherOwner) => Release::NotOwned,
        }
    }
}
