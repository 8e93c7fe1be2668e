//! Permit expiries: whole milliseconds on the backend's clock, or none.

use std::time::Duration;

use crate::error::{Error, Result};

/// The longest permit expiry: 2^40 ms, about 34 years. Every deadline then stays below 2^53
/// ms since the epoch, which a Lua number (a double) holds exactly.
pub(super) const MAX_EXPIRY: Duration = Duration::from_millis(1 << 40);

/// The expiry in whole milliseconds (`None`: no expiry). Sub-millisecond parts are dropped;
/// less than a millisecond or more than [`MAX_EXPIRY`] is an invalid argument.
pub(super) fn expiry_ms(expiry: Option<Duration>) -> Result<Option<u64>> {
    let Some(expiry) = expiry else {
        return Ok(None);
    };
    if expiry < Duration::from_millis(1) || expiry > MAX_EXPIRY {
        return Err(Error::invalid_argument(format!(
            "a permit expiry must be between 1 ms and {} ms (or none), not {expiry:?}",
            MAX_EXPIRY.as_millis()
        )));
    }
    // At most 2^40 ms, so the conversion is exact.
    Ok(Some(u64::try_from(expiry.as_millis()).unwrap_or(u64::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn whole_milliseconds_within_bounds() {
        assert_eq!(expiry_ms(None).expect("none"), None);
        assert_eq!(
            expiry_ms(Some(Duration::from_micros(1_999))).expect("valid"),
            Some(1)
        );
        assert_eq!(expiry_ms(Some(MAX_EXPIRY)).expect("valid"), Some(1 << 40));
        for invalid in [
            Duration::ZERO,
            Duration::from_micros(999),
            MAX_EXPIRY + Duration::from_millis(1),
            Duration::MAX,
        ] {
            let err = expiry_ms(Some(invalid)).expect_err("invalid");
            assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        }
    }
}
