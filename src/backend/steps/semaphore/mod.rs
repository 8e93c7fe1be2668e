//! The semaphore steps, shared by both backends: permits held by owner token in one or two
//! sets (one slot), each set with the capacity its permits were taken under.
//!
//! A permit expires at an absolute time on the backend's clock (or never); expired permits
//! are pruned by the next step that touches their set. A set disappears with its last permit,
//! capacity included, and until then its storage lives exactly as long as its permits.

mod memory;
mod redis;

use super::Step;

/// One acquisition of a permit in every set of `keys`, or in none.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SemaphoreAcquireStep<'a> {
    /// The user keys of the sets (the backend applies its prefix), one or two, in one slot.
    pub(crate) keys: &'a [Vec<u8>],
    /// The capacity each set must have, in the order of `keys`, each at least 1.
    pub(crate) capacities: &'a [u32],
    /// The new permit's owner token.
    pub(crate) token: &'a str,
    /// Whole milliseconds until the permit expires, at least 1; `None` for no expiry.
    pub(crate) expiry_ms: Option<u64>,
    /// The server time (ms since the epoch) after which the step is a no-op that answers
    /// [`SemaphoreAcquireReply::Late`]; 0 for none.
    pub(crate) not_after_ms: u64,
}

/// The acquisition's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SemaphoreAcquireReply {
    /// The permit is held in every set.
    Granted,
    /// At least one set is full; nothing was taken. `retry_after_ms` is how long until
    /// expiries alone free a slot in every full set; `None` when a full set's permits never
    /// expire.
    Full { retry_after_ms: Option<u64> },
    /// The set at index `key` has live permits taken under capacity `stored`, which differs
    /// from the one asked for; nothing was taken.
    CapacityMismatch { key: usize, stored: u32 },
    /// The step reached the server after its deadline; nothing changed.
    Late,
}

/// A step on an existing permit: its sets and its owner token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PermitStep<'a> {
    /// The user keys of the permit's sets.
    pub(crate) keys: &'a [Vec<u8>],
    /// The permit's owner token.
    pub(crate) token: &'a str,
}

/// Removes the permit from its sets: `true` when it was still held.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PermitReleaseStep<'a>(pub(crate) PermitStep<'a>);

/// Gives a held permit a new expiry: `true` when renewed, `false` when it was no longer held
/// (it is then removed from every set).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PermitRenewStep<'a> {
    /// The permit's sets and owner token.
    pub(crate) permit: PermitStep<'a>,
    /// Whole milliseconds until the permit expires, at least 1; `None` for no expiry.
    pub(crate) expiry_ms: Option<u64>,
}

/// Whether the permit is held in every set, after pruning expired permits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PermitVerifyStep<'a>(pub(crate) PermitStep<'a>);

/// The live permits of each set, in the order of the keys; changes nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SemaphoreHeldStep<'a> {
    /// The user keys of the sets, in one slot.
    pub(crate) keys: &'a [Vec<u8>],
}

impl Step for SemaphoreAcquireStep<'_> {
    const PRIMITIVE: &'static str = "semaphore";
    const NAME: &'static str = "semaphore_acquire";
    type Reply = SemaphoreAcquireReply;
}

impl Step for PermitReleaseStep<'_> {
    const PRIMITIVE: &'static str = "semaphore";
    const NAME: &'static str = "permit_release";
    type Reply = bool;
}

impl Step for PermitRenewStep<'_> {
    const PRIMITIVE: &'static str = "semaphore";
    const NAME: &'static str = "permit_renew";
    type Reply = bool;
}

impl Step for PermitVerifyStep<'_> {
    const PRIMITIVE: &'static str = "semaphore";
    const NAME: &'static str = "permit_verify";
    type Reply = bool;
}

impl Step for SemaphoreHeldStep<'_> {
    const PRIMITIVE: &'static str = "semaphore";
    const NAME: &'static str = "semaphore_held";
    type Reply = Vec<u32>;
}
