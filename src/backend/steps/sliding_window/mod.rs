//! The sliding-window step, shared by both backends: count permits per segment of a window
//! that slides with the backend's clock, and free each segment's permits when it leaves.

mod memory;
mod redis;

use super::Step;
use crate::backend::steps::rate_limit_reply::RateLimitReply;

/// One sliding-window acquisition, on a physical key chosen by the limiter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlidingWindowStep<'a> {
    /// The user key (the backend applies its prefix).
    pub(crate) key: &'a [u8],
    /// Permits asked for; 0 probes without consuming or creating anything.
    pub(crate) permits: u64,
    /// Permits per window, at least 1.
    pub(crate) limit: u64,
    /// The window in whole milliseconds, a multiple of `segment_ms`.
    pub(crate) window_ms: u64,
    /// One segment in whole milliseconds, at least 1.
    pub(crate) segment_ms: u64,
}

impl Step for SlidingWindowStep<'_> {
    const PRIMITIVE: &'static str = "sliding_window";
    const NAME: &'static str = "sliding_window";
    type Reply = RateLimitReply;
}
