//! The one bound on a holding's expiry: whole milliseconds on the backend's clock.

use std::time::Duration;

use super::HoldingKeys;
use crate::error::{Error, Result};

/// The longest expiry of a lease or a permit: 2^40 ms, about 34 years. Every deadline then
/// stays below 2^53 ms since the epoch, which a Lua number (a double) holds exactly.
pub(crate) const MAX_EXPIRY: Duration = Duration::from_millis(1 << 40);

/// `expiry` in whole milliseconds, for `what` ("a lease") in the error. Sub-millisecond
/// parts are dropped; less than a millisecond or more than [`MAX_EXPIRY`] is an invalid
/// argument.
pub(crate) fn expiry_ms(what: &str, expiry: Duration) -> Result<u64> {
    if expiry < Duration::from_millis(1) || expiry > MAX_EXPIRY {
        return Err(Error::invalid_argument(format!(
            "{what} must be between 1 ms and 2^40 ms (about 34 years), not {expiry:?}"
        )));
    }
    // At most 2^40 ms, so the conversion is exact.
    Ok(u64::try_from(expiry.as_millis()).unwrap_or(u64::MAX))
}

/// The expiry of a renewal of `K`'s holdings, which always expire (leases): the kit asks
/// each renewal of one with its expiry, so `None` is refused before anything is sent.
pub(crate) fn lease_expiry<K: HoldingKeys>(expiry_ms: Option<u64>) -> Result<u64> {
    expiry_ms.ok_or_else(|| Error::invalid_argument(format!("a {} needs an expiry", K::WHAT)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn whole_milliseconds_within_bounds() {
        assert_eq!(
            expiry_ms("a lease", Duration::from_micros(1_999)).expect("valid"),
            1
        );
        assert_eq!(expiry_ms("a lease", MAX_EXPIRY).expect("valid"), 1 << 40);
        for invalid in [
            Duration::ZERO,
            Duration::from_micros(999),
            MAX_EXPIRY + Duration::from_millis(1),
            Duration::MAX,
        ] {
            let err = expiry_ms("a lease", invalid).expect_err("invalid");
            assert_eq!(err.kind(), ErrorKind::InvalidArgument);
            assert!(err.to_string().contains("a lease must be"), "{err}");
        }
    }
}
