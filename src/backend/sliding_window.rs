//! The sliding-window step, shared by both backends: count permits per segment of a window
//! that slides with the backend's clock, and free each segment's permits when it leaves.

use crate::backend::Backend;
use crate::backend::rate_limit_reply::RateLimitReply;
use crate::error::Result;

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

impl Backend {
    /// Runs one sliding-window step atomically.
    pub(crate) async fn sliding_window(
        &self,
        step: SlidingWindowStep<'_>,
    ) -> Result<RateLimitReply> {
        match self {
            // Boxed: the redis-rs futures below are deeply nested types, and callers nest
            // this one further (timeouts, layers, user code).
            Backend::Redis(redis) => Box::pin(redis.sliding_window(step)).await,
            Backend::Memory(memory) => memory.sliding_window(step),
        }
    }
}
