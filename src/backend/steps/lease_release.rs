//! What an owner-checked release of an exclusive lease found: the one answer of the fenced
//! lock's lease key and of a lease hash's field, which the holding kit turns into the public
//! [`Release`](crate::coordination::Release).

/// What an owner-checked release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseReleaseReply {
    /// The lease was held under the token and is now deleted.
    Released,
    /// No lease exists (it expired, or was released before).
    NoLease,
    /// A lease exists under another token; it was left alone.
    OtherOwner,
}
