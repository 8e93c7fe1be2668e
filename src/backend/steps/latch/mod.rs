//! The countdown latch steps, shared by both backends: one key per latch holding its current
//! generation's id and count.
//!
//! A generation is named by a random id that the steps compare for equality only: a
//! count-down of any other generation (replaced, or gone with its key) changes nothing, and
//! the count never goes below zero. Each step validates the key before it writes.

mod memory;
mod redis;

use super::Step;

/// The largest count a latch holds: 2^53 - 1, which a Lua number (a double) holds exactly.
pub(crate) const MAX_COUNT: u64 = (1 << 53) - 1;

/// Starts a generation: if no latch exists, or replacing the one that does (`replace`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LatchSetStep<'a> {
    /// The user key of the latch (the backend applies its prefix).
    pub(crate) key: &'a [u8],
    /// The new generation's id.
    pub(crate) generation: &'a str,
    /// Its count, at most [`MAX_COUNT`] (0: complete at once).
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

/// One count-down of a generation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LatchCountDownStep<'a> {
    /// The user key of the latch.
    pub(crate) key: &'a [u8],
    /// The generation counted down.
    pub(crate) generation: &'a str,
}

/// What a [`LatchCountDownStep`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LatchCountDownReply {
    /// Counted down: the count left.
    Counted { remaining: u64 },
    /// The count was zero already: nothing changed.
    Completed,
    /// The latch holds another generation, or none: nothing changed.
    Stale,
}

/// Reads the latch's generation and count; changes nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LatchReadStep<'a> {
    /// The user key of the latch.
    pub(crate) key: &'a [u8],
}

/// A latch's current generation and its count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LatchState {
    pub(crate) generation: String,
    pub(crate) count: u64,
}

impl Step for LatchSetStep<'_> {
    type Reply = LatchSetReply;
}

impl Step for LatchCountDownStep<'_> {
    type Reply = LatchCountDownReply;
}

impl Step for LatchReadStep<'_> {
    /// `None` when no latch exists.
    type Reply = Option<LatchState>;
}
