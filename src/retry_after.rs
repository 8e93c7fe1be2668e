//! The wait a refusal's `Retry-After` asks for, the same for the layers and the extractors:
//! never under a second, since `Retry-After: 0` invites an immediate retry. A leaf of the
//! crate.

use std::time::Duration;

/// The shortest wait a refusal asks for, and the wait when none is known.
pub(crate) const SHORTEST: Duration = Duration::from_secs(1);

/// `wait` (a second when unknown), at least a second.
pub(crate) fn at_least_a_second(wait: Option<Duration>) -> Duration {
    wait.unwrap_or(SHORTEST).max(SHORTEST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_under_a_second_and_a_second_when_unknown() {
        assert_eq!(at_least_a_second(None), SHORTEST);
        assert_eq!(at_least_a_second(Some(Duration::ZERO)), SHORTEST);
        assert_eq!(
            at_least_a_second(Some(Duration::from_millis(999))),
            SHORTEST
        );
        assert_eq!(
            at_least_a_second(Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
    }
}
