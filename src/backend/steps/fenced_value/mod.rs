//! The fenced value's steps, shared by both backends: one hash holding a value and the
//! highest fencing token a write carried; a write with a lower token changes nothing.

mod memory;
mod redis;

use super::Step;

/// Stores `value` if `token` is at least the highest token the value has seen, and records
/// `token` as the highest.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FencedWriteStep<'a> {
    /// The user key of the value (the backend applies its prefix).
    pub(crate) key: &'a [u8],
    /// The writer's fencing token, from 1 to `i64::MAX`.
    pub(crate) token: u64,
    /// What to store.
    pub(crate) value: &'a [u8],
    /// The server time (ms since the epoch) after which the write changes nothing; 0 for
    /// none.
    pub(crate) not_after_ms: u64,
}

/// What a write found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FencedWriteReply {
    /// Stored; `token` is now the highest.
    Written,
    /// A higher token wrote before: nothing changed.
    Stale { highest: u64 },
    /// The write reached the server after its deadline: nothing changed.
    Late,
}

/// The value and the highest token; changes nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FencedReadStep<'a> {
    /// The user key of the value.
    pub(crate) key: &'a [u8],
}

impl Step for FencedWriteStep<'_> {
    const PRIMITIVE: &'static str = "fenced_value";
    const NAME: &'static str = "fenced_write";
    type Reply = FencedWriteReply;
}

impl Step for FencedReadStep<'_> {
    const PRIMITIVE: &'static str = "fenced_value";
    const NAME: &'static str = "fenced_read";
    /// The highest token and the value its write stored; `None` before the first write.
    type Reply = Option<(u64, Vec<u8>)>;
}
