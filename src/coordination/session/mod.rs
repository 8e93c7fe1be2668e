//! Sessions: leases with attached keys, in the shape of etcd's leases and
//! `concurrency.Session`. A lease is granted with a time to live; keys put with it live
//! exactly as long as it does; one keep-alive extends it and every key attached to it in
//! one step; revoking it, or letting it expire, removes them all, with no cleanup worker.
//! The patterns built on it: a worker owns a job while its lease lives (a key marks it,
//! taken with `claim`); the live instances of a service are the keys of their leases
//! (presence). A claim keeps a name from other claims, not from a plain `put`, which moves
//! the name to its own lease whoever holds it: where names are owned, take them with
//! `claim` only.
//!
//! ```
//! use std::time::Duration;
//! use leasehold::Coordination;
//! use leasehold::coordination::session::Sessions;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> leasehold::Result<()> {
//! let presence = Sessions::named(&Coordination::memory(), "api-instances");
//! let mut me = presence.grant(Duration::from_secs(10)).await?;
//! me.put("instance:a", "10.0.0.1:8080").await?;
//! me.keep_alive().await?; // every few seconds, or keep it with a ManagedSession
//! assert_eq!(presence.list().await?.len(), 1);
//! # Ok(()) }
//! ```
//!
//! # Storage
//!
//! A space named `name` is four kinds of keys under one hash tag,
//! `session:{<name length>:<name>}`, so one slot holds them on a cluster:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `…:leases` | sorted set | each lease id, scored by its absolute expiry (ms, server clock) |
//! | `…:expiries` | sorted set | each attached key's name, scored by its own absolute expiry: always its lease's |
//! | `…:entries` | hash | each attached key's name: its lease id (32 characters), then its value |
//! | `…:lease:<id>` | set | the names put with the lease, expiring with it |
//!
//! A lease, and a key, is live while its expiry is after the server's clock: a read needs
//! no cleanup to be exact, so an attached key is gone from the millisecond its lease
//! expires or is released. Every step that moves a lease's expiry moves its keys' in the
//! same script. A grant, a put and a keep-alive remove the leases that ran out and at
//! most 64 attached keys that did; the space's keys expire with its latest lease, so an
//! idle space leaves nothing behind. A lease's name set may still list a name another
//! lease took since: its own keep-alive drops it, and the bound counts the lease's own. Attached
//! keys are named within the space rather than anywhere in Redis, which is how every one
//! shares the lease's slot: there is no key outside it to refuse.
//!
//! # Bounds
//!
//! A lease holds at most [`MAX_KEYS_PER_SESSION`] names (a release or keep-alive then
//! touches at most that many); a name is 1 to [`MAX_KEY_NAME_LEN`] bytes and a value at
//! most [`MAX_VALUE_LEN`]; [`Sessions::list`] reads at most [`MAX_LISTED`] keys, in one
//! reply as large as their values: keep values small (an address, a worker's name) where a
//! space is listed.
//!
//! # Failures
//!
//! | step | unavailable (no answer) | refused | uncertain (may have applied) |
//! |---|---|---|---|
//! | grant | fails, nothing granted | fails, nothing granted | sent again under the same id within the retry bound; else fails, and the lease is revoked once the grant's deadline has passed |
//! | put | fails, nothing written | fails (`CapacityExceeded` at the bound), nothing written | fails; never sent again, and it lands before its deadline on the server's clock or not at all: put again once the error's `retry_after` has passed to settle |
//! | claim, delete | fails, nothing written | fails, nothing written | fails; never sent again (a copy landing after a later step of the lease would undo it), and it lands before its deadline or not at all: claim or delete again once the error's `retry_after` has passed to settle |
//! | keep-alive | the handle keeps its estimate; a managed one retries while the estimate lasts, and its signal fires when it runs out, even with no server to ask | as unavailable | the handle keeps what both outcomes guarantee |
//! | release | tried once more, bounded; else the handle is uncertain and releases again (or in the background when dropped) | fails, the handle as before | as unavailable |
//!
//! A late keep-alive or put (delayed in the network past a revoke or an expiry) finds no
//! live lease and changes nothing: nothing comes back. A put, claim or delete also carries
//! a deadline on the server's clock, past which it changes nothing (it fails `Timeout`
//! when it arrives late and is answered): the handle's response timeout, connection timeout
//! and transient-retry bound, and a margin for the clocks. An uncertain one fails with
//! [`Error::retry_after`] set to the wait until that deadline has certainly passed: the
//! step sent again after it settles the name, and no copy held in the network can undo it.
//!
//! # Eviction
//!
//! A space's keys hold one invariant between them (a name's expiry is its lease's), which
//! eviction breaks: under a `volatile-*` or `allkeys-*` policy Redis removes them one at a
//! time. So sessions need a server that evicts nothing (`maxmemory-policy noeviction`, or
//! no `maxmemory`): [`Sessions::grant`] asks until the server says it evicts nothing, and
//! fails with [`ErrorKind::Unsupported`] on a server that may evict. A server that refuses
//! `CONFIG GET` is trusted. Where an expiry goes anyway (evicted, deleted by hand), a name
//! whose holder lives is not taken for free: a claim or a read of it, and its holder's
//! keep-alive, fail with [`ErrorKind::CorruptState`]. A lease's set of names evicted is not
//! noticed: its names lapse with the lease's next keep-alive.

pub mod election;
mod keys;
pub(crate) use keys::SpaceNames;
mod lease;
mod sessions;

pub use lease::{ManagedSession, Session};
pub use sessions::Sessions;

use std::time::Duration;

use crate::backend::delivery::Deadline;
use crate::backend::delivery::Delivery;
use crate::backend::steps::session::{
    SessionDeleteReply, SessionDeleteStep, SessionLeaseStep, SessionPutReply, SessionPutStep,
};
use crate::error::{Error, ErrorKind, Result};

/// The most names one lease holds at once.
pub const MAX_KEYS_PER_SESSION: u32 = 1_000;
/// The longest name of an attached key, in bytes.
pub const MAX_KEY_NAME_LEN: usize = 1_024;
/// The longest value of an attached key, in bytes.
pub const MAX_VALUE_LEN: usize = 1 << 20;
/// The most keys one [`Sessions::list`] reads.
pub const MAX_LISTED: u32 = 10_000;

/// What a live lease is now: its time to live and its attached keys.
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
/// let sessions = Sessions::named(&Coordination::memory(), "s");
/// let mut session = sessions.grant(Duration::from_secs(10)).await?;
/// session.put("a", "1").await?;
/// let state = session.state().await?.expect("live");
/// assert!(state.time_to_live() <= Duration::from_secs(10));
/// assert_eq!(state.keys(), [b"a".to_vec()]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionState {
    time_to_live: Duration,
    keys: Vec<Vec<u8>>,
}

impl SessionState {
    /// What the lease has left on the backend's clock.
    pub fn time_to_live(&self) -> Duration {
        self.time_to_live
    }

    /// The names attached to it, sorted.
    pub fn keys(&self) -> &[Vec<u8>] {
        &self.keys
    }
}

/// Fails with [`ErrorKind::InvalidArgument`] for a name out of bounds.
fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > MAX_KEY_NAME_LEN {
        return Err(Error::invalid_argument(format!(
            "an attached key's name is 1 to {MAX_KEY_NAME_LEN} bytes, not {}",
            name.len()
        )));
    }
    Ok(())
}

/// What a claim of a name found (see [`Session::claim`]).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::session::{Claim, Sessions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let jobs = Sessions::named(&Coordination::memory(), "jobs");
/// let mut first = jobs.grant(Duration::from_secs(10)).await?;
/// let mut second = jobs.grant(Duration::from_secs(10)).await?;
/// assert_eq!(first.claim("job:42", "worker-a").await?, Claim::Claimed);
/// assert_eq!(second.claim("job:42", "worker-b").await?, Claim::Taken);
/// first.release().await?;
/// assert_eq!(second.claim("job:42", "worker-b").await?, Claim::Claimed);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// The name is this lease's now, with the value (also when it was already).
    Claimed,
    /// Another live lease holds the name: nothing written.
    Taken,
    /// This lease is not live (or its handle no longer counts on it): nothing written.
    NotHeld,
}

/// Attaches `name` to the lease `id` with `value`, only if no other live lease holds it
/// when `only_if_free`.
async fn put_on(
    keys: &SpaceNames,
    id: &str,
    name: &[u8],
    value: &[u8],
    only_if_free: bool,
) -> Result<Claim> {
    check_name(name)?;
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::invalid_argument(format!(
            "an attached key's value is at most {MAX_VALUE_LEN} bytes, not {}",
            value.len()
        )));
    }
    let names = keys.names_of(id);
    let deadline = keys.backend().acquire_deadline().await?;
    let step = SessionPutStep {
        lease: keys.lease(id, &names),
        name,
        value,
        max_keys: MAX_KEYS_PER_SESSION,
        only_if_free,
        not_after_ms: not_after_ms(deadline),
    };
    // Never sent again, and bounded by a deadline on the server's clock: a first copy whose
    // answer was lost must not land after a later step of this lease (a delete of the name,
    // another put) and undo it.
    let reply = keys
        .backend()
        .run(step)
        .await
        .map_err(|err| settled_after(err, deadline))?;
    match reply {
        SessionPutReply::Late => {
            keys.backend().deadline_missed();
            Err(Error::arrived_late("the put"))
        }
        SessionPutReply::Put => Ok(Claim::Claimed),
        SessionPutReply::Taken => Ok(Claim::Taken),
        SessionPutReply::NoLease => Ok(Claim::NotHeld),
        SessionPutReply::Full => Err(Error::new(
            ErrorKind::CapacityExceeded,
            format!("the session holds {MAX_KEYS_PER_SESSION} keys, the most one may"),
        )),
    }
}

/// Detaches `name` from the lease `id` and removes it: whether it was live.
async fn delete_on(keys: &SpaceNames, id: &str, name: &[u8]) -> Result<bool> {
    check_name(name)?;
    let names = keys.names_of(id);
    let deadline = keys.backend().acquire_deadline().await?;
    // As a put: never sent again, and bounded by a deadline.
    let reply = keys
        .backend()
        .run(SessionDeleteStep {
            lease: keys.lease(id, &names),
            name,
            not_after_ms: not_after_ms(deadline),
        })
        .await
        .map_err(|err| settled_after(err, deadline))?;
    match reply {
        SessionDeleteReply::Deleted => Ok(true),
        SessionDeleteReply::NotLive => Ok(false),
        SessionDeleteReply::Late => {
            keys.backend().deadline_missed();
            Err(Error::arrived_late("the delete"))
        }
    }
}

/// The server time after which a put or a delete sent now changes nothing (0 in memory,
/// where nothing is delayed).
fn not_after_ms(deadline: Option<Deadline>) -> u64 {
    deadline.map_or(0, |deadline| deadline.server_ms)
}

/// `err`, when the step may still land, with the wait until its deadline has certainly
/// passed as its [`retry_after`](Error::retry_after): a put or delete sent again after it
/// settles the name, which the first copy can no longer undo.
fn settled_after(err: Error, deadline: Option<Deadline>) -> Error {
    match deadline {
        Some(deadline) if err.is_outcome_uncertain() => {
            let left = deadline
                .passed_at
                .saturating_duration_since(tokio::time::Instant::now());
            err.with_retry_after(Some(left))
        }
        _ => err,
    }
}

/// The time to live and the keys of the lease `id`.
async fn state_of(keys: &SpaceNames, id: &str) -> Result<Option<SessionState>> {
    let names = keys.names_of(id);
    let state = keys
        .backend()
        .run_idempotent(SessionLeaseStep(keys.lease(id, &names)))
        .await?;
    Ok(state.map(|mut state| {
        state.names.sort();
        SessionState {
            time_to_live: Duration::from_millis(state.ttl_ms),
            keys: state.names,
        }
    }))
}
