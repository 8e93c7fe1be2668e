//! A Redlock lease: what a [`RedlockGroup`] holds on a quorum of its nodes, and what its
//! handles add to the shared lifecycle ([`Held`], [`Managed`]): the group's fencing token.

use super::RedlockGroup;
use super::nodes::GroupKeys;
use crate::coordination::{Held, HeldKind, Managed};

/// A lease on a quorum of a [`RedlockGroup`]'s nodes, under a random owner token that only
/// this handle knows, with a fencing token of the group's that orders it after every
/// earlier holder.
///
/// Renewing, verifying, releasing, detaching and dropping it are [`Held`]'s, the same for
/// every held primitive, done on every node of the group with a quorum deciding: a renewal
/// that misses its quorum loses the lease, and its token is then removed from the nodes
/// that did renew it.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::Release;
/// use leasehold::coordination::redlock::{RedlockGroup, RedlockLease};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let group = RedlockGroup::new([Coordination::memory(), Coordination::memory(), Coordination::memory()])?;
/// let mut lease: RedlockLease = group.acquire("ledger", Duration::from_secs(10)).await?;
/// assert!(lease.fencing_token() > 0);
/// assert!(lease.renew(Duration::from_secs(10)).await?);
/// assert_eq!(lease.release().await?, Release::Released);
/// # Ok(()) }
/// ```
pub type RedlockLease = Held<RedlockGroup>;

/// A [`RedlockLease`] kept by a background task (see [`Managed`]): renewed on every node at
/// half its lease, and lost when a renewal misses its quorum (the signal fires, then its
/// token is removed from every node).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::{Managed, ManagedOptions};
/// use leasehold::coordination::redlock::{ManagedRedlockLease, RedlockGroup};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let group = RedlockGroup::new([Coordination::memory(), Coordination::memory(), Coordination::memory()])?;
/// let lease = group.acquire("ledger", Duration::from_secs(10)).await?;
/// let options = ManagedOptions::new().lease(Duration::from_secs(10));
/// let kept: ManagedRedlockLease = Managed::keep(lease, &options)?;
/// assert!(kept.fencing_token() > 0);
/// kept.release().await?;
/// # Ok(()) }
/// ```
pub type ManagedRedlockLease = Managed<RedlockGroup>;

impl crate::coordination::owner::Sealed for RedlockGroup {}

impl HeldKind for RedlockGroup {
    type Keys = GroupKeys;
    /// The fencing token.
    type Own = u64;
    const HANDLE: &'static str = "RedlockLease";
    const MANAGED: &'static str = "ManagedRedlockLease";
    const OWN: &'static str = "fencing_token";
}
