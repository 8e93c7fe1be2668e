//! What an owner-checked release found, the same answer for every held primitive.

/// What the release of a held thing found: the answer of every primitive's `release`
/// ([`FencedLease`](super::lock::FencedLease), [`SemaphorePermit`](super::semaphore::SemaphorePermit),
/// [`RwLease`](super::rw_lease::RwLease), [`FieldLease`](super::hash_lease::FieldLease) and
/// their managed forms), beside [`Attempt`](super::Attempt), the answer of an acquisition.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::Release;
/// use leasehold::coordination::lock::FencedLock;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let lock = FencedLock::named(&Coordination::memory(), "report");
/// let mut lease = lock.try_acquire(Duration::from_secs(30)).await?.acquired().expect("free");
/// assert_eq!(lease.release().await?, Release::Released);
/// assert_eq!(lease.release().await?, Release::AlreadyReleased);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// It was held under this handle's owner token and is now gone: another holder may take
    /// it at once.
    Released,
    /// Nothing of this handle's was there: it expired (or was lost), or this handle had
    /// already released it (then nothing was sent).
    AlreadyReleased,
    /// Another holder's lease stands where this one was (it expired, and the lock or the
    /// field was taken again); it was left alone. Only the exclusive leases (a lock's, a
    /// field's) can tell this from [`AlreadyReleased`](Self::AlreadyReleased). Work done under
    /// this handle's fencing token since it expired must be expected to be rejected by the
    /// protected resource.
    NotOwned,
}

impl Release {
    /// Whether this handle still held it when the release came: [`Released`](Self::Released).
    pub fn was_held(self) -> bool {
        self == Release::Released
    }

    /// What a release that answers whether it found its holder's entry found: `None` when
    /// nothing was sent (the handle had already released it).
    pub(crate) fn from_found(found: Option<bool>) -> Release {
        if found == Some(true) {
            Release::Released
        } else {
            Release::AlreadyReleased
        }
    }

    /// What an owner-checked release of a lease found, as a `Release`: `None` when nothing
    /// was sent (the handle had already released it).
    pub(crate) fn from_reply(
        reply: Option<crate::backend::steps::lease_release::LeaseReleaseReply>,
    ) -> Release {
        use crate::backend::steps::lease_release::LeaseReleaseReply;
        match reply {
            Some(LeaseReleaseReply::Released) => Release::Released,
            None | Some(LeaseReleaseReply::NoLease) => Release::AlreadyReleased,
            Some(LeaseReleaseReply::OtherOwner) => Release::NotOwned,
        }
    }
}
