//! A session kept alive by the kit's keeper.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use super::keys::SpaceNames;
use super::{Claim, Session, SessionState, Sessions, delete_on, put_on};
use crate::coordination::owner::Managed;
use crate::coordination::ownership::OwnershipLost;
use crate::coordination::{Detached, ManagedOptions, Release};
use crate::error::Result;

/// A [`Session`] kept alive in the background: its lease and every key attached to it
/// extended in one step at half the lease, until it is revoked, dropped (which revokes it,
/// by default), lost, or past its lifetime limit. The keeper's estimate is a local deadline:
/// while the backend cannot be reached, [`OwnershipLost`] still fires when the estimate
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
/// presence.revoke().await?;
/// assert!(instances.list().await?.is_empty());
/// # Ok(()) }
/// ```
pub struct ManagedSession {
    keys: Arc<SpaceNames>,
    kept: Managed<SpaceNames>,
}

impl ManagedSession {
    /// Takes over `session` and keeps it alive as `options` say. Fails with
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for invalid
    /// options or without a tokio runtime (then the session is dropped, which revokes it).
    pub fn keep(session: Session, options: &ManagedOptions) -> Result<ManagedSession> {
        let holding = session.into_holding();
        let keys = Arc::clone(holding.keys());
        Ok(ManagedSession {
            keys,
            kept: Managed::keep(holding, options)?,
        })
    }

    /// Grants a session of `sessions` for the options' lease and keeps it alive.
    ///
    /// # Cancel safety
    ///
    /// As for [`Sessions::grant`].
    pub async fn grant(sessions: &Sessions, options: &ManagedOptions) -> Result<ManagedSession> {
        options.validate()?;
        let session = sessions.grant(options.lease_duration()).await?;
        Self::keep(session, options)
    }

    /// The lease id (its owner token).
    pub fn id(&self) -> &str {
        self.kept.owner_token()
    }

    /// The space's keys.
    pub(crate) fn names(&self) -> &Arc<SpaceNames> {
        &self.keys
    }

    /// The signal that fires when the session is lost (or revoked, or detached).
    pub fn ownership(&self) -> OwnershipLost {
        self.kept.ownership()
    }

    /// Whether the session is lost.
    pub fn is_lost(&self) -> bool {
        self.kept.is_lost()
    }

    /// Attaches `name` to the lease with `value`, as [`Session::put`] does: `Ok(false)`,
    /// nothing written, once the session is lost or gone.
    ///
    /// # Cancel safety
    ///
    /// As for [`Session::put`].
    pub async fn put(&self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.write(name.as_ref(), value.as_ref(), false).await? == Claim::Claimed)
    }

    /// Attaches `name` only if no other live lease holds it, as [`Session::claim`] does:
    /// [`Claim::NotHeld`], nothing written, once the session is lost or gone.
    ///
    /// # Cancel safety
    ///
    /// As for [`Session::claim`].
    pub async fn claim(&self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<Claim> {
        self.write(name.as_ref(), value.as_ref(), true).await
    }

    async fn write(&self, name: &[u8], value: &[u8], only_if_free: bool) -> Result<Claim> {
        if self.is_lost() {
            return Ok(Claim::NotHeld);
        }
        put_on(&self.keys, self.id(), name, value, only_if_free).await
    }

    /// Detaches `name` from the lease and removes it, as [`Session::delete`] does.
    ///
    /// # Cancel safety
    ///
    /// As for [`Session::delete`].
    pub async fn delete(&self, name: impl AsRef<[u8]>) -> Result<bool> {
        delete_on(&self.keys, self.id(), name.as_ref()).await
    }

    /// The lease's time to live and its attached keys (see [`Session::state`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn state(&self) -> Result<Option<SessionState>> {
        super::state_of(&self.keys, self.id()).await
    }

    /// Stops keeping it alive, fires [`OwnershipLost`] with
    /// [`LossReason::Detached`](crate::coordination::ownership::LossReason::Detached), and
    /// lets go of it without revoking it, as [`Session::detach`] does: `None` when it was no
    /// longer held, then told as a loss.
    ///
    /// # Cancel safety
    ///
    /// Nothing is asked until the future is first polled; then a keep-alive in flight is
    /// answered first, and dropped before it returns, the session is revoked in the
    /// background.
    pub async fn detach(self) -> Option<Detached> {
        self.kept.detach().await
    }

    /// Stops keeping it alive, fires [`OwnershipLost`] with
    /// [`LossReason::Released`](crate::coordination::ownership::LossReason::Released), then
    /// revokes it: [`Release::Released`] when it was live, [`Release::AlreadyReleased`]
    /// when it no longer was.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: the revoke is asked of the keeper when this is called, and
    /// goes on there if the future is dropped.
    pub fn revoke(self) -> impl Future<Output = Result<Release>> + Send {
        self.kept.release()
    }
}

impl fmt::Debug for ManagedSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedSession")
            .field("space", &format_args!("{}", self.keys))
            .field("lost", &self.kept.ownership().reason())
            .finish_non_exhaustive()
    }
}
