//! The countdown latch steps, shared by both backends: one key per latch holding its current
//! generation's id, its count and its count-downs' ids, and one beside it (in its slot)
//! remembering the generations that completed.
//!
//! A generation is named by a random id that the steps compare for equality only: a
//! count-down of any other generation (replaced, or gone with its key) changes nothing, and
//! the count never goes below zero. A count-down carries an id of its own, which its
//! generation records: delivered twice, it counts once and answers the same. Each step
//! validates both keys before it writes.
//!
//! Out of memory (Redis's `OOM`), a generation is not started, while a count-down still
//! counts: it grows the latch by its own record only, and refusing it would leave the
//! generation one short for good.

mod memory;
mod redis;

use super::Step;

/// The largest count a latch holds: 2^53 - 1, which a Lua number (a double) holds exactly.
pub(crate) const MAX_COUNT: u64 = (1 << 53) - 1;

/// How long a latch remembers its completed generations after the latest completion.
pub(crate) const COMPLETIONS_KEPT_FOR_MS: u64 = 10 * 60 * 1000;

/// How many of its latest completed generations a latch remembers at most.
pub(crate) const COMPLETIONS_KEPT: u64 = 1000;

/// A latch's two keys (user keys: the backend applies its prefix), in one slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LatchKeys<'a> {
    /// The latch: its current generation.
    pub(crate) latch: &'a [u8],
    /// The generations that completed.
    pub(crate) completions: &'a [u8],
}

/// Starts a generation: if no latch exists, or replacing the one that does (`replace`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LatchSetStep<'a> {
    /// The latch's keys.
    pub(crate) keys: LatchKeys<'a>,
    /// The new generation's id.
    pub(crate) generation: &'a str,
    /// Its count, at most [`MAX_COUNT`] (0: complete at once, and remembered so).
    pub(crate) count: u64,
    /// Its expiry in ms on the backend's clock; `None` for none.
    pub(crate) expiry_ms: Option<u64>,
    /// Whether to replace a latch that exists.
    pub(crate) replace: bool,
}

/// What a [`LatchSetStep`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LatchSetReply {
    /// The generation is the latch's now.
    Set,
    /// A latch exists, and the step was not to replace it: nothing changed.
    Exists,
}

/// One count-down of a generation, counted once however often it is delivered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LatchCountDownStep<'a> {
    /// The latch's keys.
    pub(crate) keys: LatchKeys<'a>,
    /// The generation counted down.
    pub(crate) generation: &'a str,
    /// The count-down's own id (random), which the generation records.
    pub(crate) id: &'a str,
}

/// What a [`LatchCountDownStep`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LatchCountDownReply {
    /// Counted down: the count left. Also when this count-down had counted already (the
    /// count it left then; nothing changed), even once its generation, completed by it, is
    /// no longer the latch's.
    Counted { remaining: u64 },
    /// The count was zero already, or the generation completed (by another count-down) and
    /// is no longer the latch's: nothing changed.
    Completed,
    /// The latch holds another generation, or none, and this one did not complete: nothing
    /// changed.
    Stale,
}

/// Reads the latch's current generation, or whether a generation it no longer holds
/// completed; changes nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LatchReadStep<'a> {
    /// The latch's keys.
    pub(crate) keys: LatchKeys<'a>,
    /// The generation asked about; `None` for the current one.
    pub(crate) generation: Option<&'a str>,
}

/// What a [`LatchReadStep`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LatchRead {
    /// The current generation (the one asked about, if one was).
    Current(LatchState),
    /// The generation asked about is no longer the latch's, and it completed.
    Completed,
    /// No latch, or the generation asked about is another that did not complete.
    None,
}

/// A latch's current generation and its count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LatchState {
    pub(crate) generation: String,
    pub(crate) count: u64,
}

impl Step for LatchSetStep<'_> {
    const PRIMITIVE: &'static str = "latch";
    const NAME: &'static str = "latch_set";
    type Reply = LatchSetReply;
}

impl Step for LatchCountDownStep<'_> {
    const PRIMITIVE: &'static str = "latch";
    const NAME: &'static str = "latch_count_down";
    type Reply = LatchCountDownReply;
}

impl Step for LatchReadStep<'_> {
    const PRIMITIVE: &'static str = "latch";
    const NAME: &'static str = "latch_read";
    type Reply = LatchRead;
}
