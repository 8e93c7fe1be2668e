//! The fenced lock steps, shared by both backends: an expiring lease key that holds its
//! owner's token, and a counter key, in one slot, whose every increment is a fencing token,
//! kept while a token of its can matter (see `fencing_counter.lua`).
//!
//! The counter is validated before anything is written: it must be absent, or a decimal
//! integer from 0 to `i64::MAX - 1`. Anything else is corrupt state, reported
//! without creating a lease or touching the counter, because a fencing counter that went back
//! (or could) would hand out a token a protected resource has already seen.

mod memory;
mod redis;

use super::Step;
pub(crate) use super::lease_release::LeaseReleaseReply;
use crate::backend::redis::Replication;

/// One immediate acquisition: a lease for `token` and the next fencing token, or nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FencedAcquireStep<'a> {
    /// The user key of the lease (the backend applies its prefix).
    pub(crate) lease_key: &'a [u8],
    /// The user key of the counter, in the lease key's slot.
    pub(crate) counter_key: &'a [u8],
    /// The new lease's owner token.
    pub(crate) token: &'a str,
    /// Whole milliseconds until the lease expires, from 1 to 2^40.
    pub(crate) lease_ms: u64,
    /// The server time (ms since the epoch) after which the step is a no-op that answers
    /// [`FencedAcquireReply::Late`]; 0 for none.
    pub(crate) not_after_ms: u64,
    /// Redis only: what must confirm a grant before it is one (durable fencing), sent after
    /// the script on the same connection; `None` sends nothing more.
    pub(crate) replication: Option<&'a Replication>,
}

/// The acquisition's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FencedAcquireReply {
    /// The lease is held under the step's token; `fencing_token` is the counter's new value,
    /// from 1 to `i64::MAX`.
    Acquired { fencing_token: u64 },
    /// Another lease exists; nothing changed. `retry_after_ms` is its remaining time on the
    /// backend's clock, `None` when it has no expiry (set by something else than this lock).
    Held { retry_after_ms: Option<u64> },
    /// The step reached the server after its deadline; nothing changed.
    Late,
    /// The lease was taken under the step's token with `fencing_token`, but the replicas
    /// did not confirm it as the step's replication asks: `short` says what they did.
    Unconfirmed { fencing_token: u64, short: String },
}

/// A step on an existing lease: its key and its owner token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseStep<'a> {
    /// The user key of the lease.
    pub(crate) lease_key: &'a [u8],
    /// The lease's owner token.
    pub(crate) token: &'a str,
}

/// Gives a held lease a new expiry: `true` when renewed, `false` when it was not held under
/// the token (nothing changed).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseRenewStep<'a> {
    /// The lease and its owner token.
    pub(crate) lease: LeaseStep<'a>,
    /// Whole milliseconds until the renewed lease expires, from 1 to 2^40.
    pub(crate) lease_ms: u64,
}

/// Whether the lease is held under the token; changes nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseVerifyStep<'a>(pub(crate) LeaseStep<'a>);

/// Deletes the lease if it is held under the token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseReleaseStep<'a>(pub(crate) LeaseStep<'a>);

impl Step for FencedAcquireStep<'_> {
    const PRIMITIVE: &'static str = "fenced_lock";
    const NAME: &'static str = "fenced_acquire";
    type Reply = FencedAcquireReply;
}

impl Step for LeaseRenewStep<'_> {
    const PRIMITIVE: &'static str = "fenced_lock";
    const NAME: &'static str = "lease_renew";
    type Reply = bool;
}

impl Step for LeaseVerifyStep<'_> {
    const PRIMITIVE: &'static str = "fenced_lock";
    const NAME: &'static str = "lease_verify";
    type Reply = bool;
}

impl Step for LeaseReleaseStep<'_> {
    const PRIMITIVE: &'static str = "fenced_lock";
    const NAME: &'static str = "lease_release";
    type Reply = LeaseReleaseReply;
}
