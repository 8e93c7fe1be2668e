//! The read-write lease steps, shared by both backends: one sorted set per lease, holding the
//! writer, the readers and the waiters, each under its own token or waiter id with its own
//! deadline on the backend's clock (see `rw_lease.lua` for the layout).
//!
//! Every step on a held lease touches that holder's entry alone, and finds it by token
//! whether it reads or writes: a renewal, a release or a downgrade never changes another
//! holder's deadline, and the key always outlives its latest holder.

mod memory;
mod redis;

use super::Step;

/// One immediate acquisition of a read or a write lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RwAcquireStep<'a> {
    /// The user key of the lease set (the backend applies its prefix).
    pub(crate) key: &'a [u8],
    /// The user key of the writers' fencing counter, in the set's slot: a write lease takes
    /// its next token (see `fencing_counter.lua`); a read lease does not touch it.
    pub(crate) counter: &'a [u8],
    /// A write lease (exclusive) rather than a read lease (shared).
    pub(crate) write: bool,
    /// The new lease's owner token.
    pub(crate) token: &'a str,
    /// Whole milliseconds until the lease expires, from 1 to 2^40.
    pub(crate) lease_ms: u64,
    /// The server time (ms since the epoch) after which the step is a no-op that answers
    /// [`RwAcquireReply::Late`]; 0 for none.
    pub(crate) not_after_ms: u64,
    /// The waiter id under which a refused acquisition records that it waits, and for how
    /// long (ms, 1 to 2^40), for the phase-fair order (see `rw_lease.lua`); its grant
    /// removes the record.
    pub(crate) waiting: Option<(&'a str, u64)>,
}

/// The acquisition's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RwAcquireReply {
    /// The lease is held under the step's token; a write lease with its fencing token, from
    /// 1 to `i64::MAX`.
    Granted { fencing_token: Option<u64> },
    /// Others hold it, or wait ahead of it; nothing changed but the refused acquisition's
    /// waiting record and what had expired. `retry_after_ms`: how long until expiries alone
    /// let it in.
    Busy { retry_after_ms: u64 },
    /// The step reached the server after its deadline; nothing changed.
    Late,
}

/// A step on a held lease: its set and its owner token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RwStep<'a> {
    /// The user key of the lease set.
    pub(crate) key: &'a [u8],
    /// The lease's owner token.
    pub(crate) token: &'a str,
}

/// Gives the token's lease, read or write, a new deadline: `true` when renewed, `false` when
/// it is gone (nothing changed).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RwRenewStep<'a> {
    /// The lease and its owner token.
    pub(crate) lease: RwStep<'a>,
    /// Whole milliseconds until the renewed lease expires, from 1 to 2^40.
    pub(crate) lease_ms: u64,
}

/// Whether the token holds a live lease, and which; changes nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RwVerifyStep<'a>(pub(crate) RwStep<'a>);

/// What the token holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RwHeld {
    /// Nothing: expired, released, or never granted.
    Nothing,
    /// A read lease.
    Read,
    /// The write lease.
    Write,
}

/// Removes the token's lease, read or write, or, given a waiter id, its waiting record:
/// `true` when one was removed, `false` when there was none.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RwReleaseStep<'a>(pub(crate) RwStep<'a>);

/// Turns the token's write lease into a read lease with the same deadline, in one step.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RwDowngradeStep<'a>(pub(crate) RwStep<'a>);

/// What a downgrade found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RwDowngradeReply {
    /// The write lease is now a read lease.
    Downgraded,
    /// It was a read lease already (an earlier downgrade without an answer applied).
    AlreadyRead,
    /// The token holds nothing.
    NotHeld,
}

impl Step for RwAcquireStep<'_> {
    const PRIMITIVE: &'static str = "rw_lease";
    const NAME: &'static str = "rw_acquire";
    type Reply = RwAcquireReply;
}

impl Step for RwRenewStep<'_> {
    const PRIMITIVE: &'static str = "rw_lease";
    const NAME: &'static str = "rw_renew";
    type Reply = bool;
}

impl Step for RwVerifyStep<'_> {
    const PRIMITIVE: &'static str = "rw_lease";
    const NAME: &'static str = "rw_verify";
    type Reply = RwHeld;
}

impl Step for RwReleaseStep<'_> {
    const PRIMITIVE: &'static str = "rw_lease";
    const NAME: &'static str = "rw_release";
    type Reply = bool;
}

impl Step for RwDowngradeStep<'_> {
    const PRIMITIVE: &'static str = "rw_lease";
    const NAME: &'static str = "rw_downgrade";
    type Reply = RwDowngradeReply;
}
