//! A quota as a plan states it: so many permits per window, with a burst where the
//! algorithm has one.

use std::fmt;
use std::time::Duration;

/// `limit` permits per `window`, and for the algorithms that take one
/// ([`Gcra`](super::Gcra), [`TokenBucket`](super::TokenBucket)) a burst: what a plan of
/// [`RateLimitPlans`](super::RateLimitPlans) allows.
///
/// What each algorithm makes of it: a fixed or sliding window admits `limit` per `window`
/// (and takes no burst); GCRA admits `limit` per `window`, evenly spaced, with bursts of
/// `burst` (by default `limit`); a token bucket holds `burst` tokens (by default `limit`)
/// and gains `limit` per `window`. The values are checked when a plan is built, by the
/// algorithm's own rules, and the error names the plan.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::coordination::rate_limit::Quota;
///
/// let quota = Quota::per_minute(100).with_burst(20);
/// assert_eq!(quota.limit(), 100);
/// assert_eq!(quota.window(), Duration::from_secs(60));
/// assert_eq!(quota.burst(), 20);
/// assert_eq!(Quota::per_second(10).burst(), 10);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: u64,
    window: Duration,
    burst: Option<u64>,
}

impl Quota {
    /// `limit` permits per `window`.
    pub const fn new(limit: u64, window: Duration) -> Self {
        Quota {
            limit,
            window,
            burst: None,
        }
    }

    /// `limit` permits per second.
    pub const fn per_second(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(1))
    }

    /// `limit` permits per minute.
    pub const fn per_minute(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(60))
    }

    /// `limit` permits per hour.
    pub const fn per_hour(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(3600))
    }

    /// `limit` permits per day (86,400 s).
    pub const fn per_day(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(86_400))
    }

    /// The same quota with bursts of `burst` permits (GCRA), or a bucket of `burst` tokens
    /// (token bucket); the windows refuse it.
    pub const fn with_burst(mut self, burst: u64) -> Self {
        self.burst = Some(burst);
        self
    }

    /// Permits per window.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The window the limit applies to.
    pub const fn window(&self) -> Duration {
        self.window
    }

    /// The burst: as set, or the limit.
    pub const fn burst(&self) -> u64 {
        match self.burst {
            Some(burst) => burst,
            None => self.limit,
        }
    }

    /// Whether a burst was set.
    pub(crate) const fn has_burst(&self) -> bool {
        self.burst.is_some()
    }
}

impl fmt::Display for Quota {
    /// As configuration writes it: `100/min`, `10/s burst 20`, `7/90s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/", self.limit)?;
        match (self.window.as_secs(), self.window.subsec_nanos()) {
            (86_400, 0) => f.write_str("day")?,
            (3600, 0) => f.write_str("h")?,
            (60, 0) => f.write_str("min")?,
            (1, 0) => f.write_str("s")?,
            (secs, 0) => write!(f, "{secs}s")?,
            _ => write!(f, "{}ms", self.window.as_millis())?,
        }
        if let Some(burst) = self.burst {
            write!(f, " burst {burst}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_writes_as_configuration_reads_it() {
        assert_eq!(Quota::per_minute(100).to_string(), "100/min");
        assert_eq!(
            Quota::per_second(10).with_burst(20).to_string(),
            "10/s burst 20"
        );
        assert_eq!(Quota::per_day(5000).to_string(), "5000/day");
        assert_eq!(Quota::new(7, Duration::from_secs(90)).to_string(), "7/90s");
        assert_eq!(
            Quota::new(3, Duration::from_millis(250)).to_string(),
            "3/250ms"
        );
    }
}
