//! The token-bucket step, shared by both backends: a bucket of at most `limit` tokens that
//! gains `tokens_per_period` tokens at the end of every whole period.

mod memory;
mod redis;

use super::Step;
use crate::backend::steps::rate_limit_reply::RateLimitReply;

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

impl Step for TokenBucketStep<'_> {
    const PRIMITIVE: &'static str = "token_bucket";
    const NAME: &'static str = "token_bucket";
    type Reply = RateLimitReply;
}
