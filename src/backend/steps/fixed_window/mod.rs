//! The fixed-window step, shared by both backends: count permits in a window that the
//! first request of the window starts.

mod memory;
mod redis;

use super::Step;
/// One fixed-window acquisition, on a physical key chosen by the limiter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FixedWindowStep<'a> {
    /// The user key (the backend applies its prefix).
    pub(crate) key: &'a [u8],
    /// Permits asked for; 0 probes without consuming or creating anything.
    pub(crate) permits: u64,
    /// Permits per window, at least 1.
    pub(crate) limit: u64,
    /// The window in whole milliseconds, at least 1.
    pub(crate) window_ms: u64,
}

/// The step's answer, from the backend's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FixedWindowReply {
    /// Whether the permits were counted.
    pub(crate) granted: bool,
    /// The window's count after the step.
    pub(crate) count: u64,
    /// Milliseconds until the window ends; `None` when no window is active.
    pub(crate) ttl_ms: Option<u64>,
    /// Milliseconds until the window's permits are free again; `None` when no window is
    /// active. Redis keeps a key until strictly after its expiry time, one millisecond past
    /// its TTL; the memory backend frees it at the deadline itself.
    pub(crate) free_in_ms: Option<u64>,
}

impl Step for FixedWindowStep<'_> {
    type Reply = FixedWindowReply;
}
