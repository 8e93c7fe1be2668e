//! Which client a request counts against.
//!
//! A rate-limit layer asks its [`KeyExtractor`] for the key of each request: requests with
//! equal keys share one budget. The built-in extractors produce these keys:
//!
//! | extractor | key bytes |
//! | --- | --- |
//! | [`KeyExtractor::global`] | `global` |
//! | [`KeyExtractor::peer_ip`], [`KeyExtractor::client_ip`], [`KeyExtractor::client_ip_forwarded`], [`KeyExtractor::client_ip_real_ip`], [`KeyExtractor::client_ip_hops`] | `ip:203.0.113.7`; an IPv6 client's `/64`, `ip:2001:db8:1:2::/64` (see [`ipv6_prefix`](KeyExtractor::ipv6_prefix)) |
//! | [`KeyExtractor::header`] | `hdr:`, the header's name, `:sha256:` and the hex SHA-256 of its value: `hdr:x-api-key:sha256:3605…` |
//! | [`KeyExtractor::header_in_clear`] | `hdr:`, the header's name, `:` and its value, byte for byte: `hdr:x-tenant:acme` |
//! | [`KeyExtractor::from_fn`] | `fn:` and the closure's key |
//!
//! Each key starts with its source, so that no client can send a header (or make a closure
//! return) a key another extractor gives, such as `ip:203.0.113.7` or `global`, and spend
//! that client's budget where two layers share a limit's name. Braces in a client's own bytes
//! are written `%7B` and `%7D` (and `%` as `%25`): a key is part of a Redis key name, where a
//! `{hash tag}` would let the client choose its cluster slot.
//!
//! A header usually carries a credential (an API key, a bearer token), and the key is part
//! of a Redis key name, which `MONITOR`, `SCAN`, slow logs and backups show to whoever can
//! read them: so [`header`](KeyExtractor::header) stores only the value's digest.
//! [`header_in_clear`](KeyExtractor::header_in_clear) keeps the value readable, for headers
//! that name a client without being a secret (a tenant id).
//!
//! IPv4-mapped IPv6 addresses (`::ffff:203.0.113.7`) count as the IPv4 address they carry, so
//! a dual-stack listener keys a client the same way whichever socket it arrives on. IPv6
//! clients are keyed by their network, a `/64` by default ([`DEFAULT_IPV6_PREFIX`]), since
//! one host usually holds a whole `/64` and could otherwise take a fresh budget with each of
//! its addresses: [`KeyExtractor::ipv6_prefix`] chooses another length (`128` keys each
//! address on its own), and [`KeyExtractor::client_address`] gives the address itself for
//! keys of your own. The mapping is undone before the prefix is taken.
//!
//! # The peer address
//!
//! [`KeyExtractor::peer_ip`] and [`KeyExtractor::client_ip`] read the TCP peer's address from
//! the request extensions, trying in turn:
//!
//! - `axum::extract::ConnectInfo<SocketAddr>` (with the `axum` feature), which axum inserts
//!   when the app is served with `into_make_service_with_connect_info::<SocketAddr>()`:
//!
//!   ```no_run
//!   # #[cfg(feature = "axum")]
//!   # async fn serve(app: axum::Router) -> std::io::Result<()> {
//!   # use std::net::SocketAddr;
//!   # let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//!   axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//!   # Ok(()) }
//!   ```
//!
//! - a plain [`SocketAddr`](std::net::SocketAddr), for hyper and tower servers that insert it themselves.
//!
//! A request with neither fails with [`KeyErrorKind::MissingPeerAddress`]: the server is
//! misconfigured, so it is an internal error rather than the client's fault.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use crate::coordination::name::{bounded, digest};
#[cfg(doc)]
use crate::coordination::{HASHED_NAME_PREFIX, MAX_NAME_LEN};
use crate::error::{Error, Result};
pub use error::{KeyError, KeyErrorKind};
use http::HeaderName;
use http::request::Parts;
/// An IP network (re-exported from the `ipnet` crate), which a [`TrustedProxy`] is built
/// from.
pub use ipnet::IpNet;
pub use trusted_proxy::{InvalidTrustedProxy, TrustedProxy};

mod error;
mod forwarded;
mod trusted_proxy;

use forwarded::{Forwarding, MAX_HOPS, client_ip, client_ip_hops, peer_ip};

/// Derives the rate-limit key of a request.
///
/// Cloning is cheap: the configuration is shared.
///
/// # Example
///
/// Behind load balancers in `10.0.0.0/8` that append to `X-Forwarded-For`:
///
/// ```
/// use std::net::SocketAddr;
///
/// use leasehold::layer::key::KeyExtractor;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let key = KeyExtractor::client_ip(["10.0.0.0/8".parse()?]);
///
/// let (parts, ()) = http::Request::builder()
///     // The client wrote the left entry itself; the balancer appended the right one.
///     .header("x-forwarded-for", "198.51.100.9, 203.0.113.7")
///     .extension(SocketAddr::from(([10, 0, 0, 2], 41_000)))
///     .body(())?
///     .into_parts();
/// assert_eq!(key.extract(&parts)?, b"ip:203.0.113.7");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct KeyExtractor {
    inner: Arc<Inner>,
    /// The IPv6 prefix length the address extractors key by (see
    /// [`ipv6_prefix`](KeyExtractor::ipv6_prefix)).
    ipv6_prefix: u8,
    /// Whether the address extractors store a digest of the address (see
    /// [`hash_addresses`](KeyExtractor::hash_addresses)).
    hash_addresses: bool,
    /// What a header's value becomes before it is keyed (see
    /// [`normalise`](KeyExtractor::normalise)).
    normalise: Option<Arc<NormaliseFn>>,
}

type NormaliseFn = dyn Fn(&[u8]) -> Vec<u8> + Send + Sync;

/// The IPv6 prefix length an address extractor keys clients by unless
/// [`KeyExtractor::ipv6_prefix`] says otherwise: a `/64`, the network one host (a cloud VM, a
/// home connection) is usually given, so that a host cannot take a fresh budget with each of
/// its addresses.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

type KeyFn = dyn Fn(&Parts) -> Result<Vec<u8>, KeyError> + Send + Sync;

/// How a header's value becomes a key.
#[derive(Debug, Clone, Copy)]
enum Stored {
    Digest,
    InClear,
}

enum Inner {
    Global,
    PeerIp,
    ClientIp(Vec<IpNet>, Forwarding),
    ClientIpHops(usize),
    Header(HeaderName, Stored),
    FromFn(Box<KeyFn>),
}

impl KeyExtractor {
    fn new(inner: Inner) -> Self {
        Self {
            inner: Arc::new(inner),
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            hash_addresses: false,
            normalise: None,
        }
    }

    /// Rewrites a header's value before the [`header`](Self::header) and
    /// [`header_in_clear`](Self::header_in_clear) extractors key by it, so that the values
    /// that name one client share one budget: `Acme` and `acme` are two keys otherwise.
    /// Other extractors ignore it.
    ///
    /// ```
    /// use leasehold::layer::key::KeyExtractor;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let tenant = KeyExtractor::header_in_clear("x-tenant")?
    ///     .normalise(|value| value.trim_ascii().to_ascii_lowercase());
    /// let (parts, ()) = http::Request::builder()
    ///     .header("x-tenant", " Acme ")
    ///     .body(())?
    ///     .into_parts();
    /// assert_eq!(tenant.extract(&parts)?, b"hdr:x-tenant:acme");
    /// # Ok(())
    /// # }
    /// ```
    pub fn normalise<F>(mut self, f: F) -> Self
    where
        F: Fn(&[u8]) -> Vec<u8> + Send + Sync + 'static,
    {
        self.normalise = Some(Arc::new(f));
        self
    }

    /// Stores the address extractors' keys as a digest of the address (`ip:sha256:<hex>`),
    /// as [`header`](Self::header) stores a header's value, so that client addresses (personal
    /// data in some jurisdictions) appear in no Redis key name, `MONITOR` output or backup.
    /// Requests from one address (or one IPv6 network) still share one key. The digest has
    /// no secret: an IPv4 address can be found again by trying all of them; hash with a
    /// secret of your own in [`from_fn`](Self::from_fn), on [`extract`](Self::extract)'s
    /// key, where that matters. Other extractors ignore it.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use leasehold::layer::key::KeyExtractor;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let pseudonymous = KeyExtractor::peer_ip().hash_addresses();
    /// let (parts, ()) = http::Request::builder()
    ///     .extension("203.0.113.7:443".parse::<SocketAddr>()?)
    ///     .body(())?
    ///     .into_parts();
    /// let key = pseudonymous.extract(&parts)?;
    /// assert!(key.starts_with(b"ip:sha256:"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn hash_addresses(mut self) -> Self {
        self.hash_addresses = true;
        self
    }

    /// The key of a client `ip`: its address (or IPv6 network), or that text's digest.
    fn address_key(&self, ip: IpAddr) -> Vec<u8> {
        let key = ip_key(ip, self.ipv6_prefix);
        if self.hash_addresses {
            tagged(&[b"ip:"], &digest(&key))
        } else {
            key
        }
    }

    /// Keys IPv6 clients by the network of their address's first `bits` bits (default
    /// [`DEFAULT_IPV6_PREFIX`], a `/64`; 128 keys each address on its own), for the address
    /// extractors ([`peer_ip`](Self::peer_ip), [`client_ip`](Self::client_ip) and the others
    /// that read forwarding headers); the others ignore it. An IPv4 client, an IPv4-mapped
    /// IPv6 address (`::ffff:203.0.113.7`) included, is keyed by its IPv4 address: the
    /// mapping is undone before the prefix is taken.
    ///
    /// One host usually holds a whole `/64` (a cloud VM's routed block, a home connection's
    /// LAN) and can send each request from a new address in it: keyed per address, it would
    /// get a fresh budget each time, and a new key in the store for each request. A shorter
    /// prefix groups more: a site is often given a `/56` or a `/48` (express-rate-limit
    /// masks to a `/56` by default), at the cost of sharing one budget among its hosts.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for 0
    /// (every IPv6 client one key: use [`global`](Self::global)) or more than 128.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use leasehold::layer::key::KeyExtractor;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let by_site = KeyExtractor::peer_ip().ipv6_prefix(56)?;
    /// let (parts, ()) = http::Request::builder()
    ///     .extension("[2001:db8:aa:bbcc::7]:443".parse::<SocketAddr>()?)
    ///     .body(())?
    ///     .into_parts();
    /// assert_eq!(by_site.extract(&parts)?, b"ip:2001:db8:aa:bb00::/56");
    /// # Ok(())
    /// # }
    /// ```
    pub fn ipv6_prefix(mut self, bits: u8) -> Result<Self> {
        if !(1..=128).contains(&bits) {
            return Err(Error::invalid_argument(format!(
                "an IPv6 prefix is from 1 to 128 bits long, not {bits} (0 would key every \
                 IPv6 client alike: use KeyExtractor::global for that)"
            )));
        }
        self.ipv6_prefix = bits;
        Ok(self)
    }

    /// The client's address as this extractor finds it, for keys of your own: the TCP
    /// peer's for [`peer_ip`](Self::peer_ip), the client's after the walk through the
    /// trusted proxies for [`client_ip`](Self::client_ip) and the others that read
    /// forwarding headers, IPv4-mapped addresses turned into IPv4, whole (before
    /// [`ipv6_prefix`](Self::ipv6_prefix): a key built on it alone would give each address
    /// of a host's `/64` its own budget again; build on [`extract`](Self::extract) for the
    /// key). `None` for an extractor that keys by no address.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use leasehold::layer::key::{KeyError, KeyExtractor};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let proxies = KeyExtractor::client_ip(["10.0.0.0/8".parse()?]);
    /// // Only clients in the company's network; keyed by their address (an IPv6 one by its
    /// // /64, as `extract` gives it) and their tenant.
    /// let office: ipnet::IpNet = "198.51.100.0/24".parse()?;
    /// let per_tenant = KeyExtractor::from_fn(move |parts| {
    ///     let address = proxies
    ///         .client_address(parts)?
    ///         .ok_or_else(|| KeyError::new("no client address"))?;
    ///     if !office.contains(&address) {
    ///         return Err(KeyError::new("outside the office network"));
    ///     }
    ///     let tenant = parts.headers.get("x-tenant").map_or(&b""[..], |v| v.as_bytes());
    ///     Ok([proxies.extract(parts)?.as_slice(), b"/", tenant].concat())
    /// });
    /// # let _ = per_tenant;
    /// # Ok(())
    /// # }
    /// ```
    pub fn client_address(&self, parts: &Parts) -> Result<Option<IpAddr>, KeyError> {
        match &*self.inner {
            Inner::PeerIp => peer_ip(parts).map(Some),
            Inner::ClientIp(trusted, header) => client_ip(parts, trusted, *header).map(Some),
            Inner::ClientIpHops(hops) => client_ip_hops(parts, *hops).map(Some),
            Inner::Global | Inner::Header(..) | Inner::FromFn(_) => Ok(None),
        }
    }

    /// One key, `global`, for every request: the limit applies to the service as a whole.
    pub fn global() -> Self {
        Self::new(Inner::Global)
    }

    /// Keys by the TCP peer's IP address, ignoring any forwarding headers.
    ///
    /// Right for a server that clients reach directly. Behind a proxy every request would
    /// share the proxy's key: use [`client_ip`](Self::client_ip) there.
    pub fn peer_ip() -> Self {
        Self::new(Inner::PeerIp)
    }

    /// Keys by the client's IP address as reported by trusted proxies in
    /// `X-Forwarded-For`.
    ///
    /// Forwarding headers are believed only when the TCP peer lies in one of the
    /// `trusted_proxies` networks ([`TrustedProxy`]: parse `"10.0.0.0/8"`, or a bare
    /// address such as `"10.0.0.7"` for one proxy). Any other peer is keyed by its own address, whatever
    /// headers it sends, so with no trusted networks this is [`peer_ip`](Self::peer_ip).
    ///
    /// From a trusted peer, the hops are read from `X-Forwarded-For` (several lines of the
    /// header form one list, in order) and walked from right to left, the nearest first:
    ///
    /// 1. an address in a trusted network is one more proxy: remember it and go on;
    /// 2. the first address outside them is the client, and the key;
    /// 3. an entry that names no address (empty, unparsable, or an address no client sends
    ///    from: `0.0.0.0`, `::`, `255.255.255.255`, a multicast address) ends the walk, as
    ///    does the 32nd hop: the key is then the last trusted address seen, or the peer's.
    ///
    /// So when every hop is trusted the leftmost one is the key, and nothing to the left of
    /// an entry that no trusted proxy vouches for is ever believed. Addresses are compared
    /// after IPv4-mapped IPv6 addresses are turned into IPv4, so list IPv4 proxies as IPv4
    /// networks. A `Forwarded` header is ignored: use
    /// [`client_ip_forwarded`](Self::client_ip_forwarded) behind proxies that write that one.
    pub fn client_ip(trusted_proxies: impl IntoIterator<Item = TrustedProxy>) -> Self {
        Self::new(Inner::ClientIp(
            trusted_proxies
                .into_iter()
                .map(|proxy| proxy.network())
                .collect(),
            Forwarding::XForwardedFor,
        ))
    }

    /// Like [`client_ip`](Self::client_ip), but reads the `for=` parameters of the
    /// standard `Forwarded` header (RFC 7239) and ignores `X-Forwarded-For`.
    ///
    /// An element that names no address (`for=unknown`, an obfuscated identifier such as
    /// `_hidden`, an element without `for=`) ends the walk like any unparsable entry.
    pub fn client_ip_forwarded(trusted_proxies: impl IntoIterator<Item = TrustedProxy>) -> Self {
        Self::new(Inner::ClientIp(
            trusted_proxies
                .into_iter()
                .map(|proxy| proxy.network())
                .collect(),
            Forwarding::Forwarded,
        ))
    }

    /// Like [`client_ip`](Self::client_ip), but reads the single address of `X-Real-IP`,
    /// which a proxy such as nginx sets to the address it received the request from. It is
    /// believed only from a peer in `trusted_proxies`; an entry that names no address, or an
    /// address no client sends from, leaves the peer's address as the key.
    pub fn client_ip_real_ip(trusted_proxies: impl IntoIterator<Item = TrustedProxy>) -> Self {
        Self::new(Inner::ClientIp(
            trusted_proxies
                .into_iter()
                .map(|proxy| proxy.network())
                .collect(),
            Forwarding::XRealIp,
        ))
    }

    /// Keys by the client's IP address behind exactly `hops` proxies whose own addresses
    /// are not known in advance (a cloud load balancer, say), each of which appends the
    /// address it received the request from to `X-Forwarded-For`.
    ///
    /// Counting the TCP peer as the first hop, the client is the `hops`-th entry of
    /// `X-Forwarded-For` from the right: with one load balancer (`hops` = 1), the rightmost
    /// entry. A header with fewer entries (a request that did not come through every proxy)
    /// gives its leftmost address; an entry that names no address stops the count at the
    /// last one that did; `hops` = 0 is [`peer_ip`](Self::peer_ip), and more than 32 count as
    /// 32 (the most hops any walk examines). Entries further left are
    /// never believed: whatever the client wrote there is ignored. Prefer
    /// [`client_ip`](Self::client_ip) where the proxies' networks are known.
    pub fn client_ip_hops(hops: usize) -> Self {
        Self::new(Inner::ClientIpHops(hops.min(MAX_HOPS)))
    }

    /// Keys by the value of a request header, such as an API key, stored as its digest:
    /// `hdr:`, the header's name, `:`, then [`HASHED_NAME_PREFIX`] and the lowercase hex
    /// SHA-256 of the first value's bytes, so that no credential appears in Redis key names.
    ///
    /// The client chooses what it sends: a header names a client only once the application
    /// has authenticated it (checked the API key, say, in a layer before this one). Keyed by
    /// a header nobody checks, a client takes a fresh budget by sending a new value. Requests with equal values share a key
    /// exactly as they would in clear. The digest has no secret: a key from a small space
    /// (a short numeric id) can be found again from a Redis key name by trying every value;
    /// hash with a secret of your own in [`from_fn`](Self::from_fn) where that matters.
    ///
    /// A request without the header fails with [`KeyErrorKind::MissingHeader`], and one with
    /// an empty value with [`KeyErrorKind::InvalidHeader`]: neither names a client.
    ///
    /// `name` is any header name, in any case (`"X-Api-Key"` or a [`HeaderName`]); one that
    /// is not a valid header name fails with
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument), naming it.
    ///
    /// ```
    /// use leasehold::layer::key::KeyExtractor;
    ///
    /// # fn main() -> leasehold::Result<()> {
    /// let by_api_key = KeyExtractor::header("X-Api-Key")?;
    /// assert!(KeyExtractor::header("no spaces").is_err());
    /// # Ok(()) }
    /// ```
    pub fn header(name: impl AsRef<str>) -> Result<Self> {
        Ok(Self::new(Inner::Header(
            header_name(name.as_ref())?,
            Stored::Digest,
        )))
    }

    /// Like [`header`](Self::header), but the key is `hdr:`, the header's name, `:` and the
    /// first value's bytes, as sent (braces escaped), up to [`MAX_NAME_LEN`] bytes (a longer
    /// value is hashed): for a header that names a client without being a secret, such as a
    /// tenant id, where readable key names help. Values are compared byte for byte (`Acme`
    /// and `acme` are two clients): give [`normalise`](Self::normalise) a rewrite where that
    /// matters. `name` is read as by [`header`](Self::header).
    pub fn header_in_clear(name: impl AsRef<str>) -> Result<Self> {
        Ok(Self::new(Inner::Header(
            header_name(name.as_ref())?,
            Stored::InClear,
        )))
    }

    /// Keys by the result of `f`, for any other rule.
    ///
    /// Return a [`KeyError`] from `f` to refuse a request that carries no usable key. The
    /// stored key is `fn:` and `f`'s key, braces escaped; a key longer than
    /// [`MAX_NAME_LEN`] is hashed, as for [`header`](Self::header).
    pub fn from_fn<F>(f: F) -> Self
    where
        F: Fn(&Parts) -> Result<Vec<u8>, KeyError> + Send + Sync + 'static,
    {
        Self::new(Inner::FromFn(Box::new(f)))
    }

    /// The key of the request with these `parts`.
    pub fn extract(&self, parts: &Parts) -> Result<Vec<u8>, KeyError> {
        match &*self.inner {
            Inner::Global => Ok(b"global".to_vec()),
            Inner::PeerIp => peer_ip(parts).map(|ip| self.address_key(ip)),
            Inner::ClientIp(trusted, header) => {
                client_ip(parts, trusted, *header).map(|ip| self.address_key(ip))
            }
            Inner::ClientIpHops(hops) => {
                client_ip_hops(parts, *hops).map(|ip| self.address_key(ip))
            }
            Inner::Header(name, stored) => match parts.headers.get(name) {
                Some(value) if value.is_empty() => Err(KeyError::with_kind(
                    KeyErrorKind::InvalidHeader,
                    format!("empty request header `{name}`"),
                )),
                Some(value) => {
                    let normalised = self.normalise.as_ref().map(|f| f(value.as_bytes()));
                    let value = normalised.as_deref().unwrap_or(value.as_bytes());
                    Ok(match stored {
                        Stored::Digest => {
                            tagged(&[b"hdr:", name.as_str().as_bytes(), b":"], &digest(value))
                        }
                        // Escaped first, then bounded: the stored key stays within the bound.
                        Stored::InClear => tagged(
                            &[b"hdr:", name.as_str().as_bytes(), b":"],
                            &bounded(&neutralised(value)),
                        ),
                    })
                }
                None => Err(KeyError::with_kind(
                    KeyErrorKind::MissingHeader,
                    format!("missing request header `{name}`"),
                )),
            },
            Inner::FromFn(f) => f(parts).map(|key| tagged(&[b"fn:"], &bounded(&neutralised(&key)))),
        }
    }
}

impl fmt::Debug for KeyExtractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.inner {
            Inner::Global => f.write_str("KeyExtractor::Global"),
            Inner::PeerIp => f.write_str("KeyExtractor::PeerIp"),
            Inner::ClientIp(trusted, header) => f
                .debug_tuple("KeyExtractor::ClientIp")
                .field(trusted)
                .field(header)
                .finish(),
            Inner::ClientIpHops(hops) => f
                .debug_tuple("KeyExtractor::ClientIpHops")
                .field(hops)
                .finish(),
            Inner::Header(name, stored) => f
                .debug_tuple("KeyExtractor::Header")
                .field(name)
                .field(stored)
                .finish(),
            Inner::FromFn(_) => f.write_str("KeyExtractor::FromFn"),
        }
    }
}

/// `tag` (the key's source, so that keys from two extractors never collide) and `key`.
fn tagged(tag: &[&[u8]], key: &[u8]) -> Vec<u8> {
    let mut tagged =
        Vec::with_capacity(tag.iter().map(|part| part.len()).sum::<usize>() + key.len());
    for part in tag {
        tagged.extend_from_slice(part);
    }
    tagged.extend_from_slice(key);
    tagged
}

/// `key` with its braces written as `%7B` and `%7D` (and `%` as `%25`, so that two keys stay
/// two): a client's key is part of a Redis key name, where a `{hash tag}` would choose the
/// cluster slot.
pub(crate) fn neutralised(key: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if !key.iter().any(|b| matches!(b, b'{' | b'}' | b'%')) {
        return std::borrow::Cow::Borrowed(key);
    }
    let mut escaped = Vec::with_capacity(key.len() + 8);
    for &byte in key {
        match byte {
            b'{' => escaped.extend_from_slice(b"%7B"),
            b'}' => escaped.extend_from_slice(b"%7D"),
            b'%' => escaped.extend_from_slice(b"%25"),
            other => escaped.push(other),
        }
    }
    std::borrow::Cow::Owned(escaped)
}

/// `ip:` and the address: an IPv4 one whole, an IPv6 one as its network of `ipv6_prefix`
/// bits (`ip:2001:db8:1:2::/64`), or whole at 128 bits.
fn ip_key(ip: IpAddr, ipv6_prefix: u8) -> Vec<u8> {
    match ip {
        // The common case, written by hand: formatting through `Display` cost more than the
        // rest of the key's work. The text is the same.
        IpAddr::V4(v4) => {
            let mut key = Vec::with_capacity(18);
            key.extend_from_slice(b"ip:");
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    key.push(b'.');
                }
                if octet >= 100 {
                    key.push(b'0' + octet / 100);
                }
                if octet >= 10 {
                    key.push(b'0' + octet / 10 % 10);
                }
                key.push(b'0' + octet % 10);
            }
            key
        }
        IpAddr::V6(v6) if ipv6_prefix >= 128 => format!("ip:{v6}").into_bytes(),
        IpAddr::V6(v6) => {
            let mask = u128::MAX << (128 - u32::from(ipv6_prefix.max(1)));
            let network = Ipv6Addr::from(u128::from(v6) & mask);
            format!("ip:{network}/{ipv6_prefix}").into_bytes()
        }
    }
}

/// A header name given as text, lowercased as HTTP/2 sends it.
fn header_name(name: &str) -> Result<HeaderName> {
    HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
        Error::invalid_argument(format!(
            "{name:?} is not a header name: it needs at least one character and only \
             letters, digits and !#$%&'*+-.^_`|~"
        ))
    })
}

#[cfg(test)]
mod tests;
