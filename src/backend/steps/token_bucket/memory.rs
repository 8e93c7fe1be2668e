//! The token-bucket step in process, with the same answers as the Lua script.

use std::time::Duration;

use crate::backend::memory::clock::millis_up;
use crate::backend::memory::{MemoryBackend, Value};
use crate::backend::steps::MemoryStep;
use crate::backend::steps::rate_limit_reply::RateLimitReply;
use crate::backend::steps::token_bucket::TokenBucketStep;
use crate::error::Result;

/// Runs one token-bucket step atomically.
impl MemoryStep for TokenBucketStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<RateLimitReply> {
        let step = self;
        let key = memory.physical_key(step.key);
        let period = Duration::from_millis(step.period_ms);
        memory.step(|store, now| {
            let (mut tokens, mut refilled_at) = match store.get_mut(&key, now) {
                None => (step.limit, now),
                Some(entry) => match entry.value {
                    // Capped like the script's: a limiter rebuilt with a smaller limit.
                    Value::Bucket {
                        tokens,
                        refilled_at,
                    } => (tokens.min(step.limit), refilled_at),
                    _ => {
                        return Err(crate::backend::memory::other_state(
                            step.key,
                            "token-bucket",
                        ));
                    }
                },
            };
            let elapsed = now - refilled_at;
            let periods = u64::try_from(elapsed.as_nanos() / period.as_nanos()).unwrap_or(u64::MAX);
            if periods >= (step.limit - tokens).div_ceil(step.tokens_per_period) {
                tokens = step.limit;
            } else {
                // Whole periods only: the partial period under way is kept.
                tokens += periods * step.tokens_per_period;
                refilled_at += Duration::from_millis(periods * step.period_ms);
            }
            if tokens == step.limit {
                // A full bucket has no period under way, as when its key has expired.
                refilled_at = now;
            }
            let until_holding = |tokens: u64, n: u64| -> Duration {
                let periods = (n - tokens).div_ceil(step.tokens_per_period);
                (refilled_at + Duration::from_millis(periods * step.period_ms)) - now
            };
            let until_full = |tokens: u64| {
                if tokens < step.limit {
                    until_holding(tokens, step.limit)
                } else {
                    Duration::ZERO
                }
            };
            if step.permits > tokens {
                return Ok(RateLimitReply {
                    granted: false,
                    remaining: tokens,
                    reset_after_ms: millis_up(until_full(tokens)),
                    retry_after_ms: (step.permits <= step.limit)
                        .then(|| millis_up(until_holding(tokens, step.permits))),
                });
            }
            if step.permits > 0 {
                tokens -= step.permits;
                let value = Value::Bucket {
                    tokens,
                    refilled_at,
                };
                store.insert(&key, value, Some(now + until_full(tokens)), now)?;
            }
            Ok(RateLimitReply {
                granted: true,
                remaining: tokens,
                reset_after_ms: millis_up(until_full(tokens)),
                retry_after_ms: None,
            })
        })
    }
}
