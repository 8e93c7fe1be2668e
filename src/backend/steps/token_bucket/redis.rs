//! The token-bucket step on Redis: one Lua script.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::RedisStep;
use crate::backend::steps::rate_limit_reply::{RateLimitReply, reply_parts};
use crate::backend::steps::token_bucket::TokenBucketStep;
use crate::error::Result;

static TOKEN_BUCKET: LazyLock<Script> = script!(writes, "token_bucket", "token_bucket.lua");

/// Runs one token-bucket step.
impl RedisStep for TokenBucketStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<RateLimitReply> {
        let args = (
            self.permits,
            self.limit,
            self.tokens_per_period,
            self.period_ms,
        );
        let reply = redis.script_reply(&TOKEN_BUCKET, &[self.key], args).await?;
        // The time until full is at most an empty bucket's refill: the script packs by
        // one more.
        let radix = self
            .limit
            .div_ceil(self.tokens_per_period.max(1))
            .saturating_mul(self.period_ms)
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
