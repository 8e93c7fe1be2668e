//! The GCRA step on Redis: one Lua script over one string key.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::RedisStep;
use crate::backend::steps::gcra::{GcraStep, reply_from_micros};
use crate::backend::steps::rate_limit_reply::{RateLimitReply, reply_parts};
use crate::error::Result;

static GCRA: LazyLock<Script> = script!(writes, "gcra", "gcra.lua");

/// Runs one GCRA step.
impl RedisStep for GcraStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<RateLimitReply> {
        let args = (self.permits, self.interval_us, self.burst);
        let reply = redis.script_reply(&GCRA, &[self.key], args).await?;
        // A grant's time ahead is at most the tolerance: the script packs by one more.
        let radix = self.tolerance_us().saturating_add(1);
        let (granted, remaining, reset_after_us, retry_after_us) = reply_parts(reply, radix)?;
        Ok(reply_from_micros(
            granted,
            remaining,
            reset_after_us,
            retry_after_us,
        ))
    }
}
