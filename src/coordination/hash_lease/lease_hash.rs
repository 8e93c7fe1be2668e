//! A hash of named leases, one field each, and where one of them lives on a backend.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::FieldLease;
use crate::Coordination;
use crate::backend::Backend;
use crate::backend::steps::hash_lease::{
    FieldAcquireReply, FieldAcquireStep, FieldReleaseStep, FieldRenewStep, FieldStep,
    FieldVerifyStep, LeaseReleaseReply,
};
use crate::coordination::name;
use crate::coordination::owner::{
    Acquire, Acquisition, HoldingKeys, acquire_waiting, expiry_ms, lease_expiry, try_acquire,
};
use crate::coordination::{Attempt, Held};
use crate::coordination::{ByOwner, DEFAULT_POLL_INTERVAL, ManagedOptions, OwnerToken};
use crate::error::Result;

/// Named leases kept as the fields of one hash: one field per lease, each with its own
/// expiry, its value the holder's owner token. One key holds a whole group (the devices of
/// one user, the shards of one job), and the group goes with its last lease.
///
/// [`try_acquire`](Self::try_acquire) takes a field now or says how long its holder has
/// left; [`acquire`](Self::acquire) waits for it. See the [module documentation](super) for
/// the servers it needs and the failure cases.
///
/// Cheap to clone.
///
/// # Storage
///
/// One hash, `hlease:<name length>:<name>` under the backend's prefix: field = the lease's
/// name (any bytes; longer than [`MAX_NAME_LEN`](crate::coordination::MAX_NAME_LEN), its
/// digest), value = the holder's owner token, field expiry = the lease's. The hash must have
/// no key-level expiry (it would end every lease at once): every step fails with
/// [`ErrorKind::CorruptState`](crate::ErrorKind::CorruptState), changing nothing, when it
/// has one or holds another type.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::hash_lease::LeaseHash;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// // One session per device of user 7.
/// let sessions = LeaseHash::named(&Coordination::memory(), "user:7:sessions");
/// let phone = sessions.try_acquire("phone", Duration::from_secs(30)).await?;
/// assert!(phone.is_acquired());
/// let again = sessions.try_acquire("phone", Duration::from_secs(30)).await?;
/// assert!(again.retry_after().is_some(), "the phone's session is held");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaseHash {
    backend: Backend,
    key: Arc<[u8]>,
}

impl LeaseHash {
    /// The lease hash named `name` (any bytes, bounded as names are). Nothing is sent.
    pub fn named(coordination: &Coordination, name: impl AsRef<[u8]>) -> Self {
        LeaseHash {
            backend: coordination.backend().clone(),
            key: name::length_prefixed(b"hlease", name.as_ref()).into(),
        }
    }

    /// The hash's key, without the backend's prefix.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// Takes the field `field` now if no live lease holds it, in one atomic step; never
    /// waits. The lease lasts `lease` (whole milliseconds of the backend's clock) unless
    /// renewed or released.
    ///
    /// Fails with [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported), before anything
    /// is written, on a server without hash field expiry (Redis before 7.4, Valkey before
    /// 9.0); with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a
    /// lease under 1 ms or over about 34 years; with
    /// [`ErrorKind::CorruptState`](crate::ErrorKind::CorruptState) when the key is not a
    /// lease hash (see [Storage](#storage)).
    ///
    /// # Cancel safety
    ///
    /// A step whose answer is lost on the way (no reply in time, a connection lost
    /// mid-flight) is sent again, with the same owner token and deadline, while the
    /// backend's `transient_retry` lasts: a delivery that finds its own token is a grant, so
    /// this costs latency.
    ///
    /// Cancel safe in effect: if the future is dropped after the step was sent (or its
    /// answer stays unknown), a lease it may have been granted is released
    /// by owner token in the background once the step's deadline on the server has passed.
    pub async fn try_acquire(
        &self,
        field: impl AsRef<[u8]>,
        lease: Duration,
    ) -> Result<Attempt<FieldLease>> {
        let keys = Arc::new(self.field_keys(field.as_ref()));
        Self::try_field(&keys, lease).await
    }

    /// Waits for the field `field`: tries, and after a busy answer sleeps until the hash
    /// changes (RESP3 invalidations on Redis: any field's change wakes every waiter on the
    /// hash, which tries again) or the holder's time left runs out, then tries again (every
    /// 50 ms, with jitter, without invalidations). An error ends the wait; bound it with
    /// `tokio::time::timeout`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops waiting; a lease an attempt in flight may have
    /// been granted is released by owner token in the background.
    pub async fn acquire(&self, field: impl AsRef<[u8]>, lease: Duration) -> Result<FieldLease> {
        self.wait(field.as_ref(), lease, DEFAULT_POLL_INTERVAL)
            .await
    }

    /// [`acquire`](Self::acquire) with the lease and poll interval of `options`.
    pub(crate) async fn acquire_with(
        &self,
        field: &[u8],
        options: &ManagedOptions,
    ) -> Result<FieldLease> {
        options.validate()?;
        self.wait(field, options.lease_duration(), options.poll())
            .await
    }

    async fn wait(&self, field: &[u8], lease: Duration, poll: Duration) -> Result<FieldLease> {
        expiry_ms("a lease", lease)?;
        let keys = Arc::new(self.field_keys(field));
        let watched = [self.key()];
        acquire_waiting(&self.backend, &watched, poll, || {
            Self::try_field(&keys, lease)
        })
        .await
    }

    /// The lease of the field `field` held under `owner`, from any process: renewed,
    /// verified and released with the checks a [`FieldLease`]'s own steps make (see
    /// [`ByOwner`]), for a lease whose handle was [detached](FieldLease::detach). Nothing is
    /// sent until a step is asked.
    pub fn by_owner(&self, field: impl AsRef<[u8]>, owner: OwnerToken) -> ByOwner {
        ByOwner::new(Arc::new(self.field_keys(field.as_ref())), owner)
    }

    async fn try_field(keys: &Arc<FieldKeys>, lease: Duration) -> Result<Attempt<FieldLease>> {
        let lease_ms = expiry_ms("a lease", lease)?;
        try_acquire(keys, lease_ms, |holding, ()| Held::new(holding, ())).await
    }

    fn field_keys(&self, field: &[u8]) -> FieldKeys {
        FieldKeys::new(
            self.backend.clone(),
            self.key.to_vec(),
            name::bounded(field).into_owned(),
        )
    }
}

impl fmt::Debug for LeaseHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseHash")
            .field("key", &String::from_utf8_lossy(&self.key))
            .finish_non_exhaustive()
    }
}

/// The user key of a lease hash (the backend applies its prefix) and one of its fields.
/// Public in name only, as the [`HeldKind`](crate::coordination::HeldKind) of a lease hash
/// must be: it is not reachable from outside the crate.
pub struct FieldKeys {
    backend: Backend,
    key: Vec<u8>,
    field: Vec<u8>,
}

impl FieldKeys {
    pub(super) fn new(backend: Backend, key: Vec<u8>, field: Vec<u8>) -> Self {
        FieldKeys {
            backend,
            key,
            field,
        }
    }

    pub(super) fn field(&self) -> &[u8] {
        &self.field
    }

    fn step<'a>(&'a self, token: &'a str) -> FieldStep<'a> {
        FieldStep {
            key: &self.key,
            field: &self.field,
            token,
        }
    }
}

/// The acquisition: the field for the token, if no lease of it exists.
impl Acquire for FieldKeys {
    /// The lease, in whole milliseconds.
    type Ask = u64;
    type Granted = ();

    fn expiry_ms(lease_ms: &u64) -> Option<u64> {
        Some(*lease_ms)
    }

    async fn acquire(
        &self,
        token: &str,
        lease_ms: &u64,
        not_after_ms: u64,
    ) -> Result<Acquisition<()>> {
        let reply = self
            .backend
            .run(FieldAcquireStep {
                lease: self.step(token),
                lease_ms: *lease_ms,
                not_after_ms,
            })
            .await?;
        Ok(match reply {
            FieldAcquireReply::Granted => Acquisition::Granted(()),
            FieldAcquireReply::Held { retry_after_ms } => Acquisition::Busy { retry_after_ms },
            FieldAcquireReply::Late => Acquisition::Late,
        })
    }
}

/// What the shared holding does with a field lease: every step touches its field alone, and
/// only under its owner token.
impl HoldingKeys for FieldKeys {
    type Released = LeaseReleaseReply;
    const PRIMITIVE: crate::coordination::ownership::Primitive =
        crate::coordination::ownership::Primitive::FieldLease;
    const LEFT_HELD: &'static str = "it blocks its field until it expires";

    fn backend(&self) -> &Backend {
        &self.backend
    }

    async fn renew(&self, token: &str, expiry_ms: Option<u64>) -> Result<bool> {
        let lease_ms = lease_expiry::<Self>(expiry_ms)?;
        self.backend
            .run(FieldRenewStep {
                lease: self.step(token),
                lease_ms,
            })
            .await
    }

    async fn verify(&self, token: &str) -> Result<bool> {
        self.backend
            .run_idempotent(FieldVerifyStep(self.step(token)))
            .await
    }

    async fn release(&self, token: &str) -> Result<LeaseReleaseReply> {
        self.backend.run(FieldReleaseStep(self.step(token))).await
    }
}

/// The key and the field, as text (lossy), for logs and messages.
impl fmt::Display for FieldKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} field {:?}",
            String::from_utf8_lossy(&self.key),
            String::from_utf8_lossy(&self.field)
        )
    }
}
