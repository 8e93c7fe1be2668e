//! The pauses between background release attempts: capped, doubling and jittered.

use std::hash::BuildHasher;
use std::time::Duration;

pub(super) const FIRST_BACKOFF: Duration = Duration::from_millis(50);
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The backoff after `backoff`: twice as long, up to [`MAX_BACKOFF`].
pub(super) fn next(backoff: Duration) -> Duration {
    (backoff * 2).min(MAX_BACKOFF)
}

/// Between half of `backoff` and all of it, so that many releases failing together do not
/// retry together. The spread comes from std's randomly keyed hasher: no extra dependency.
pub(super) fn jittered(backoff: Duration, token: &str, attempt: u32) -> Duration {
    let half = backoff / 2;
    let spread = u64::try_from(half.as_millis()).unwrap_or(u64::MAX).max(1);
    let random = std::collections::hash_map::RandomState::new().hash_one((token, attempt));
    half + Duration::from_millis(random % spread)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_between_half_and_whole() {
        for attempt in 0..200 {
            for backoff in [FIRST_BACKOFF, MAX_BACKOFF, Duration::from_millis(1)] {
                let pause = jittered(backoff, "token", attempt);
                assert!(pause >= backoff / 2 && pause <= backoff, "{pause:?}");
            }
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        assert_eq!(next(FIRST_BACKOFF), FIRST_BACKOFF * 2);
        assert_eq!(next(MAX_BACKOFF), MAX_BACKOFF);
    }
}
