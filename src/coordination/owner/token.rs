//! Owner tokens: what tells one holder from every other.

use std::fmt::Write as _;

use crate::error::{Error, ErrorKind, Result};

/// A new owner token: 128 bits from the operating system's random source, in lower-case hex.
///
/// Only the holder of a lease or permit knows its token, so only it can renew or release what
/// it holds (a stale holder's token no longer matches); 128 random bits make a collision
/// between any two holders, in any number of processes, negligible.
pub(crate) fn new_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|err| {
        Error::new(
            ErrorKind::Io,
            format!("the operating system's random source failed: {err}"),
        )
    })?;
    let mut token = String::with_capacity(2 * bytes.len());
    for byte in bytes {
        // Writing to a String cannot fail.
        let _ = write!(token, "{byte:02x}");
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_32_hex_digits_and_differ() {
        let first = new_token().expect("random");
        let second = new_token().expect("random");
        assert_eq!(first.len(), 32);
        assert!(
            first
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_ne!(first, second);
    }
}
