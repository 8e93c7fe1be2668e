//! A space of sessions: where leases are granted and their keys read.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::keys::SpaceNames;
use super::{MAX_KEY_NAME_LEN, MAX_LISTED, Session, SessionState, check_name};
use crate::Coordination;
use crate::backend::delivery::Delivery;
use crate::backend::steps::session::{SessionGetStep, SessionListStep};
use crate::coordination::owner::{expiry_ms, try_acquire};
use crate::coordination::{Attempt, ByOwner, Held, OwnerToken};
use crate::error::{Error, ErrorKind, Result};

/// A named space of sessions (leases with attached keys), on one backend and, on a cluster,
/// in one slot: every lease of the space and every key attached to one share its hash tag,
/// so no key can fall outside it. Cheap to clone; nothing is sent until a step is asked.
///
/// Attached keys are named within the space (any bytes, 1 to
/// [`MAX_KEY_NAME_LEN`]), read with [`get`](Self::get) and [`list`](Self::list), and
/// written by the lease's holder ([`Session::put`]).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::session::Sessions;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let jobs = Sessions::named(&Coordination::memory(), "jobs");
/// let mut worker = jobs.grant(Duration::from_secs(10)).await?;
/// worker.put("job:42", "worker-a").await?;
/// assert_eq!(jobs.get("job:42").await?.as_deref(), Some(&b"worker-a"[..]));
/// drop(worker); // revoked in the background; had the worker died, its lease would expire
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Sessions {
    keys: Arc<SpaceNames>,
}

impl Sessions {
    /// The space named `name` (any bytes, bounded as names are). Nothing is sent.
    pub fn named(coordination: &Coordination, name: impl AsRef<[u8]>) -> Self {
        Sessions {
            keys: Arc::new(SpaceNames::new(
                coordination.backend().clone(),
                name.as_ref(),
            )),
        }
    }

    /// Grants a new lease of `lease` (counted on the backend's clock) with no keys.
    ///
    /// A lease under a millisecond or over about 34 years fails with
    /// [`ErrorKind::InvalidArgument`] before anything is sent. The grant carries a deadline
    /// on the server's clock and is sent again, under the same id, when its answer is lost
    /// on the way (a delivery that finds its lease is a grant); one whose outcome stays
    /// unknown fails uncertain, and its lease is revoked in the background once the
    /// deadline has passed, so a late delivery leaves nothing.
    ///
    /// On a Redis server that may evict keys (`maxmemory` set, `maxmemory-policy` other
    /// than `noeviction`), a grant fails with [`ErrorKind::Unsupported`], naming the policy:
    /// the space's keys would be evicted one at a time, and a claimed name could then be
    /// claimed again with no step noticing. The policy is asked with `CONFIG GET` (two
    /// round trips) until the server says it evicts nothing, which the handle keeps; so a
    /// policy changed to `noeviction` is seen at the next grant. A server that refuses
    /// `CONFIG GET` (a managed service that renames it, an ACL) is trusted.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: dropped after it was sent, a lease it may have granted is
    /// revoked in the background.
    pub async fn grant(&self, lease: Duration) -> Result<Session> {
        let lease_ms = expiry_ms("a session lease", lease)?;
        if let Some(policy) = self.keys.backend().eviction_policy().await {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "sessions need a Redis that evicts nothing, and this one evicts keys when \
                     full (maxmemory-policy {policy}): an evicted key of a session space lets \
                     a claimed name be claimed again; set maxmemory-policy noeviction"
                ),
            ));
        }
        match try_acquire(&self.keys, lease_ms, Held::new).await? {
            Attempt::Acquired(session) => Ok(session),
            // Only a grant answered after its lease ran out by the local estimate.
            Attempt::Busy { .. } => Err(Error::new(
                ErrorKind::Timeout,
                "the grant was answered after its lease ran out; it is revoked",
            )),
        }
    }

    /// The value of the live key `name`, `None` once its lease expired or was revoked (from
    /// that millisecond on the server's clock, cleaned up or not).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn get(&self, name: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let name = name.as_ref();
        check_name(name)?;
        self.keys
            .backend()
            .run_idempotent(SessionGetStep {
                space: self.keys.space(),
                name,
            })
            .await
    }

    /// Every live key of the space with its value, the soonest to expire first: at most
    /// [`MAX_LISTED`] of them, read in one step.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn list(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.keys
            .backend()
            .run_idempotent(SessionListStep {
                space: self.keys.space(),
                limit: MAX_LISTED,
            })
            .await
    }

    /// The time to live and the attached keys of the lease `id`; `None` when it is not live.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn state_of(&self, id: &OwnerToken) -> Result<Option<SessionState>> {
        super::state_of(&self.keys, id.as_str()).await
    }

    /// The lease `id` from any process: kept alive (the lease and its keys, in one step),
    /// verified and revoked with the checks a [`Session`]'s own steps make (see
    /// [`ByOwner`]), for a session whose handle was [detached](Session::detach). Nothing is
    /// sent until a step is asked.
    pub fn by_owner(&self, id: OwnerToken) -> ByOwner {
        ByOwner::new(Arc::clone(&self.keys), id)
    }
}

impl Sessions {
    /// The space's keys, for an election in it.
    pub(crate) fn names(&self) -> &Arc<SpaceNames> {
        &self.keys
    }
}

impl fmt::Debug for Sessions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions")
            .field("leases", &format_args!("{}", self.keys))
            .field("max_key_name_len", &MAX_KEY_NAME_LEN)
            .finish()
    }
}
