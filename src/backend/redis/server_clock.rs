//! The server's clock as this process can bound it, for deadlines that a command carries.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

pub(crate) use crate::backend::delivery::Deadline;

/// How far the local and the server clocks may drift apart per second of an anchor's age
/// (1 ms per second is 1000 ppm, twice what NTP allows a clock to slew).
const DRIFT_PER_SECOND_MS: u64 = 1;
/// What is always added for the server's clock being read between sending and receiving.
const MARGIN: Duration = Duration::from_millis(100);
/// How old an anchor may get before a step asks for a fresh one.
pub(super) const REFRESH_AFTER: Duration = Duration::from_secs(60);

/// One reading of the server's `TIME`, between two local instants.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    sent: Instant,
    received: Instant,
    server_ms: u64,
}

impl Anchor {
    /// What is added to any bound read from this reading: [`MARGIN`], and the drift its age
    /// allows.
    fn margin(&self) -> Duration {
        MARGIN
            + Duration::from_millis(
                self.received
                    .elapsed()
                    .as_secs()
                    .saturating_mul(DRIFT_PER_SECOND_MS),
            )
    }

    /// The local instant from which the server's clock has certainly passed `server_ms`: the
    /// lower bound of its reading (`server_ms` at `received`, counting on from there)
    /// reaches it plus the margin. An instant too far to represent is never reached.
    fn passed_at(&self, server_ms: u64) -> Instant {
        self.received
            .checked_add(Duration::from_millis(
                server_ms.saturating_sub(self.server_ms),
            ))
            .and_then(|at| at.checked_add(self.margin()))
            .unwrap_or_else(|| crate::time::after(Instant::now(), crate::time::FAR))
    }
}

/// The latest reading of the server's clock: with it, any local instant has a server time
/// known to lie between two bounds.
#[derive(Debug)]
pub(super) struct ServerClock {
    anchor: Mutex<Anchor>,
    refreshing: AtomicBool,
}

/// The one refresh of a clock in flight; the next may start once this drops.
pub(super) struct Refreshing<'a>(&'a AtomicBool);

impl Drop for Refreshing<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl ServerClock {
    /// A clock from a `TIME` reply `server_ms`, asked at `sent` and answered at `received`.
    pub(super) fn new(sent: Instant, received: Instant, server_ms: u64) -> Self {
        ServerClock {
            anchor: Mutex::new(Anchor {
                sent,
                received,
                server_ms,
            }),
            refreshing: AtomicBool::new(false),
        }
    }

    /// Claims the one refresh in flight, until the returned claim drops, however the refresh
    /// ends (an acquisition that reads the clock again is cancelled with it at a layer's
    /// timeout): `None` when another is under way.
    pub(super) fn start_refresh(&self) -> Option<Refreshing<'_>> {
        (!self.refreshing.swap(true, Ordering::AcqRel)).then(|| Refreshing(&self.refreshing))
    }

    /// Replaces the reading with a newer one.
    pub(super) fn update(&self, sent: Instant, received: Instant, server_ms: u64) {
        let mut anchor = self.lock();
        if sent >= anchor.sent {
            *anchor = Anchor {
                sent,
                received,
                server_ms,
            };
        }
    }

    /// Whether the reading is older than [`REFRESH_AFTER`].
    pub(super) fn is_stale(&self) -> bool {
        self.lock().received.elapsed() >= REFRESH_AFTER
    }

    /// A deadline `bound` after the latest the server's clock can read now.
    ///
    /// The server read its clock somewhere between `sent` and `received`: now, it reads at
    /// most `server_ms + (now - sent)` and at least `server_ms + (now - received)`, give or
    /// take the drift since. The deadline counts from the upper bound, so a command sent now
    /// has its whole `bound`; it has passed once the lower bound is beyond it.
    pub(super) fn deadline(&self, bound: Duration) -> Deadline {
        let anchor = *self.lock();
        let now = Instant::now();
        let latest_now = anchor
            .server_ms
            .saturating_add(millis(now.saturating_duration_since(anchor.sent)));
        let server_ms = latest_now.saturating_add(millis(bound.saturating_add(anchor.margin())));
        Deadline {
            server_ms,
            passed_at: anchor.passed_at(server_ms),
        }
    }

    /// The local instant from which this server's clock has certainly passed `server_ms`: its
    /// lowest reading, plus the margins, is beyond it.
    pub(super) fn passed_at(&self, server_ms: u64) -> Instant {
        self.lock().passed_at(server_ms)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Anchor> {
        // A plain value: a panic elsewhere cannot leave it torn.
        self.anchor
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The latest a server's `TIME` may read (2^40 seconds since the epoch, about the year
/// 36812): beyond it, a reply is taken for what it is, not a clock.
const LATEST_TIME_SECS: u64 = 1 << 40;

/// A `TIME` reply (seconds and microseconds since the epoch) as a duration since the epoch.
/// Fails with [`ErrorKind::UnexpectedReply`](crate::ErrorKind::UnexpectedReply) for a reply
/// that is no clock (a hostile server, or a man in the middle on a plaintext link, could
/// send one near `u64::MAX`, whose arithmetic would overflow).
pub(super) fn time_reply(reply: redis::Value) -> crate::Result<Duration> {
    let (seconds, micros): (u64, u64) = redis::from_redis_value(reply)
        .map_err(|err| crate::Error::unexpected_reply(format!("TIME: {err}")))?;
    if seconds > LATEST_TIME_SECS || micros >= 1_000_000 {
        return Err(crate::Error::unexpected_reply(format!(
            "TIME answered {seconds} s and {micros} µs, which is no clock"
        )));
    }
    Ok(Duration::from_secs(seconds) + Duration::from_micros(micros))
}

/// Whole milliseconds, saturating.
pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One refresh at a time, and the next may start however the last ended: a refresh
    /// cancelled with its acquisition (its claim dropped mid-way) blocks none after it.
    #[tokio::test]
    async fn a_cancelled_refresh_lets_the_next_one_start() {
        let now = Instant::now();
        let clock = ServerClock::new(now, now, 1_000);
        let claim = clock.start_refresh();
        assert!(claim.is_some());
        assert!(clock.start_refresh().is_none(), "one at a time");
        assert!(
            clock.start_refresh().is_none(),
            "a refused claim releases nothing"
        );
        let mut reading = Box::pin(async move {
            let _claim = claim;
            std::future::pending::<()>().await;
        });
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(reading.as_mut().poll(&mut cx).is_pending());
        drop(reading);
        assert!(
            clock.start_refresh().is_some(),
            "released by the cancellation"
        );
    }

    #[test]
    fn a_time_reply_that_is_no_clock_is_refused() {
        use redis::Value;
        let reply = |seconds: &str, micros: &str| {
            Value::Array(vec![
                Value::BulkString(seconds.as_bytes().to_vec()),
                Value::BulkString(micros.as_bytes().to_vec()),
            ])
        };
        assert_eq!(
            time_reply(reply("1796150401", "250000")).expect("a clock"),
            Duration::from_millis(1_796_150_401_250)
        );
        for (seconds, micros) in [
            ("18446744073709551615", "999999"),
            ("1796150401", "1000000"),
            ("1099511627777", "0"),
        ] {
            let err = time_reply(reply(seconds, micros)).expect_err("no clock");
            assert_eq!(
                err.kind(),
                crate::ErrorKind::UnexpectedReply,
                "{seconds} {micros}"
            );
        }
        assert!(time_reply(Value::Nil).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_passes_once_the_slowest_reading_is_beyond_it() {
        let sent = Instant::now();
        tokio::time::advance(Duration::from_millis(10)).await;
        let received = Instant::now();
        // The server read 1000 somewhere in the 10 ms between.
        let clock = ServerClock::new(sent, received, 1_000);
        let deadline = clock.deadline(Duration::from_secs(1));
        // From the upper bound (1010 now), the bound and the margin.
        assert_eq!(deadline.server_ms, 1_010 + 1_000 + 100);
        // The lower bound (1000 + time since received) passes it plus the margin.
        assert_eq!(
            deadline.passed_at,
            received + Duration::from_millis(2_110 - 1_000) + MARGIN
        );
        // An old reading widens both by the drift.
        tokio::time::advance(Duration::from_secs(30)).await;
        let later = clock.deadline(Duration::from_secs(1));
        assert_eq!(later.server_ms, 1_010 + 30_000 + 1_000 + 100 + 30);
        assert!(!clock.is_stale());
        tokio::time::advance(REFRESH_AFTER).await;
        assert!(clock.is_stale());
        let (sent, received) = (Instant::now(), Instant::now());
        clock.update(sent, received, 500_000);
        assert!(!clock.is_stale());
        assert_eq!(clock.deadline(Duration::ZERO).server_ms, 500_000 + 100);
    }
}
