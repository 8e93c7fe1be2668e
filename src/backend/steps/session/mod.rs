//! The session steps, shared by both backends: leases with attached keys in one space (see
//! `session.lua` for the layout). A lease is live while its expiry is after now, and so is
//! every key attached to it, whose expiry is always its lease's: each step that sets one
//! sets the other, in the same step.

mod memory;
mod redis;

use super::Step;

/// The keys of one space (user keys: the backend applies its prefix), all in one slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SpaceKeys<'a> {
    /// The leases, by expiry.
    pub(crate) leases: &'a [u8],
    /// The attached keys, by expiry.
    pub(crate) expiries: &'a [u8],
    /// The attached keys' leases and values.
    pub(crate) entries: &'a [u8],
}

/// One lease of a space: the space's keys, the lease's key set and its id.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseKeys<'a> {
    pub(crate) space: SpaceKeys<'a>,
    /// The names put with the lease.
    pub(crate) names: &'a [u8],
    /// The lease id: its owner token, 32 hex digits.
    pub(crate) id: &'a str,
}

/// A new lease with no keys, unless the id holds a live one (a grant delivered twice).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionGrantStep<'a> {
    pub(crate) lease: LeaseKeys<'a>,
    pub(crate) lease_ms: u64,
    /// The server time (ms since the epoch) after which the step changes nothing; 0: none.
    pub(crate) not_after_ms: u64,
}

/// What a grant answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionGrantReply {
    Granted,
    /// It reached the server after its deadline: nothing changed.
    Late,
}

/// The lease and every key attached to it get a new expiry, if the lease is live.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionKeepAliveStep<'a> {
    pub(crate) lease: LeaseKeys<'a>,
    pub(crate) lease_ms: u64,
}

/// Removes the lease and its keys: whether it was live.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionRevokeStep<'a>(pub(crate) LeaseKeys<'a>);

/// Whether the lease is live.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionVerifyStep<'a>(pub(crate) LeaseKeys<'a>);

/// Attaches a name to the lease with a value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionPutStep<'a> {
    pub(crate) lease: LeaseKeys<'a>,
    pub(crate) name: &'a [u8],
    pub(crate) value: &'a [u8],
    /// The most names the lease may hold.
    pub(crate) max_keys: u32,
    /// Only if no other live lease holds the name (a claim).
    pub(crate) only_if_free: bool,
    /// The server time after which the put changes nothing; 0: none.
    pub(crate) not_after_ms: u64,
}

/// What a put answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionPutReply {
    Put,
    /// No live lease under the id: nothing written.
    NoLease,
    /// The lease holds the most names, and this is not one: nothing written.
    Full,
    /// A claim of a name another live lease holds: nothing written.
    Taken,
    /// It reached the server after its deadline: nothing written.
    Late,
}

/// What a delete answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionDeleteReply {
    /// The name was this lease's, live, and is gone.
    Deleted,
    /// Not this lease's, or not live (a dead one of this lease's is removed all the same).
    NotLive,
    /// It reached the server after its deadline: nothing removed.
    Late,
}

/// Detaches and removes a name attached to the lease: whether it was live.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionDeleteStep<'a> {
    pub(crate) lease: LeaseKeys<'a>,
    pub(crate) name: &'a [u8],
    /// The server time after which the delete changes nothing; 0: none.
    pub(crate) not_after_ms: u64,
}

/// The value of a live attached key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionGetStep<'a> {
    pub(crate) space: SpaceKeys<'a>,
    pub(crate) name: &'a [u8],
}

/// The live attached keys, the soonest to expire first, at most `limit`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionListStep<'a> {
    pub(crate) space: SpaceKeys<'a>,
    pub(crate) limit: u32,
}

/// A live lease's time to live and its names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionLeaseStep<'a>(pub(crate) LeaseKeys<'a>);

/// What a lease is now: its time to live (ms) and the names attached to it, in no order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseState {
    pub(crate) ttl_ms: u64,
    pub(crate) names: Vec<Vec<u8>>,
}

impl Step for SessionGrantStep<'_> {
    const PRIMITIVE: &'static str = "session";
    const NAME: &'static str = "session_grant";
    type Reply = SessionGrantReply;
}

impl Step for SessionKeepAliveStep<'_> {
    const PRIMITIVE: &'static str = "session";
    const NAME: &'static str = "session_keep_alive";
    /// Whether the lease was live (and is renewed).
    type Reply = bool;
}

impl Step for SessionRevokeStep<'_> {
    const PRIMITIVE: &'static str = "session";
    const NAME: &'static str = "session_revoke";
    /// Whether the lease was live.
    type Reply = bool;
}

impl Step for SessionVerifyStep<'_> {
    const PRIMITIVE: &'static str = "session";
    const NAME: &'static str = "session_verify";
    type Reply = bool;
}

impl Step for SessionPutStep<'_> {
    const PRIMITIVE: &'static str = "session";
    const NAME: &'static str = "session_put";
    type Reply = SessionPutReply;
}

impl Step for SessionDeleteStep<'_> {
    const PRIMITIVE: &'static str = "session";
    const NAME: &'static str = "session_delete";
    type Reply = SessionDeleteReply;
}

impl Step for SessionGetStep<'_> {
    const PRIMITIVE: &'static str = "session";
    const NAME: &'static str = "session_get";
    type Reply = Option<Vec<u8>>;
}

impl Step for SessionListStep<'_> {
    const PRIMITIVE: &'static str = "session";
    const NAME: &'static str = "session_list";
    /// Each live name and its value.
    type Reply = Vec<(Vec<u8>, Vec<u8>)>;
}

impl Step for SessionLeaseStep<'_> {
    const PRIMITIVE: &'static str = "session";
    const NAME: &'static str = "session_lease";
    /// `None`: no live lease under the id.
    type Reply = Option<LeaseState>;
}
