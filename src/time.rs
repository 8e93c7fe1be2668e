//! Instants from durations that may say "forever" (`Duration::MAX` in a configuration, or a
//! hostile reply): their arithmetic saturates instead of overflowing.

use std::time::Duration;

use tokio::time::Instant;

/// How far "forever" reaches: a year, longer than anything waits in practice, short enough
/// to be added to any instant.
pub(crate) const FAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// The instant `duration` after `at`, or [`FAR`] after it when that cannot be represented.
pub(crate) fn after(at: Instant, duration: Duration) -> Instant {
    at.checked_add(duration)
        .unwrap_or_else(|| at.checked_add(FAR).unwrap_or(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forever_is_a_year_away() {
        let now = Instant::now();
        assert_eq!(
            after(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
        assert_eq!(after(now, Duration::MAX), now + FAR);
    }
}
