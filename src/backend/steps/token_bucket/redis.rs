//! The token-bucket step on Redis: one Lua script.

use std::sync::LazyLock;

use redis::Value;

use crate::backend::redis::{RedisBackend, Script, packed_grant};
use crate::backend::steps::rate_limit_reply::RateLimitReply;
use crate::backend::steps::token_bucket::TokenBucketStep;
use crate::error::{Error, ErrorKind, Result};

static TOKEN_BUCKET: LazyLock<Script> =
    LazyLock::new(|| Script::new("token_bucket", include_str!("token_bucket.lua")));

impl RedisBackend {
    /// Runs one token-bucket step.
    pub(super) async fn token_bucket(&self, step: TokenBucketStep<'_>) -> Result<RateLimitReply> {
        let reply: Value = self
            .eval(
                &TOKEN_BUCKET,
                &[step.key],
                (
                    step.permits,
                    step.limit,
                    step.tokens_per_period,
                    step.period_ms,
                ),
            )
            .await?;
        let (status, tokens, full_in, retry): (i64, u64, u64, i64) =
            packed_grant::four_values(reply, "token_bucket")?;
        if status < 0 {
            return Err(Error::new(
                ErrorKind::CorruptState,
                format!(
                    "the token bucket {:?} is not a \"<tokens>:<ms>\" string",
                    String::from_utf8_lossy(step.key)
                ),
            ));
        }
        Ok(RateLimitReply {
            granted: status == 1,
            remaining: tokens,
            reset_after_ms: full_in,
            retry_after_ms: u64::try_from(retry).ok(),
        })
    }
}
