//! The token-bucket step on Redis: one Lua script.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::rate_limit_reply::{RateLimitReply, reply_parts};
use crate::backend::steps::token_bucket::TokenBucketStep;
use crate::error::Result;

static TOKEN_BUCKET: LazyLock<Script> = script!(writes, "token_bucket", "token_bucket.lua");

impl RedisBackend {
    /// Runs one token-bucket step.
    pub(super) async fn token_bucket(&self, step: TokenBucketStep<'_>) -> Result<RateLimitReply> {
        let reply = self
            .eval_value(
                &TOKEN_BUCKET,
                &[step.key],
                (
                    step.permits,
                    step.limit,
                    step.tokens_per_period,
                    step.period_ms,
                ),
            )
            .await
            .and_then(|reply| TOKEN_BUCKET.decode(reply, &[step.key]))?;
        let (granted, remaining, reset_after_ms, retry_after_ms) = reply_parts(reply)?;
        Ok(RateLimitReply {
            granted,
            remaining,
            reset_after_ms,
            retry_after_ms,
        })
    }
}
