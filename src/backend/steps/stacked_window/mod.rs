//! The stacked fixed-window step, shared by both backends: several fixed windows on one
//! client key, checked together and counted all or nothing.

mod memory;
mod redis;

use super::Step;
/// One stacked acquisition, on a physical key chosen by the limiter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StackedWindowStep<'a> {
    /// The user key (the backend applies its prefix).
    pub(crate) key: &'a [u8],
    /// Permits asked for; 0 probes without consuming or creating anything.
    pub(crate) permits: u64,
    /// Per policy, in order: (permits per window, at least 1; window in whole ms, at least
    /// 1). The policy's index names its window in the stored state.
    pub(crate) windows: &'a [(u64, u64)],
    /// The shadow policies, bit `i` for policy `i`: counted only when they admit, and never
    /// the reason of a rejection.
    pub(crate) shadows: u32,
}

/// One policy's window after the step, from the backend's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WindowReply {
    /// The window's count after the step (0 when no window is under way).
    pub(crate) count: u64,
    /// Milliseconds until the window ends; `None` when no window is under way.
    pub(crate) ttl_ms: Option<u64>,
}

/// The step's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StackedWindowReply {
    /// Whether the permits were counted, in every window.
    pub(crate) granted: bool,
    /// One per policy, in the step's order.
    pub(crate) windows: Vec<WindowReply>,
    /// The shadow policies that would have rejected the request, bit `i` for policy `i`.
    pub(crate) shadow_rejected: u32,
}

impl Step for StackedWindowStep<'_> {
    const PRIMITIVE: &'static str = "stacked_window";
    const NAME: &'static str = "stacked_window";
    type Reply = StackedWindowReply;
}
