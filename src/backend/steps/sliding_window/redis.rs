//! The sliding-window step on Redis: one Lua script over one hash of segments.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::rate_limit_reply::{RateLimitReply, reply_parts};
use crate::backend::steps::sliding_window::SlidingWindowStep;
use crate::error::Result;

static SLIDING_WINDOW: LazyLock<Script> = script!(writes, "sliding_window", "sliding_window.lua");

impl RedisBackend {
    /// Runs one sliding-window step.
    pub(super) async fn sliding_window(
        &self,
        step: SlidingWindowStep<'_>,
    ) -> Result<RateLimitReply> {
        let reply = self
            .eval_value(
                &SLIDING_WINDOW,
                &[step.key],
                (step.permits, step.limit, step.window_ms, step.segment_ms),
            )
            .await
            .and_then(|reply| SLIDING_WINDOW.decode(reply, &[step.key]))?;
        let (granted, remaining, reset_after_ms, retry_after_ms) = reply_parts(reply)?;
        Ok(RateLimitReply {
            granted,
            remaining,
            reset_after_ms,
            retry_after_ms,
        })
    }
}
