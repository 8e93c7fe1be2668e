//! The sliding-window step on Redis: one Lua script over one hash of segments.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::RedisStep;
use crate::backend::steps::rate_limit_reply::{RateLimitReply, reply_parts};
use crate::backend::steps::sliding_window::SlidingWindowStep;
use crate::error::Result;

static SLIDING_WINDOW: LazyLock<Script> = script!(writes, "sliding_window", "sliding_window.lua");

/// Runs one sliding-window step.
impl RedisStep for SlidingWindowStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<RateLimitReply> {
        let args = (self.permits, self.limit, self.window_ms, self.segment_ms);
        let reply = redis
            .script_reply(&SLIDING_WINDOW, &[self.key], args)
            .await?;
        // The time until the newest segment leaves the window is at most the window and a
        // segment: the script packs by one more.
        let radix = self
            .window_ms
            .saturating_add(self.segment_ms)
            .saturating_add(1);
        let (granted, remaining, reset_after_ms, retry_after_ms) = reply_parts(reply, radix)?;
        Ok(RateLimitReply {
            granted,
            remaining,
            reset_after_ms,
            retry_after_ms,
        })
    }
}
