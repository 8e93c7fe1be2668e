//! Owner tokens: what tells one holder from every other.

use std::fmt::{self, Write as _};
use std::str::FromStr;

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

/// The length of an owner token: 32 hex digits.
const TOKEN_LEN: usize = 32;

/// The owner token of a lease or permit, as handed on by a
/// [`Detached`](crate::coordination::Detached) holding: what renews, verifies and releases
/// it by [`ByOwner`](crate::coordination::ByOwner) from any process. Whoever has it can do
/// everything its holder can, so keep it as you would a credential.
///
/// Parsed from the 32 lower-case hex digits every handle's `owner_token()` shows; anything
/// else is refused, so that no step is sent with a token no holder can have.
///
/// # Example
///
/// ```
/// use leasehold::coordination::OwnerToken;
///
/// let token: OwnerToken = "0123456789abcdef0123456789abcdef".parse()?;
/// assert_eq!(token.as_str(), "0123456789abcdef0123456789abcdef");
/// assert!("not a token".parse::<OwnerToken>().is_err());
/// # Ok::<(), leasehold::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OwnerToken(String);

impl OwnerToken {
    /// `token` if it has an owner token's shape (32 lower-case hex digits); else fails with
    /// [`ErrorKind::InvalidArgument`].
    pub fn parse(token: &str) -> Result<OwnerToken> {
        if token.len() != TOKEN_LEN
            || !token
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(Error::invalid_argument(format!(
                "an owner token is {TOKEN_LEN} lower-case hex digits, not {:?}",
                truncated(token)
            )));
        }
        Ok(OwnerToken(token.to_owned()))
    }

    /// A token the crate made (see [`new_token`]).
    pub(crate) fn from_new(token: String) -> OwnerToken {
        debug_assert!(OwnerToken::parse(&token).is_ok());
        OwnerToken(token)
    }

    /// The 32 hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The 32 hex digits, by value.
    pub(crate) fn into_string(self) -> String {
        self.0
    }
}

/// At most the first 40 characters of `text`, for an error message about it.
fn truncated(text: &str) -> &str {
    text.char_indices()
        .nth(40)
        .map_or(text, |(end, _)| &text[..end])
}

impl FromStr for OwnerToken {
    type Err = Error;

    fn from_str(token: &str) -> Result<OwnerToken> {
        OwnerToken::parse(token)
    }
}

impl fmt::Display for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The first digits of an owner token, enough to tell holdings apart in a log line: the
/// whole token is a credential while its holding lives.
pub(crate) fn shown(token: &str) -> &str {
    token.get(..8).unwrap_or(token)
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerToken({}…)", self.0.get(..4).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_shape_of_a_token_parses() {
        let made = new_token().expect("random");
        assert_eq!(OwnerToken::parse(&made).expect("valid").as_str(), made);
        for invalid in [
            "",
            "0123456789abcdef0123456789abcde",
            "0123456789abcdef0123456789abcdef0",
            "0123456789ABCDEF0123456789abcdef",
            "0123456789abcdef0123456789abcdeg",
            "ééééééééééééééééé",
        ] {
            let err = OwnerToken::parse(invalid).expect_err("invalid");
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{invalid:?}");
        }
        let long = "x".repeat(10_000);
        let err = OwnerToken::parse(&long).expect_err("invalid");
        assert!(err.to_string().len() < 200, "{err}");
        assert!(!format!("{:?}", OwnerToken::from_new(made.clone())).contains(&made));
    }

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
