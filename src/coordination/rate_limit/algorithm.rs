//! The algorithms a [`RateLimiter`](super::RateLimiter) can run.

use super::{FixedWindow, Gcra, RateLimitDecision, RateLimitPolicy, SlidingWindow, TokenBucket};
use crate::error::Result;

/// One of the crate's rate-limit algorithms, each decided by one atomic backend step.
#[derive(Clone, Debug)]
pub(crate) enum Algorithm {
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    TokenBucket(TokenBucket),
    Gcra(Gcra),
}

impl Algorithm {
    pub(crate) fn policy(&self) -> &RateLimitPolicy {
        match self {
            Algorithm::FixedWindow(limiter) => limiter.policy(),
            Algorithm::SlidingWindow(limiter) => limiter.policy(),
            Algorithm::TokenBucket(limiter) => limiter.policy(),
            Algorithm::Gcra(limiter) => limiter.policy(),
        }
    }

    pub(crate) async fn acquire(&self, key: &[u8], permits: u64) -> Result<RateLimitDecision> {
        match self {
            Algorithm::FixedWindow(limiter) => limiter.acquire(key, permits).await,
            Algorithm::SlidingWindow(limiter) => limiter.acquire(key, permits).await,
            Algorithm::TokenBucket(limiter) => limiter.acquire(key, permits).await,
            Algorithm::Gcra(limiter) => limiter.acquire(key, permits).await,
        }
    }
}

macro_rules! from_algorithm {
    ($($variant:ident),+) => {
        $(
            impl From<$variant> for Algorithm {
                fn from(limiter: $variant) -> Self {
                    Algorithm::$variant(limiter)
                }
            }

            impl From<$variant> for super::RateLimiter {
                fn from(limiter: $variant) -> Self {
                    super::RateLimiter::new(Algorithm::$variant(limiter))
                }
            }
        )+
    };
}

from_algorithm!(FixedWindow, SlidingWindow, TokenBucket, Gcra);
