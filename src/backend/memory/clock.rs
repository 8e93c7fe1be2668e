//! The memory backend's clock: monotonic, pausable in tests, and read as [`Moment`]s of
//! 8 bytes.

use std::ops::{Add, AddAssign, Sub};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// A monotonic clock reported as time since the Unix epoch.
///
/// It reads tokio's [`Instant`], so `tokio::time::pause` and `advance` control it in tests,
/// and anchors it to the wall clock once, at creation: it never goes back when the wall
/// clock is adjusted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    origin: Instant,
    origin_since_epoch: Duration,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Clock {
            origin: Instant::now(),
            // A wall clock set before 1970 only shifts the reported origin, never the
            // decisions, which use `Instant`s. Whole microseconds, as moments count: a
            // reading is then on the same grid as the times steps align on (a sliding
            // window's segments).
            origin_since_epoch: Duration::from_micros(
                u64::try_from(
                    SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_micros(),
                )
                .unwrap_or(u64::MAX),
            ),
        }
    }

    /// The moment decisions are taken at.
    pub(crate) fn now(&self) -> Moment {
        Moment::after(Instant::now().saturating_duration_since(self.origin))
    }

    /// A moment as time since the Unix epoch.
    pub(crate) fn since_epoch(&self, moment: Moment) -> Duration {
        self.origin_since_epoch + Duration::from_micros(moment.0)
    }

    /// The first moment whose time since the epoch is past `micros` (the clock's start, for
    /// a time before it).
    pub(crate) fn past(&self, micros: u64) -> Moment {
        let origin = u64::try_from(self.origin_since_epoch.as_micros()).unwrap_or(u64::MAX);
        Moment::after(Duration::from_micros(
            micros.saturating_add(1).saturating_sub(origin),
        ))
    }
}

/// A moment on a backend's [`Clock`]: whole microseconds since the clock was made, enough
/// for 584,000 years.
///
/// Every deadline and time the memory backend keeps is one: 8 bytes where tokio's `Instant`
/// takes 16, in every key's entry, in the heaps of deadlines, and in the state of each
/// window, bucket and lease. The microsecond is the finest unit a step computes in (GCRA's),
/// as in the Lua scripts; what is finer is dropped, from a reading and from a duration
/// added. Arithmetic never panics: a sum beyond the range stops at its end
/// ([`Moment::add`], for what the steps' bounds keep within it) or is refused
/// ([`Moment::checked_add`], for what a user's duration sets), a difference stops at zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Moment(u64);

impl Moment {
    /// The last moment there is; one past it stands for "never" where a moment is kept in
    /// 8 bytes without an `Option`'s tag (see [`Moment::encode`]).
    const LAST: u64 = u64::MAX - 1;

    /// The moment `elapsed` after the clock was made (the last one, beyond the range).
    fn after(elapsed: Duration) -> Moment {
        Moment(u64::try_from(elapsed.as_micros()).map_or(Moment::LAST, |n| n.min(Moment::LAST)))
    }

    /// `self` plus `duration`; `None` beyond the range.
    pub(crate) fn checked_add(self, duration: Duration) -> Option<Moment> {
        u64::try_from(duration.as_micros())
            .ok()
            .and_then(|n| self.0.checked_add(n))
            .filter(|&n| n <= Moment::LAST)
            .map(Moment)
    }

    /// The time from `earlier` to `self`; zero when `earlier` is later.
    pub(crate) fn saturating_duration_since(self, earlier: Moment) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }

    /// An optional moment in 8 bytes: `None` as one past the last moment.
    pub(crate) fn encode(moment: Option<Moment>) -> u64 {
        moment.map_or(u64::MAX, |moment| moment.0)
    }

    /// The optional moment that [`Moment::encode`] gave `encoded` for.
    pub(crate) fn decode(encoded: u64) -> Option<Moment> {
        (encoded != u64::MAX).then_some(Moment(encoded))
    }
}

impl Add<Duration> for Moment {
    type Output = Moment;

    /// `self` plus `duration`, or the last moment beyond the range.
    fn add(self, duration: Duration) -> Moment {
        self.checked_add(duration).unwrap_or(Moment(Moment::LAST))
    }
}

impl AddAssign<Duration> for Moment {
    fn add_assign(&mut self, duration: Duration) {
        *self = *self + duration;
    }
}

impl Sub<Duration> for Moment {
    type Output = Moment;

    /// `self` less `duration`, or the clock's first moment before it.
    fn sub(self, duration: Duration) -> Moment {
        let n = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        Moment(self.0.saturating_sub(n))
    }
}

impl Sub for Moment {
    type Output = Duration;

    /// The time from `earlier` to `self`; zero when `earlier` is later.
    fn sub(self, earlier: Moment) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

/// Whole milliseconds in `duration`, rounded up: waiting the reported time always reaches
/// the moment it stands for, as with the millisecond clock of the Lua scripts.
pub(crate) fn millis_up(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// Whole milliseconds from `now` until `deadline` (0 once it passed), rounded up.
pub(crate) fn millis_until(deadline: Moment, now: Moment) -> u64 {
    millis_up(deadline.saturating_duration_since(now))
}

/// Whole microseconds in `duration`, rounded up.
pub(crate) fn micros_up(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000)).unwrap_or(u64::MAX)
}

/// `now` plus `ms` milliseconds: when something set now for `ms` expires. Beyond the clock's
/// range, an invalid argument naming `what` ("a lease").
pub(crate) fn after(now: Moment, ms: u64, what: &str) -> crate::error::Result<Moment> {
    now.checked_add(Duration::from_millis(ms)).ok_or_else(|| {
        crate::error::Error::invalid_argument(format!("{what} of {ms} ms is too long"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_reading_counts_whole_microseconds_from_the_clocks_creation() {
        let clock = Clock::new();
        let start = clock.now();
        assert_eq!(start, Moment(0));
        tokio::time::advance(Duration::from_nanos(1_999)).await;
        assert_eq!(clock.now() - start, Duration::from_micros(1));
        assert_eq!(clock.since_epoch(clock.now()).subsec_nanos() % 1_000, 0);
    }

    #[test]
    fn arithmetic_stops_at_the_ends_of_the_range_without_panicking() {
        let last = Moment(Moment::LAST);
        assert_eq!(last.checked_add(Duration::from_micros(1)), None);
        assert_eq!(Moment(0).checked_add(Duration::MAX), None);
        assert_eq!(last + Duration::from_secs(1), last);
        assert_eq!(Moment(5) - Duration::from_secs(1), Moment(0));
        assert_eq!(Moment(5) - last, Duration::ZERO);
        let mut moment = Moment(1);
        moment += Duration::from_micros(2);
        assert_eq!(moment, Moment(3));
    }

    #[test]
    fn an_optional_moment_is_kept_in_eight_bytes() {
        for moment in [None, Some(Moment(0)), Some(Moment(Moment::LAST))] {
            assert_eq!(Moment::decode(Moment::encode(moment)), moment);
        }
    }
}
