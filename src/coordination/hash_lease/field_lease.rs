//! A field's lease: what a [`LeaseHash`] holds, and what its handles add to the shared
//! lifecycle ([`Held`], [`Managed`]): the field.

use super::LeaseHash;
use super::lease_hash::FieldKeys;
use crate::coordination::{Held, HeldKind, Managed, ManagedOptions};
use crate::error::Result;

/// A lease on one field of a [`LeaseHash`](super::LeaseHash), held under a random owner
/// token (the field's value) that only this handle knows, with the field's own expiry on the
/// backend's clock.
///
/// Every step compares the owner token in the field's value, so a stale handle can change
/// neither a replacement lease of its field nor any other field of the hash. The handle
/// fails closed as a [`FencedLease`](crate::coordination::lock::FencedLease) does: its
/// [`remaining_estimate`](Self::remaining_estimate) counts from before the request that set
/// the expiry was sent; a renewal without an answer leaves it held with the earlier of the
/// two expiries; a release without an answer leaves it uncertain until released again.
///
/// Its lifecycle (renewing, verifying, releasing, detaching, dropping) is [`Held`]'s.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::hash_lease::LeaseHash;
/// use leasehold::coordination::Release;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let devices = LeaseHash::named(&Coordination::memory(), "user:7:devices");
/// let mut phone = devices.try_acquire("phone", Duration::from_secs(30)).await?
///     .acquired()
///     .expect("free");
/// // Another field of the same hash is another lease.
/// let laptop = devices.try_acquire("laptop", Duration::from_secs(30)).await?;
/// assert!(laptop.is_acquired());
///
/// assert!(phone.renew(Duration::from_secs(60)).await?);
/// assert_eq!(phone.release().await?, Release::Released);
/// # Ok(()) }
/// ```
pub type FieldLease = Held<LeaseHash>;

/// A [`FieldLease`] kept by a background task (see [`Managed`]): renewed at half its lease
/// until it is released, dropped (by default), lost, or past its lifetime limit. Ownership loss (a renewal
/// that finds the field gone or another holder's, or renewals failing until the local
/// estimate ran out) fires [`OwnershipLost`](crate::coordination::ownership::OwnershipLost), before the lease is released: stop the work
/// that needs it then.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::ManagedOptions;
/// use leasehold::coordination::hash_lease::{LeaseHash, ManagedFieldLease};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let shards = LeaseHash::named(&Coordination::memory(), "reindex:shards");
/// let options = ManagedOptions::new().lease(Duration::from_secs(10));
/// let shard = ManagedFieldLease::acquire(&shards, "shard-3", &options).await?;
/// let mut lost = shard.ownership();
/// tokio::select! {
///     () = async { /* work on shard 3 */ } => {}
///     reason = lost.lost() => println!("stopped: {reason}"),
/// }
/// shard.release().await?;
/// # Ok(()) }
/// ```
pub type ManagedFieldLease = Managed<LeaseHash>;

impl crate::coordination::owner::Sealed for LeaseHash {}

impl HeldKind for LeaseHash {
    type Keys = FieldKeys;
    type Own = ();
    const HANDLE: &'static str = "FieldLease";
    const MANAGED: &'static str = "ManagedFieldLease";
}

impl Held<LeaseHash> {
    /// The field this lease holds, as stored (a name longer than
    /// [`MAX_NAME_LEN`](crate::coordination::MAX_NAME_LEN) is stored as its digest).
    pub fn field(&self) -> &[u8] {
        self.holding.keys().field()
    }
}

impl Managed<LeaseHash> {
    /// Waits for `field` of `hash` (see [`LeaseHash::acquire`]: invalidations on Redis,
    /// attempts every [poll interval](ManagedOptions::poll_interval) elsewhere), then keeps
    /// its lease as `options` say.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe, as [`LeaseHash::acquire`] is.
    pub async fn acquire(
        hash: &LeaseHash,
        field: impl AsRef<[u8]>,
        options: &ManagedOptions,
    ) -> Result<ManagedFieldLease> {
        let lease = hash.acquire_with(field.as_ref(), options).await?;
        Managed::keep(lease, options)
    }

    /// Takes `field` of `hash` now if it is free (see [`LeaseHash::try_acquire`]) and keeps
    /// its lease; `None` when another holder has it.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe in effect, as [`LeaseHash::try_acquire`] is.
    pub async fn try_acquire(
        hash: &LeaseHash,
        field: impl AsRef<[u8]>,
        options: &ManagedOptions,
    ) -> Result<Option<ManagedFieldLease>> {
        options.validate()?;
        Managed::kept(
            hash.try_acquire(field, options.lease_duration()).await?,
            options,
        )
    }

    /// The field this lease holds, as stored (see [`FieldLease::field`](Held::field)).
    pub fn field(&self) -> &[u8] {
        self.keys.field()
    }
}
