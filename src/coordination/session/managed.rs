//! A session kept alive by the kit's keeper (see [`Managed`]), and what it adds: the keys.

use std::sync::Arc;

use super::keys::SpaceNames;
use super::{Claim, SessionState, Sessions, delete_on, put_on};
use crate::coordination::{Managed, ManagedOptions};
use crate::error::Result;

/// A [`Session`](super::Session) kept alive in the background (see [`Managed`]): its lease
/// and every key attached to it extended in one step at half the lease, until it is
/// released, dropped (which releases it,
/// by default), lost, or past its lifetime limit. The keeper's estimate is a local deadline:
/// while the backend cannot be reached, [`OwnershipLost`](crate::coordination::ownership::OwnershipLost) still fires when the estimate
/// runs out (before the backend lets the lease go), so that the holder stops before anyone
/// else takes over what its keys stood for.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::ManagedOptions;
/// use leasehold::coordination::session::{ManagedSession, Sessions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let instances = Sessions::named(&Coordination::memory(), "instances");
/// let options = ManagedOptions::new().lease(Duration::from_secs(5));
/// let presence = ManagedSession::grant(&instances, &options).await?;
/// presence.put("instance:7", "10.0.0.7:8080").await?;
///
/// let live = instances.list().await?;
/// assert_eq!(live, [(b"instance:7".to_vec(), b"10.0.0.7:8080".to_vec())]);
/// presence.release().await?;
/// assert!(instances.list().await?.is_empty());
/// # Ok(()) }
/// ```
pub type ManagedSession = Managed<Sessions>;

impl Managed<Sessions> {
    /// Grants a session of `sessions` for the options' lease and keeps it alive.
    ///
    /// # Cancel safety
    ///
    /// As for [`Sessions::grant`].
    pub async fn grant(sessions: &Sessions, options: &ManagedOptions) -> Result<ManagedSession> {
        options.validate()?;
        let session = sessions.grant(options.lease_duration()).await?;
        Managed::keep(session, options)
    }

    /// The lease id (its owner token).
    pub fn id(&self) -> &str {
        self.owner_token()
    }

    /// The space's keys.
    pub(crate) fn names(&self) -> &Arc<SpaceNames> {
        &self.keys
    }

    /// Attaches `name` to the lease with `value`, as [`Session::put`](super::Session::put) does: `Ok(false)`,
    /// nothing written, once the session is lost or gone.
    ///
    /// # Cancel safety
    ///
    /// As for [`Session::put`](super::Session::put).
    pub async fn put(&self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.write(name.as_ref(), value.as_ref(), false).await? == Claim::Claimed)
    }

    /// Attaches `name` only if no other live lease holds it, as [`Session::claim`](super::Session::claim) does:
    /// [`Claim::NotHeld`], nothing written, once the session is lost or gone.
    ///
    /// # Cancel safety
    ///
    /// As for [`Session::claim`](super::Session::claim).
    pub async fn claim(&self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<Claim> {
        self.write(name.as_ref(), value.as_ref(), true).await
    }

    async fn write(&self, name: &[u8], value: &[u8], only_if_free: bool) -> Result<Claim> {
        if self.is_lost() {
            return Ok(Claim::NotHeld);
        }
        put_on(&self.keys, self.id(), name, value, only_if_free).await
    }

    /// Detaches `name` from the lease and removes it, as [`Session::delete`](super::Session::delete) does.
    ///
    /// # Cancel safety
    ///
    /// As for [`Session::delete`](super::Session::delete).
    pub async fn delete(&self, name: impl AsRef<[u8]>) -> Result<bool> {
        delete_on(&self.keys, self.id(), name.as_ref()).await
    }

    /// The lease's time to live and its attached keys (see [`Session::state`](super::Session::state)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn state(&self) -> Result<Option<SessionState>> {
        super::state_of(&self.keys, self.id()).await
    }
}
