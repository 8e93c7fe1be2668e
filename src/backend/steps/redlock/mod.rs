//! The Redlock group's own step, on each of its nodes: its fencing token written back to the
//! node's counter. Every other step on a node is the fenced lock's (a Redlock node holds a
//! fenced lock's lease key and counter).

mod memory;
mod redis;

use super::Step;

/// Raises the counter at `counter_key` to at least `token`, never lowering it: the group's
/// token, written back to the nodes that granted it, so that every later majority, which
/// shares one of them, takes a greater one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RedlockRaiseStep<'a> {
    /// The user key of the node's counter (the backend applies its prefix).
    pub(crate) counter_key: &'a [u8],
    /// The group's fencing token, from 1 to `i64::MAX`.
    pub(crate) token: u64,
}

impl Step for RedlockRaiseStep<'_> {
    const PRIMITIVE: &'static str = "redlock";
    const NAME: &'static str = "redlock_raise";
    /// Always `()`: the counter is at least the token once it answers.
    type Reply = ();
}
