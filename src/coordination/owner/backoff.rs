//! The pauses between background release attempts: capped, doubling and jittered.

use std::time::Duration;

pub(super) const FIRST_BACKOFF: Duration = Duration::from_millis(50);
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The backoff after `backoff`: twice as long, up to [`MAX_BACKOFF`].
pub(super) fn next(backoff: Duration) -> Duration {
    (backoff * 2).min(MAX_BACKOFF)
}

/// Between half of `backoff` and all of it, so that many releases failing together do not
/// retry together.
pub(super) fn jittered(backoff: Duration) -> Duration {
    crate::jitter::between(backoff / 2, backoff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_between_half_and_whole() {
        for _ in 0..200 {
            for backoff in [FIRST_BACKOFF, MAX_BACKOFF, Duration::from_millis(1)] {
                let pause = jittered(backoff);
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
