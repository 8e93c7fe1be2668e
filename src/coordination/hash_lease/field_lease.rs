//! One held field lease (its field, its owner token, its local estimate), and the same
//! kept renewed.

use std::fmt;
use std::time::Duration;

use super::LeaseHash;
use super::lease_hash::FieldKeys;
use crate::coordination::ManagedOptions;
use crate::coordination::Release;
use crate::coordination::owner::{Holding, Managed, expiry_ms};
use crate::coordination::ownership::OwnershipLost;
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
/// # Dropping
///
/// Dropping a lease that is held or uncertain never blocks: it spawns a task on the current
/// tokio runtime that releases it by owner token, retrying with backoff for up to a minute.
/// A release given up then, or that finds no runtime, is counted by
/// [`abandoned_releases`](crate::coordination::ownership::abandoned_releases) and logged as
/// a warning; the field is then held until its lease expires.
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
///     .into_lease()
///     .expect("free");
/// // Another field of the same hash is another lease.
/// let laptop = devices.try_acquire("laptop", Duration::from_secs(30)).await?;
/// assert!(laptop.is_acquired());
///
/// assert!(phone.renew(Duration::from_secs(60)).await?);
/// assert_eq!(phone.release().await?, Release::Released);
/// # Ok(()) }
/// ```
pub struct FieldLease {
    holding: Holding<FieldKeys>,
}

impl FieldLease {
    pub(super) fn new(holding: Holding<FieldKeys>) -> Self {
        FieldLease { holding }
    }

    /// The field this lease holds, as stored (a name longer than
    /// [`MAX_NAME_LEN`](crate::coordination::MAX_NAME_LEN) is stored as its digest).
    pub fn field(&self) -> &[u8] {
        self.holding.keys().field()
    }

    /// The owner token: 32 lower-case hex digits (128 random bits), the field's value.
    pub fn owner_token(&self) -> &str {
        self.holding.token()
    }

    /// The lease asked for at acquisition or at the last successful renewal, in whole
    /// milliseconds.
    pub fn lease(&self) -> Duration {
        self.holding.expiry().unwrap_or_default()
    }

    /// A conservative local estimate of the time the lease has left: zero once released,
    /// lost, uncertain, or past the lease.
    pub fn remaining_estimate(&self) -> Duration {
        self.holding.remaining_estimate().unwrap_or_default()
    }

    /// Whether this handle no longer holds its lease: released by it, or found gone or
    /// another holder's by [`renew`](Self::renew). False for an uncertain handle, which still
    /// needs a release.
    pub fn is_released(&self) -> bool {
        self.holding.is_released()
    }

    /// Gives the field a new expiry of `lease`, counted from now on the backend's clock, if
    /// this handle's token still holds it. `Ok(true)`: renewed, and the estimate starts again
    /// from this request. `Ok(false)`: gone or another holder's (the handle is then lost), or
    /// nothing sent because the handle is released, lost, uncertain or past its estimate. A
    /// lease under a millisecond or over about 34 years fails with
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) before anything is
    /// sent. A failure that certainly changed nothing leaves the handle as it was; one that
    /// may have applied leaves it held with the estimate both outcomes guarantee.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: dropping the future after the renewal was sent leaves the handle
    /// as an unanswered renewal does, held with the narrower estimate.
    pub async fn renew(&mut self, lease: Duration) -> Result<bool> {
        let lease_ms = expiry_ms("a lease", lease)?;
        self.holding.renew(Some(lease_ms)).await
    }

    /// Whether this handle's token still holds the field, asked of the backend: a
    /// point-in-time answer. `Ok(false)` without contacting the backend when the handle is
    /// released, lost or uncertain, or past its estimate; and `Ok(false)` when the estimate ran
    /// out while the question was in flight. A failure leaves the handle as it was.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the step only reads, and the handle is unchanged.
    pub async fn verify_still_held(&self) -> Result<bool> {
        self.holding.verify().await
    }

    /// Deletes the field if this handle's token holds it; never another holder's lease,
    /// never another field. [`Release::Released`] when it was held and is now deleted;
    /// [`Release::AlreadyReleased`] when no lease of the field existed (it expired), or when
    /// this handle had already released it (then nothing is sent); [`Release::NotOwned`] when
    /// another holder's lease of the field exists (left alone). A lost or uncertain handle
    /// sends the release too, which settles it.
    ///
    /// On an unavailable backend, one more release is tried, bounded by about a second, and
    /// its answer is returned if it gets one. A refusal is not tried again: it leaves the
    /// handle as it was, or uncertain if it may have applied. A release that may have run
    /// without an answer leaves the handle uncertain: call
    /// `release` again, or drop the handle to release it in the background.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: if the future is dropped after the request was sent, the
    /// release goes on in a background task (retried as on drop) and the handle counts as
    /// released.
    pub async fn release(&mut self) -> Result<Release> {
        self.holding.release().await.map(Release::from_reply)
    }

    /// Lets go of the lease without releasing it, for another owner to go on with by its
    /// owner token (see [`Detached`](crate::coordination::Detached) and [`LeaseHash::by_owner`](super::LeaseHash::by_owner)): it
    /// stays held until it expires or is released by that token. `None` when this
    /// handle no longer holds it (released, lost, uncertain, or past its estimate); it is
    /// then dropped as the handle is (released in the background unless already).
    ///
    /// Returns at once, unless the acquisition was sent twice (its first delivery lost on
    /// the way): it then first waits until that delivery can no longer land (the acquisition's
    /// deadline: its timeouts and retry bound), since landing after the lease was released by its
    /// token it would take it again, for nobody.
    ///
    /// # Cancel safety
    ///
    /// Dropped before it returns, the lease is released in the background, as when the
    /// handle is dropped.
    pub async fn detach(self) -> Option<crate::coordination::Detached> {
        self.holding.detach().await
    }

    /// The holding, to be kept by a [`ManagedFieldLease`].
    pub(super) fn into_holding(self) -> Holding<FieldKeys> {
        self.holding
    }
}

impl fmt::Debug for FieldLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FieldLease")
            .field("field", &format_args!("{}", self.holding.keys()))
            .field("owner_token", &self.holding.token())
            .field("lease", &self.lease())
            .field("state", &self.holding.state())
            .finish()
    }
}

/// A [`FieldLease`] kept by a background task: renewed at half its lease until it is
/// released, dropped (by default), lost, or past its lifetime limit, as a
/// [`ManagedLease`](crate::coordination::lock::ManagedLease) is. Ownership loss (a renewal
/// that finds the field gone or another holder's, or renewals failing until the local
/// estimate ran out) fires [`OwnershipLost`], before the lease is released: stop the work
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
pub struct ManagedFieldLease {
    field: Vec<u8>,
    kept: Managed<FieldKeys>,
}

impl ManagedFieldLease {
    /// Takes over `lease` and keeps it as `options` say.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for
    /// invalid options, or without a tokio runtime to run the keeper (then `lease` is
    /// dropped, which releases it).
    pub fn keep(lease: FieldLease, options: &ManagedOptions) -> Result<ManagedFieldLease> {
        Ok(ManagedFieldLease {
            field: lease.field().to_vec(),
            kept: Managed::keep(lease.into_holding(), options)?,
        })
    }

    /// Waits for `field` of `hash` (see [`LeaseHash::acquire`]: invalidations on Redis, attempts every
    /// [poll interval](ManagedOptions::poll_interval) elsewhere) and keeps its
    /// lease.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`LeaseHash::acquire`] is.
    pub async fn acquire(
        hash: &LeaseHash,
        field: impl AsRef<[u8]>,
        options: &ManagedOptions,
    ) -> Result<ManagedFieldLease> {
        let lease = hash.acquire_with(field.as_ref(), options).await?;
        ManagedFieldLease::keep(lease, options)
    }

    /// Takes `field` of `hash` now if it is free (see [`LeaseHash::try_acquire`]) and keeps
    /// its lease; `None` when it is held.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect, as [`LeaseHash::try_acquire`] is.
    pub async fn try_acquire(
        hash: &LeaseHash,
        field: impl AsRef<[u8]>,
        options: &ManagedOptions,
    ) -> Result<Option<ManagedFieldLease>> {
        options.validate()?;
        match hash
            .try_acquire(field, options.lease_duration())
            .await?
            .into_lease()
        {
            Some(lease) => ManagedFieldLease::keep(lease, options).map(Some),
            None => Ok(None),
        }
    }

    /// The field this lease holds, as stored.
    pub fn field(&self) -> &[u8] {
        &self.field
    }

    /// The owner token of the lease.
    pub fn owner_token(&self) -> &str {
        self.kept.owner_token()
    }

    /// The signal that fires when ownership is lost (or the lease released).
    pub fn ownership(&self) -> OwnershipLost {
        self.kept.ownership()
    }

    /// Whether ownership is lost.
    pub fn is_lost(&self) -> bool {
        self.kept.is_lost()
    }

    /// Stops renewing, fires [`OwnershipLost`] with
    /// [`LossReason::Detached`](crate::coordination::ownership::LossReason::Detached), and
    /// lets go of the lease without releasing it, as [`FieldLease::detach`] does: `None`
    /// when it was no longer held (lost, or released at its lifetime limit).
    ///
    /// # Cancel safety
    ///
    /// Nothing is asked until the future is first polled (dropped unpolled, the keeper goes
    /// on as its options say); then a renewal in flight is answered first, and dropped
    /// before it returns, the lease is released in the background.
    pub async fn detach(self) -> Option<crate::coordination::Detached> {
        self.kept.detach().await
    }

    /// Stops renewing, fires [`OwnershipLost`] with
    /// [`LossReason::Released`](crate::coordination::ownership::LossReason::Released), then
    /// releases the lease (owner-checked): [`Release::Released`] when it was still held,
    /// [`Release::AlreadyReleased`] when it no longer was (lost, or released at its lifetime
    /// limit),
    /// [`Release::NotOwned`] when another holder's lease stands in its place. A failure is the held one's release's
    /// (one more attempt on an unavailable backend, bounded by about a second); a release
    /// that may have run without an answer goes on in the background.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: the release is asked of the keeper when this is called, and
    /// goes on there if the future is dropped, polled or not.
    pub fn release(self) -> impl Future<Output = Result<Release>> + Send {
        self.kept.release()
    }
}

impl fmt::Debug for ManagedFieldLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedFieldLease")
            .field("field", &String::from_utf8_lossy(&self.field))
            .field("lost", &self.kept.ownership().reason())
            .finish_non_exhaustive()
    }
}
