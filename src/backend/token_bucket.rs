//! The token-bucket step, shared by both backends: a bucket of at most `limit` tokens that
//! gains `tokens_per_period` tokens at the end of every whole period.

use crate::backend::Backend;
use crate::backend::rate_limit_reply::RateLimitReply;
use crate::error::Result;

/// One token-bucket acquisition, on a physical key chosen by the limiter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TokenBucketStep<'a> {
    /// The user key (the backend applies its prefix).
    pub(crate) key: &'a [u8],
    /// Tokens asked for, at most `limit + 1`; 0 probes without consuming or creating anything.
    pub(crate) permits: u64,
    /// The bucket's capacity, 1 ..= 2^53 - 1.
    pub(crate) limit: u64,
    /// Tokens added per period, 1 ..= `limit`.
    pub(crate) tokens_per_period: u64,
    /// The period in whole milliseconds, at least 1; refilling an empty bucket takes at most
    /// 2^52 ms, so every time the step computes, server clock included, is exact in a Lua
    /// double.
    pub(crate) period_ms: u64,
}

impl Backend {
    /// Runs one token-bucket step atomically.
    pub(crate) async fn token_bucket(&self, step: TokenBucketStep<'_>) -> Result<RateLimitReply> {
        match self {
            // Boxed: the redis-rs futures below are deeply nested types, and callers nest
            // this one further (timeouts, layers, user code).
            Backend::Redis(redis) => Box::pin(redis.token_bucket(step)).await,
            Backend::Memory(memory) => memory.token_bucket(step),
        }
    }
}
