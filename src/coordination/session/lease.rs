//! One session: a lease with the keys attached to it, what a [`Sessions`] space holds, and
//! what its handles add to the shared lifecycle ([`Held`], [`Managed`]): the keys.

use std::sync::Arc;

use super::keys::SpaceNames;
use super::{Claim, SessionState, Sessions, delete_on, put_on};
use crate::coordination::{Held, HeldKind, Managed, ManagedOptions};
use crate::error::Result;

/// A lease of a [`Sessions`](super::Sessions) space with the keys attached to it: while it
/// lives, so do they; its keep-alive extends it and every one of them in one step, and its
/// release (or its expiry, with nothing to clean up) removes them all.
///
/// The lease id is a random owner token that only this handle knows; every step compares it
/// on the backend, so a stale handle can neither keep alive, write under, nor release a
/// lease that is not its own any more. It fails closed as every held handle does: past its
/// conservative [`remaining_estimate`](Self::remaining_estimate), nothing is written or
/// renewed, and a keep-alive that finds the lease gone marks the handle lost. Dropping it
/// releases it in the background; [`detach`](Held::detach) lets it live on without the
/// handle. [`ManagedSession`](super::ManagedSession) keeps one alive with the ownership
/// signal.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::Release;
/// use leasehold::coordination::session::Sessions;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let workers = Sessions::named(&Coordination::memory(), "workers");
/// let mut session = workers.grant(Duration::from_secs(10)).await?;
/// assert!(session.put("worker:a", "idle").await?);
/// assert_eq!(workers.get("worker:a").await?.as_deref(), Some(&b"idle"[..]));
///
/// assert!(session.keep_alive().await?); // the lease and its key, in one step
/// let state = session.state().await?.expect("live");
/// assert_eq!(state.keys(), [b"worker:a".to_vec()]);
///
/// assert_eq!(session.release().await?, Release::Released);
/// assert_eq!(workers.get("worker:a").await?, None);
/// # Ok(()) }
/// ```
pub type Session = Held<Sessions>;

impl crate::coordination::owner::Sealed for Sessions {}

impl HeldKind for Sessions {
    type Keys = SpaceNames;
    type Own = ();
    const HANDLE: &'static str = "Session";
    const MANAGED: &'static str = "ManagedSession";
}

impl Held<Sessions> {
    /// The lease id: its owner token, 32 lower-case hex digits (128 random bits).
    pub fn id(&self) -> &str {
        self.holding.token()
    }

    /// Attaches `name` to the lease with `value`: the key lives exactly as long as the lease
    /// (its expiry is the lease's, moved by every keep-alive), and a name attached to
    /// another lease of the space moves to this one. `Ok(true)`: written. `Ok(false)`:
    /// nothing written, because the lease is gone (the handle is then lost) or the handle
    /// no longer counts on it (released, lost, uncertain, past its estimate: nothing sent).
    ///
    /// A name must be 1 to [`MAX_KEY_NAME_LEN`](super::MAX_KEY_NAME_LEN) bytes and a value
    /// at most [`MAX_VALUE_LEN`](super::MAX_VALUE_LEN), or it fails with
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) before anything is
    /// sent; a lease holding [`MAX_KEYS_PER_SESSION`](super::MAX_KEYS_PER_SESSION) names
    /// refuses a new one with
    /// [`ErrorKind::CapacityExceeded`](crate::ErrorKind::CapacityExceeded), nothing
    /// written.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped after it was sent, the write may or may not apply (it is
    /// never sent again) until its deadline on the server's clock (see the
    /// [failures](super#failures)); putting again after it settles it.
    pub async fn put(&mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.write(name.as_ref(), value.as_ref(), false).await? == Claim::Claimed)
    }

    /// Attaches `name` to the lease with `value` only if no other live lease holds it: the
    /// step that makes a name (a job, a role) this lease's alone while it lives, against
    /// every other claim. A plain [`put`](Self::put) of the name by another lease still
    /// moves it there (and this lease's next keep-alive drops it): where names are owned,
    /// every process takes them with `claim`.
    /// [`Claim::Claimed`] when it is this lease's now (also when it already was: claiming
    /// again is safe); [`Claim::Taken`] when another live lease holds it; and
    /// [`Claim::NotHeld`], nothing written, as [`put`](Self::put) answers `false`. Bounds
    /// and errors as for [`put`](Self::put).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped after it was sent, the claim may or may not apply (it is
    /// never sent again: a copy landing after a later step of this lease would undo it);
    /// claiming again settles it.
    pub async fn claim(
        &mut self,
        name: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<Claim> {
        self.write(name.as_ref(), value.as_ref(), true).await
    }

    async fn write(&mut self, name: &[u8], value: &[u8], only_if_free: bool) -> Result<Claim> {
        if self.remaining_estimate().is_zero() {
            return Ok(Claim::NotHeld);
        }
        let holding = &self.holding;
        let written = put_on(holding.keys(), holding.token(), name, value, only_if_free).await?;
        if written == Claim::NotHeld {
            self.holding.found_gone();
        }
        Ok(written)
    }

    /// Detaches `name` from the lease and removes it, if it is attached to this lease:
    /// `Ok(true)` when it was live. A name that moved to another lease is left alone. A
    /// name out of bounds fails as for [`put`](Self::put), before anything is sent.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in effect: dropped after it was sent, the removal may or may not apply
    /// until its deadline, as a [`put`](Self::put)'s; deleting again after it settles it.
    pub async fn delete(&mut self, name: impl AsRef<[u8]>) -> Result<bool> {
        delete_on(self.holding.keys(), self.holding.token(), name.as_ref()).await
    }

    /// Extends the lease by [`lease`](Self::lease) from now, and every key attached to it
    /// with it, in one step (see [`renew`](Self::renew)).
    ///
    /// # Cancel safety
    ///
    /// As for [`renew`](Self::renew).
    pub async fn keep_alive(&mut self) -> Result<bool> {
        let lease = self.lease();
        self.renew(lease).await
    }

    /// The lease's time to live and its attached keys, as the backend has them now; `None`
    /// when it is not live.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn state(&self) -> Result<Option<SessionState>> {
        super::state_of(self.holding.keys(), self.id()).await
    }
}

/// A [`Session`] kept alive in the background (see [`Managed`]): its lease
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
