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

impl std::str::FromStr for Quota {
    type Err = crate::Error;

    /// Reads a quota as configuration writes it: `<limit>/<window>`, then optionally
    /// `burst <n>`. The window is a unit (`ms`, `s`, `sec`, `second`, `min`, `minute`, `h`,
    /// `hour`, `d`, `day`, plurals too) with an optional whole number before it: `100/min`,
    /// `10/s burst 20`, `5000/day`, `7/90s`, `3/250ms`. Only the form is checked here; the
    /// algorithm checks the values when a plan is built.
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold::coordination::rate_limit::Quota;
    ///
    /// # fn main() -> leasehold::Result<()> {
    /// let quota: Quota = "10/s burst 20".parse()?;
    /// assert_eq!(quota, Quota::per_second(10).with_burst(20));
    /// assert_eq!("7/90s".parse::<Quota>()?.window(), Duration::from_secs(90));
    /// assert!("ten per minute".parse::<Quota>().is_err());
    /// # Ok(()) }
    /// ```
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse(text).ok_or_else(|| {
            crate::Error::invalid_argument(format!(
                "a quota is written `<limit>/<window>` with an optional `burst <n>` (as in \
                 `100/min`, `10/s burst 20`, `5000/day`, `7/90s`), not {text:?}"
            ))
        })
    }
}

/// [`Quota::from_str`]'s reading; `None` for any other form.
fn parse(text: &str) -> Option<Quota> {
    let mut words = text.split_whitespace();
    let (limit, window) = words.next()?.split_once('/')?;
    let limit = limit.parse::<u64>().ok()?;
    let window = parse_window(window)?;
    let quota = Quota::new(limit, window);
    match (words.next(), words.next(), words.next()) {
        (None, _, _) => Some(quota),
        (Some("burst"), Some(burst), None) => Some(quota.with_burst(burst.parse().ok()?)),
        _ => None,
    }
}

/// `90s`, `min`, `250ms`, `2h`: an optional whole count of a unit.
fn parse_window(text: &str) -> Option<Duration> {
    let unit_at = text.find(|c: char| !c.is_ascii_digit())?;
    let (count, unit) = text.split_at(unit_at);
    let count = if count.is_empty() {
        1
    } else {
        count.parse::<u64>().ok()?
    };
    let unit_ms: u64 = match unit {
        "ms" | "millisecond" | "milliseconds" => 1,
        "s" | "sec" | "second" | "seconds" => 1000,
        "m" | "min" | "minute" | "minutes" => 60_000,
        "h" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        _ => return None,
    };
    Some(Duration::from_millis(count.checked_mul(unit_ms)?))
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

/// What a plan allows: one [`Quota`], or for [`PlanAlgorithm::Stacked`](super::PlanAlgorithm::Stacked)
/// several, each of its own window, all of them checked at once. Built from a `Quota` or an
/// array or `Vec` of them, and written (and read) as configuration writes them, joined by
/// commas: `10/s, 1000/day`.
///
/// # Example
///
/// ```
/// use leasehold::coordination::rate_limit::{Quota, Quotas};
///
/// # fn main() -> leasehold::Result<()> {
/// let one = Quotas::from(Quota::per_minute(100));
/// assert_eq!(one.first(), Quota::per_minute(100));
/// let stacked = Quotas::from([Quota::per_second(10), Quota::per_day(1000)]);
/// assert_eq!(stacked.to_string(), "10/s, 1000/day");
/// assert_eq!("10/s, 1000/day".parse::<Quotas>()?, stacked);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Quotas(Box<[Quota]>);

impl Quotas {
    /// The first quota (the only one, but for a stacked plan's).
    ///
    /// An empty list (from an empty array or `Vec`) answers a quota of 0 per millisecond,
    /// which every algorithm refuses when the plan is built.
    pub fn first(&self) -> Quota {
        self.0
            .first()
            .copied()
            .unwrap_or(Quota::new(0, Duration::from_millis(1)))
    }

    /// Every quota, in order.
    pub fn as_slice(&self) -> &[Quota] {
        &self.0
    }

    /// How many quotas.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none (a plan refuses it).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<Quota> for Quotas {
    fn from(quota: Quota) -> Self {
        Quotas(Box::new([quota]))
    }
}

impl<const N: usize> From<[Quota; N]> for Quotas {
    fn from(quotas: [Quota; N]) -> Self {
        Quotas(quotas.into())
    }
}

impl From<Vec<Quota>> for Quotas {
    fn from(quotas: Vec<Quota>) -> Self {
        Quotas(quotas.into_boxed_slice())
    }
}

impl PartialEq<Quota> for Quotas {
    /// Equal to a single quota it holds alone.
    fn eq(&self, other: &Quota) -> bool {
        *self.0 == [*other]
    }
}

impl fmt::Display for Quotas {
    /// The quotas as configuration writes them, joined by `, `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, quota) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{quota}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Quotas {
    type Err = crate::Error;

    /// Quotas as [`Quota`] reads each, joined by commas.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let quotas = text
            .split(',')
            .map(str::parse::<Quota>)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Quotas::from(quotas))
    }
}
