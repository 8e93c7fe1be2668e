//! Lease durations: whole milliseconds on the backend's clock, within bounds.

use std::time::Duration;

use crate::error::{Error, Result};

/// The longest lease: 2^40 ms, about 34 years. Every deadline then stays below 2^53 ms since
/// the epoch, which a Lua number (a double) holds exactly.
pub(super) const MAX_LEASE: Duration = Duration::from_millis(1 << 40);

/// The lease in whole milliseconds. Sub-millisecond parts are dropped; less than a
/// millisecond or more than [`MAX_LEASE`] is an invalid argument.
pub(super) fn lease_ms(lease: Duration) -> Result<u64> {
    if lease < Duration::from_millis(1) || lease > MAX_LEASE {
        return Err(Error::invalid_argument(format!(
            "a lease must be between 1 ms and {} ms, not {lease:?}",
            MAX_LEASE.as_millis()
        )));
    }
    // At most 2^40 ms, so the conversion is exact.
    Ok(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn whole_milliseconds_within_bounds() {
        assert_eq!(lease_ms(Duration::from_micros(1_999)).expect("valid"), 1);
        assert_eq!(lease_ms(MAX_LEASE).expect("valid"), 1 << 40);
        for invalid in [
            Duration::ZERO,
            Duration::from_micros(999),
            MAX_LEASE + Duration::from_millis(1),
            Duration::MAX,
        ] {
            let err = lease_ms(invalid).expect_err("invalid");
            assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        }
    }
}
