//! A trusted proxy: the network (or the one address) whose forwarding headers are believed.

use std::error::Error as StdError;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;

/// A network of proxies whose forwarding headers [`KeyExtractor::client_ip`] believes, or a
/// single proxy's address.
///
/// Parsed from a network (`10.0.0.0/8`, `fd00::/8`) or a bare address (`10.0.0.7`, which is
/// the network of that address alone); built from an [`IpNet`] or an [`IpAddr`].
///
/// [`KeyExtractor::client_ip`]: super::KeyExtractor::client_ip
///
/// # Example
///
/// ```
/// use leasehold::layer::key::{KeyExtractor, TrustedProxy};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let key = KeyExtractor::client_ip(["10.0.0.0/8".parse()?, "192.168.1.7".parse()?]);
/// # let _ = key;
/// let err = "10.0.0.0/33".parse::<TrustedProxy>().expect_err("no such prefix");
/// assert!(err.to_string().contains("10.0.0.0/33"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TrustedProxy(IpNet);

impl TrustedProxy {
    /// The network the proxy lies in.
    pub fn network(&self) -> IpNet {
        self.0
    }
}

impl FromStr for TrustedProxy {
    type Err = InvalidTrustedProxy;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let trimmed = text.trim();
        if let Ok(network) = trimmed.parse::<IpNet>() {
            return Ok(TrustedProxy(network));
        }
        match trimmed.parse::<IpAddr>() {
            Ok(address) => Ok(TrustedProxy::from(address)),
            Err(_) => Err(InvalidTrustedProxy {
                input: text.to_owned(),
            }),
        }
    }
}

impl From<IpNet> for TrustedProxy {
    fn from(network: IpNet) -> Self {
        TrustedProxy(network)
    }
}

impl From<IpAddr> for TrustedProxy {
    fn from(address: IpAddr) -> Self {
        TrustedProxy(IpNet::from(address))
    }
}

/// A trusted proxy that is neither an IP address nor a network.
///
/// # Example
///
/// ```
/// use leasehold::layer::key::TrustedProxy;
///
/// let err = "proxy.internal".parse::<TrustedProxy>().expect_err("a name, not an address");
/// assert_eq!(err.input(), "proxy.internal");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidTrustedProxy {
    input: String,
}

impl InvalidTrustedProxy {
    /// What was given.
    pub fn input(&self) -> &str {
        &self.input
    }
}

impl fmt::Display for InvalidTrustedProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the trusted proxy {:?} is neither an IP address (10.0.0.7, fd00::7) nor a network \
             (10.0.0.0/8, fd00::/8)",
            self.input
        )
    }
}

impl StdError for InvalidTrustedProxy {}

/// So that `?` on a parse works in a function returning [`leasehold::Result`](crate::Result):
/// an [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) with the same words.
impl From<InvalidTrustedProxy> for crate::Error {
    fn from(err: InvalidTrustedProxy) -> Self {
        crate::Error::invalid_argument(err.to_string())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_parse_error_converts_into_the_crates_error() {
        fn trusted() -> crate::Result<super::TrustedProxy> {
            Ok("proxy.internal".parse::<super::TrustedProxy>()?)
        }
        let err = trusted().expect_err("not an address");
        assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
        assert!(err.to_string().contains("proxy.internal"), "{err}");
    }

    use super::*;

    #[test]
    fn networks_and_bare_addresses() {
        let parse = |text: &str| {
            text.parse::<TrustedProxy>()
                .map(|p| p.network().to_string())
        };
        assert_eq!(parse("10.0.0.0/8").as_deref(), Ok("10.0.0.0/8"));
        assert_eq!(parse("10.0.0.7").as_deref(), Ok("10.0.0.7/32"));
        assert_eq!(parse(" fd00::7 ").as_deref(), Ok("fd00::7/128"));
        assert_eq!(parse("fd00::/8").as_deref(), Ok("fd00::/8"));
        for invalid in [
            "",
            "10.0.0.0/33",
            "10.0.0",
            "proxy.internal",
            "10.0.0.0/8/8",
        ] {
            let err = invalid.parse::<TrustedProxy>().expect_err(invalid);
            assert!(err.to_string().contains(&format!("{invalid:?}")), "{err}");
        }
    }
}
