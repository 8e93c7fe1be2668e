//! The GCRA step, shared by both backends: one theoretical arrival time (TAT) per key, in
//! integer microseconds.
//!
//! With emission interval `T` and burst `b`, a request of `n` permits conforms when
//! `max(TAT, now) + n·T − b·T ≤ now` (the "allow at = TAT − burst·T" formulation of
//! redis-cell, throttled and go-redis/redis_rate); it then moves the TAT to
//! `max(TAT, now) + n·T`. Everything is computed from `ahead = max(TAT − now, 0)`:
//! consuming needs `ahead + n·T ≤ b·T`.

mod memory;
mod redis;

use super::Step;
use crate::backend::steps::rate_limit_reply::RateLimitReply;

/// The largest burst window `b·T`, in microseconds (about 35.7 years). Lua numbers are
/// doubles: with it, `now + (b + 1)·T` stays far below 2^53 µs for centuries, so every TAT,
/// sum and quotient in the script is an exact integer.
pub(crate) const MAX_TOLERANCE_US: u64 = 1 << 50;

/// One GCRA acquisition, on a physical key chosen by the limiter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GcraStep<'a> {
    /// The user key (the backend applies its prefix).
    pub(crate) key: &'a [u8],
    /// Permits asked for, at most `burst + 1`; 0 probes without consuming or creating
    /// anything, `burst + 1` (or more) can never conform.
    pub(crate) permits: u64,
    /// The emission interval `T` in whole microseconds, at least 1.
    pub(crate) interval_us: u64,
    /// Permits that may be taken at once, at least 1; `burst · interval_us` is at most
    /// [`MAX_TOLERANCE_US`].
    pub(crate) burst: u64,
}

impl GcraStep<'_> {
    /// The burst window `b·T` in microseconds.
    pub(crate) fn tolerance_us(&self) -> u64 {
        self.burst * self.interval_us
    }
}

/// The reply from the step's exact microsecond results. Durations round **up** to whole
/// milliseconds: a client that waits `retry_after` then conforms, and the quota is whole
/// at `reset_after`.
pub(crate) fn reply_from_micros(
    granted: bool,
    remaining: u64,
    reset_after_us: u64,
    retry_after_us: Option<u64>,
) -> RateLimitReply {
    RateLimitReply {
        granted,
        remaining,
        reset_after_ms: reset_after_us.div_ceil(1000),
        retry_after_ms: retry_after_us.map(|us| us.div_ceil(1000)),
    }
}

impl Step for GcraStep<'_> {
    const PRIMITIVE: &'static str = "gcra";
    const NAME: &'static str = "gcra";
    type Reply = RateLimitReply;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_up_to_whole_milliseconds() {
        let reply = reply_from_micros(false, 0, 2_000, Some(1_001));
        assert_eq!(reply.reset_after_ms, 2);
        assert_eq!(reply.retry_after_ms, Some(2));
        assert_eq!(reply_from_micros(true, 1, 1, None).reset_after_ms, 1);
        assert_eq!(reply_from_micros(true, 3, 0, None).reset_after_ms, 0);
    }
}
