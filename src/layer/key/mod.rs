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
//! - a plain [`SocketAddr`], for hyper and tower servers that insert it themselves.
//!
//! A request with neither fails with [`KeyErrorKind::MissingPeerAddress`]: the server is
//! misconfigured, so it is an internal error rather than the client's fault.

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use crate::coordination::name::{bounded, digest};
#[cfg(doc)]
use crate::coordination::{HASHED_NAME_PREFIX, MAX_NAME_LEN};
use crate::error::{Error, Result};
use http::header::FORWARDED;
use http::request::Parts;
use http::{HeaderName, StatusCode};
/// An IP network (re-exported from the `ipnet` crate), which a [`TrustedProxy`] is built
/// from.
pub use ipnet::IpNet;
pub use trusted_proxy::{InvalidTrustedProxy, TrustedProxy};

mod trusted_proxy;

/// How many forwarding hops [`KeyExtractor::client_ip`] examines at most, so that a huge
/// header costs little.
const MAX_HOPS: usize = 32;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

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

/// The one forwarding header a `client_ip` extractor reads. Never both: a proxy appends to
/// one of them and passes the other through, so falling back from one to the other would
/// let a client write its own key.
#[derive(Debug, Clone, Copy)]
enum Forwarding {
    XForwardedFor,
    Forwarded,
    XRealIp,
}

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

fn peer_ip(parts: &Parts) -> Result<IpAddr, KeyError> {
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Ok(addr.ip().to_canonical());
    }
    match parts.extensions.get::<SocketAddr>() {
        Some(addr) => Ok(addr.ip().to_canonical()),
        None => Err(KeyError::with_kind(
            KeyErrorKind::MissingPeerAddress,
            "no peer address in the request extensions (neither `ConnectInfo<SocketAddr>` \
             nor `SocketAddr`): serve the app with \
             `into_make_service_with_connect_info::<SocketAddr>()`, or key the limit by \
             something else (`KeyExtractor::global`, `header`, `from_fn`)",
        )),
    }
}

fn client_ip(parts: &Parts, trusted: &[IpNet], header: Forwarding) -> Result<IpAddr, KeyError> {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    let peer = peer_ip(parts)?;
    if !is_trusted(&peer) {
        return Ok(peer);
    }

    let (name, parse): (_, fn(&str) -> Option<IpAddr>) = match header {
        Forwarding::Forwarded => (FORWARDED, forwarded_for),
        Forwarding::XForwardedFor => (X_FORWARDED_FOR, x_forwarded_for),
        Forwarding::XRealIp => {
            // One address, set by the nearest proxy: no walk.
            // Several values: a proxy appended its own to one the client sent, and which is
            // whose cannot be told; the peer's address is the key then.
            let mut values = parts.headers.get_all(X_REAL_IP).iter();
            let real = values
                .next()
                .filter(|_| values.next().is_none())
                .and_then(|value| value.to_str().ok())
                .and_then(|value| x_forwarded_for(value.trim()))
                .map(|ip| ip.to_canonical())
                .filter(can_be_a_client);
            return Ok(real.unwrap_or(peer));
        }
    };
    let hops = forwarded_hops(parts, name, parse);

    let mut client = peer;
    for hop in hops.take(MAX_HOPS) {
        match hop {
            Some(ip) if is_trusted(&ip) => client = ip,
            Some(ip) => return Ok(ip),
            // No trusted proxy vouches for this entry, so whatever lies left of it may
            // have been written by the client.
            None => break,
        }
    }
    Ok(client)
}

/// The addresses of a forwarding header's entries, the nearest first (right to left across
/// its lines); `None` for an entry that names no client address.
fn forwarded_hops<'a>(
    parts: &'a Parts,
    name: HeaderName,
    parse: fn(&str) -> Option<IpAddr>,
) -> impl Iterator<Item = Option<IpAddr>> + 'a {
    parts
        .headers
        .get_all(name)
        .iter()
        .rev()
        .flat_map(|line| line.as_bytes().rsplit(|&b| b == b','))
        .map(move |hop| {
            let hop = std::str::from_utf8(hop).ok()?;
            parse(hop.trim())
                .map(|ip| ip.to_canonical())
                .filter(can_be_a_client)
        })
}

/// The client behind `hops` proxies of unknown addresses (see
/// [`KeyExtractor::client_ip_hops`]).
fn client_ip_hops(parts: &Parts, hops: usize) -> Result<IpAddr, KeyError> {
    let mut client = peer_ip(parts)?;
    for hop in forwarded_hops(parts, X_FORWARDED_FOR, x_forwarded_for).take(hops) {
        match hop {
            Some(ip) => client = ip,
            None => break,
        }
    }
    Ok(client)
}

/// Whether a client can send from `ip`: not the unspecified address (`0.0.0.0`, `::`), the
/// IPv4 broadcast address or a multicast address, which a forwarding header can name but no
/// connection comes from.
fn can_be_a_client(ip: &IpAddr) -> bool {
    let broadcast = matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
    !(ip.is_unspecified() || ip.is_multicast() || broadcast)
}

/// The address of one `X-Forwarded-For` entry, which some proxies write with a port, and
/// some bracket when IPv6 (`[2001:db8::1]`, with or without a port).
fn x_forwarded_for(entry: &str) -> Option<IpAddr> {
    entry
        .parse()
        .or_else(|_| entry.parse::<SocketAddr>().map(|addr| addr.ip()))
        .or_else(|_| {
            entry
                .strip_prefix('[')
                .and_then(|rest| rest.strip_suffix(']'))
                .ok_or(())
                .and_then(|inner| inner.parse::<std::net::Ipv6Addr>().map_err(drop))
                .map(IpAddr::V6)
        })
        .ok()
}

/// The address in the `for=` parameter of one `Forwarded` element.
///
/// Parameters are split naively on `;`: a quoted value holding `;` or `,` makes the element
/// unreadable, which only ever ends the walk early.
fn forwarded_for(element: &str) -> Option<IpAddr> {
    let node = element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then_some(value.trim())
    })?;
    let node = node
        .strip_prefix('"')
        .and_then(|node| node.strip_suffix('"'))
        .unwrap_or(node);

    // node = nodename [ ":" node-port ], where an IPv6 nodename is bracketed so that its
    // colons are not mistaken for the port's.
    let (name, port) = match node.strip_prefix('[') {
        Some(rest) => rest.split_once(']')?,
        None => node.split_at(node.find(':').unwrap_or(node.len())),
    };
    if !(port.is_empty() || port.strip_prefix(':').is_some_and(is_node_port)) {
        return None;
    }
    // `unknown` and obfuscated identifiers such as `_hidden` name no address.
    name.parse().ok()
}

/// A port number, or an obfuscated port such as `_9c2e` (RFC 7239, section 6.3).
fn is_node_port(port: &str) -> bool {
    !port.is_empty()
        && port
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Why a request has no rate-limit key.
///
/// [`status`](Self::status) is the HTTP status a layer answers with.
///
/// # Example
///
/// ```
/// use http::StatusCode;
/// use leasehold::layer::key::{KeyError, KeyErrorKind, KeyExtractor};
///
/// // Key by tenant, from a header that only authenticated requests carry.
/// let by_tenant = KeyExtractor::from_fn(|parts| {
///     parts
///         .headers
///         .get("x-tenant")
///         .map(|tenant| tenant.as_bytes().to_vec())
///         .ok_or_else(|| KeyError::new("no tenant: is the request authenticated?"))
/// });
/// let (parts, ()) = http::Request::new(()).into_parts();
/// let err = by_tenant.extract(&parts).expect_err("no tenant header");
/// assert_eq!(err.kind(), KeyErrorKind::Custom);
/// assert_eq!(err.status(), StatusCode::BAD_REQUEST);
/// ```
#[derive(Debug)]
pub struct KeyError {
    kind: KeyErrorKind,
    reason: Cow<'static, str>,
}

/// The kind of a [`KeyError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyErrorKind {
    /// The request carries no peer address: the server is not set up to record it.
    MissingPeerAddress,
    /// The request lacks the header that holds the key.
    MissingHeader,
    /// The header that holds the key has a value that names no client.
    InvalidHeader,
    /// Raised by a [`KeyExtractor::from_fn`] closure.
    Custom,
}

impl KeyError {
    /// An error of kind [`KeyErrorKind::Custom`], for [`KeyExtractor::from_fn`] closures.
    pub fn new(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::with_kind(KeyErrorKind::Custom, reason)
    }

    fn with_kind(kind: KeyErrorKind, reason: impl Into<Cow<'static, str>>) -> Self {
        Self {
            kind,
            reason: reason.into(),
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> KeyErrorKind {
        self.kind
    }

    /// The response status: `500 Internal Server Error` for a missing peer address, which is
    /// the server's fault, and `400 Bad Request` otherwise.
    pub fn status(&self) -> StatusCode {
        match self.kind {
            KeyErrorKind::MissingPeerAddress => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for KeyError {}

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
mod tests {
    use super::*;
    use crate::coordination::{HASHED_NAME_PREFIX, MAX_NAME_LEN};

    use http::{HeaderValue, Request};

    fn parts(peer: Option<&str>, headers: &[(&str, &str)]) -> Parts {
        let mut builder = Request::builder();
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        if let Some(peer) = peer {
            builder = builder.extension(peer.parse::<SocketAddr>().unwrap());
        }
        builder.body(()).unwrap().into_parts().0
    }

    #[test]
    fn ip_keys_read_as_display_writes_them() {
        let ips = [
            "0.0.0.0",
            "1.2.3.4",
            "10.99.100.255",
            "255.255.255.255",
            "::1",
            "2001:db8::7",
        ];
        for ip in ips {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(ip_key(ip, 128), format!("ip:{ip}").into_bytes());
        }
        for octet in 0..=255u8 {
            let ip = IpAddr::from([octet, 0, octet, 9]);
            assert_eq!(ip_key(ip, 64), format!("ip:{ip}").into_bytes());
        }
    }

    #[test]
    fn ipv6_clients_are_keyed_by_their_prefix() {
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        let key = |text: &str, bits| String::from_utf8(ip_key(ip(text), bits)).unwrap();
        assert_eq!(
            key("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 64),
            "ip:2001:db8:1:2::/64"
        );
        assert_eq!(key("2001:db8:1:2::1", 64), key("2001:db8:1:2:ffff::9", 64));
        assert_ne!(key("2001:db8:1:2::1", 64), key("2001:db8:1:3::1", 64));
        assert_eq!(key("2001:db8:aa:bbcc::7", 56), "ip:2001:db8:aa:bb00::/56");
        assert_eq!(key("2001:db8::7", 128), "ip:2001:db8::7");
        assert_eq!(key("2001:db8::7", 1), "ip:::/1");
        assert_eq!(key("ff00::7", 1), "ip:8000::/1");
    }

    #[test]
    fn a_host_rotating_through_its_64_is_one_client_on_every_address_extractor() {
        let first = parts(Some("[2001:db8:1:2::1]:5000"), &[]);
        let second = parts(Some("[2001:db8:1:2:9:9:9:9]:5000"), &[]);
        let peer = KeyExtractor::peer_ip();
        assert_eq!(key(&peer, &first), key(&peer, &second));
        assert_eq!(key(&peer, &first), "ip:2001:db8:1:2::/64");
        let per_address = KeyExtractor::peer_ip().ipv6_prefix(128).unwrap();
        assert_ne!(key(&per_address, &first), key(&per_address, &second));
        // Behind trusted proxies, through each forwarding header.
        let via = |header: &str, value: &str| parts(Some("10.0.0.2:41000"), &[(header, value)]);
        for (extractor, header, one, other) in [
            (
                behind_proxies(),
                "x-forwarded-for",
                "2001:db8:1:2::1",
                "2001:db8:1:2::2",
            ),
            (
                behind_forwarding_proxies(),
                "forwarded",
                r#"for="[2001:db8:1:2::1]""#,
                r#"for="[2001:db8:1:2::2]:80""#,
            ),
            (
                KeyExtractor::client_ip_real_ip(["10.0.0.0/8".parse().unwrap()]),
                "x-real-ip",
                "2001:db8:1:2::1",
                "2001:db8:1:2::2",
            ),
            (
                KeyExtractor::client_ip_hops(1),
                "x-forwarded-for",
                "2001:db8:1:2::1",
                "2001:db8:1:2::2",
            ),
        ] {
            let (one, other) = (
                key(&extractor, &via(header, one)),
                key(&extractor, &via(header, other)),
            );
            assert_eq!(one, "ip:2001:db8:1:2::/64", "{header}");
            assert_eq!(one, other, "{header}");
        }
        // The mapping is undone first: an IPv4-mapped client stays one IPv4 address.
        let mapped = parts(Some("[::ffff:203.0.113.7]:5000"), &[]);
        assert_eq!(key(&peer, &mapped), "ip:203.0.113.7");
        let neighbour = parts(Some("[::ffff:203.0.113.8]:5000"), &[]);
        assert_ne!(key(&peer, &mapped), key(&peer, &neighbour));
    }

    #[test]
    fn an_ipv6_prefix_outside_1_to_128_is_refused() {
        for bits in [0, 129, 255] {
            let err = KeyExtractor::peer_ip()
                .ipv6_prefix(bits)
                .expect_err("refused");
            assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument, "{bits}");
        }
        assert!(KeyExtractor::peer_ip().ipv6_prefix(48).is_ok());
    }

    #[test]
    fn a_bracketed_ipv6_entry_without_a_port_is_read() {
        assert_eq!(
            via_proxy(&[("x-forwarded-for", "[2001:db8::7], fd00::1")]),
            "ip:2001:db8::/64"
        );
        assert_eq!(
            x_forwarded_for("[203.0.113.7]"),
            None,
            "brackets are for IPv6"
        );
    }

    #[test]
    fn a_normalised_header_keys_its_variants_alike() {
        let request = |value: &str| parts(None, &[("x-tenant", value)]);
        let raw = KeyExtractor::header_in_clear("x-tenant").unwrap();
        assert_ne!(key(&raw, &request("Acme")), key(&raw, &request("acme")));
        for extractor in [
            KeyExtractor::header_in_clear("x-tenant").unwrap(),
            KeyExtractor::header("x-tenant").unwrap(),
        ] {
            let lower = extractor.normalise(|value| value.to_ascii_lowercase());
            assert_eq!(key(&lower, &request("Acme")), key(&lower, &request("acme")));
        }
    }

    #[test]
    fn hashed_addresses_hide_the_address_and_keep_its_key() {
        let hashed = KeyExtractor::peer_ip().hash_addresses();
        let one = key(&hashed, &parts(Some("203.0.113.7:1"), &[]));
        assert!(
            one.starts_with("ip:sha256:") && !one.contains("203.0.113"),
            "{one}"
        );
        assert_eq!(one, key(&hashed, &parts(Some("203.0.113.7:2"), &[])));
        assert_ne!(one, key(&hashed, &parts(Some("203.0.113.8:1"), &[])));
        // The /64 still: one host's addresses are one key.
        assert_eq!(
            key(&hashed, &parts(Some("[2001:db8:1:2::1]:1"), &[])),
            key(&hashed, &parts(Some("[2001:db8:1:2::9]:1"), &[]))
        );
    }

    #[test]
    fn the_client_address_is_the_one_the_walk_finds_whole() {
        let proxies = behind_proxies();
        let request = parts(
            Some("10.0.0.2:41000"),
            &[("x-forwarded-for", "2001:db8:1:2::7, 10.0.0.9")],
        );
        assert_eq!(
            proxies.client_address(&request).unwrap(),
            Some("2001:db8:1:2::7".parse().unwrap())
        );
        assert_eq!(
            KeyExtractor::global().client_address(&request).unwrap(),
            None
        );
    }

    fn key(extractor: &KeyExtractor, parts: &Parts) -> String {
        String::from_utf8(extractor.extract(parts).unwrap()).unwrap()
    }

    fn behind_proxies() -> KeyExtractor {
        KeyExtractor::client_ip(["10.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()])
    }

    fn behind_forwarding_proxies() -> KeyExtractor {
        KeyExtractor::client_ip_forwarded([
            "10.0.0.0/8".parse().unwrap(),
            "fd00::/8".parse().unwrap(),
        ])
    }

    /// The key `behind_proxies` (or, for a `Forwarded` header, `behind_forwarding_proxies`)
    /// derives for a request from a trusted peer.
    fn via_proxy(headers: &[(&str, &str)]) -> String {
        let extractor = if headers.iter().any(|(name, _)| *name == "forwarded") {
            behind_forwarding_proxies()
        } else {
            behind_proxies()
        };
        key(&extractor, &parts(Some("10.0.0.2:443"), headers))
    }

    #[test]
    fn header_names_are_text_in_any_case_and_bad_ones_are_named() {
        let parts = parts(None, &[("x-tenant", "acme")]);
        for name in ["x-tenant", "X-Tenant", "X-TENANT"] {
            let extractor = KeyExtractor::header_in_clear(name).unwrap();
            assert_eq!(key(&extractor, &parts), "hdr:x-tenant:acme", "{name}");
        }
        let typed = KeyExtractor::header_in_clear(HeaderName::from_static("x-tenant")).unwrap();
        assert_eq!(key(&typed, &parts), "hdr:x-tenant:acme");
        for bad in ["", "x tenant", "x-tenant:", "x\ntenant"] {
            let err = KeyExtractor::header(bad).map(|_| ()).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument);
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn types_cross_threads() {
        fn shareable<T: Clone + Send + Sync + 'static>() {}
        fn boxable<T: std::error::Error + Send + Sync + 'static>() {}
        shareable::<KeyExtractor>();
        boxable::<KeyError>();
    }

    #[test]
    fn global_is_one_key_for_everyone() {
        let global = KeyExtractor::global();
        assert_eq!(key(&global, &parts(None, &[])), "global");
        assert_eq!(key(&global, &parts(Some("203.0.113.7:1"), &[])), "global");
    }

    #[test]
    fn peer_ip_reads_the_socket_addr_extension() {
        let peer = KeyExtractor::peer_ip();
        assert_eq!(
            key(&peer, &parts(Some("203.0.113.7:5000"), &[])),
            "ip:203.0.113.7"
        );
        assert_eq!(
            key(&peer, &parts(Some("[2001:db8::1]:5000"), &[])),
            "ip:2001:db8::/64"
        );
    }

    #[test]
    fn peer_ip_ignores_forwarding_headers() {
        let parts = parts(
            Some("203.0.113.7:5000"),
            &[("x-forwarded-for", "198.51.100.1")],
        );
        assert_eq!(key(&KeyExtractor::peer_ip(), &parts), "ip:203.0.113.7");
    }

    #[cfg(feature = "axum")]
    #[test]
    fn peer_ip_reads_axum_connect_info() {
        let mut parts = parts(None, &[]);
        parts
            .extensions
            .insert(axum::extract::ConnectInfo(SocketAddr::from((
                [203, 0, 113, 7],
                5000,
            ))));
        assert_eq!(key(&KeyExtractor::peer_ip(), &parts), "ip:203.0.113.7");
    }

    #[test]
    fn ipv4_mapped_peer_is_keyed_as_ipv4() {
        let parts = parts(Some("[::ffff:203.0.113.7]:5000"), &[]);
        assert_eq!(key(&KeyExtractor::peer_ip(), &parts), "ip:203.0.113.7");
    }

    #[test]
    fn ipv4_mapped_peer_matches_ipv4_trusted_network() {
        let parts = parts(
            Some("[::ffff:10.0.0.2]:443"),
            &[("x-forwarded-for", "::ffff:203.0.113.7")],
        );
        assert_eq!(key(&behind_proxies(), &parts), "ip:203.0.113.7");
    }

    #[test]
    fn missing_peer_is_a_server_error() {
        for extractor in [KeyExtractor::peer_ip(), behind_proxies()] {
            let error = extractor.extract(&parts(None, &[])).unwrap_err();
            assert_eq!(error.kind(), KeyErrorKind::MissingPeerAddress);
            assert_eq!(error.status(), StatusCode::INTERNAL_SERVER_ERROR);
            // The server's log says how to fix it.
            assert!(
                error
                    .to_string()
                    .contains("into_make_service_with_connect_info::<SocketAddr>()"),
                "{error}"
            );
        }
    }

    #[test]
    fn header_keys_by_first_value() {
        let extractor = KeyExtractor::header_in_clear("x-api-key").unwrap();
        let parts = parts(None, &[("x-api-key", "alpha"), ("x-api-key", "beta")]);
        assert_eq!(key(&extractor, &parts), "hdr:x-api-key:alpha");
    }

    #[test]
    fn header_keeps_raw_bytes() {
        let extractor = KeyExtractor::header_in_clear("x-api-key").unwrap();
        let mut parts = parts(None, &[]);
        let raw = b"caf\xe9";
        parts
            .headers
            .insert("x-api-key", HeaderValue::from_bytes(raw).unwrap());
        assert_eq!(
            extractor.extract(&parts).unwrap(),
            [&b"hdr:x-api-key:"[..], raw].concat()
        );
    }

    #[test]
    fn header_keys_are_digests_by_default() {
        let extractor = KeyExtractor::header("x-api-key").unwrap();
        let key_of = |value: &str| key(&extractor, &parts(None, &[("x-api-key", value)]));
        // echo -n k-123 | sha256sum
        assert_eq!(
            key_of("k-123"),
            "hdr:x-api-key:sha256:3605a9e4358da4302f8acea41f0f52cef85d0e3f727c7b020fc7305aec8d56b4"
        );
        assert_eq!(key_of("k-123"), key_of("k-123"));
        assert_ne!(key_of("k-123"), key_of("k-124"));
        assert!(!key_of("secret-token").contains("secret"));
    }

    #[test]
    fn missing_header_is_a_bad_request() {
        let extractor = KeyExtractor::header("x-api-key").unwrap();
        let error = extractor.extract(&parts(None, &[])).unwrap_err();
        assert_eq!(error.kind(), KeyErrorKind::MissingHeader);
        assert_eq!(error.status(), StatusCode::BAD_REQUEST);
        assert_eq!(error.to_string(), "missing request header `x-api-key`");
    }

    #[test]
    fn empty_header_is_invalid() {
        let extractor = KeyExtractor::header("x-api-key").unwrap();
        let error = extractor
            .extract(&parts(None, &[("x-api-key", "")]))
            .unwrap_err();
        assert_eq!(error.kind(), KeyErrorKind::InvalidHeader);
        assert_eq!(error.status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn from_fn_runs_the_closure() {
        let by_path = KeyExtractor::from_fn(|parts| match parts.uri.path() {
            "/" => Err(KeyError::new("no tenant")),
            path => Ok(path.as_bytes().to_vec()),
        });
        let mut tenant = parts(None, &[]);
        tenant.uri = "/acme".parse().unwrap();
        assert_eq!(key(&by_path.clone(), &tenant), "fn:/acme");

        let error = by_path.extract(&parts(None, &[])).unwrap_err();
        assert_eq!(error.kind(), KeyErrorKind::Custom);
        assert_eq!(error.status(), StatusCode::BAD_REQUEST);
        assert_eq!(error.to_string(), "no tenant");
    }

    #[test]
    fn untrusted_peer_cannot_spoof_forwarding_headers() {
        let parts = parts(
            Some("198.51.100.66:5000"),
            &[
                ("x-forwarded-for", "203.0.113.7"),
                ("forwarded", "for=203.0.113.8"),
            ],
        );
        assert_eq!(key(&behind_proxies(), &parts), "ip:198.51.100.66");
    }

    #[test]
    fn no_trusted_proxies_means_peer_ip() {
        let extractor = KeyExtractor::client_ip([]);
        let parts = parts(Some("10.0.0.2:443"), &[("x-forwarded-for", "203.0.113.7")]);
        assert_eq!(key(&extractor, &parts), "ip:10.0.0.2");
    }

    #[test]
    fn trusted_peer_without_headers_is_the_client() {
        assert_eq!(via_proxy(&[]), "ip:10.0.0.2");
    }

    #[test]
    fn x_forwarded_for_through_two_trusted_proxies() {
        // The client forged the two left entries; proxies 10.0.0.1 and 10.0.0.2 are real.
        let chain = "192.0.2.1, 10.9.9.9, 203.0.113.7, 10.0.0.1";
        assert_eq!(via_proxy(&[("x-forwarded-for", chain)]), "ip:203.0.113.7");
    }

    #[test]
    fn x_forwarded_for_accepts_ports_and_ipv6() {
        assert_eq!(
            via_proxy(&[("x-forwarded-for", "203.0.113.7:5000")]),
            "ip:203.0.113.7"
        );
        assert_eq!(
            via_proxy(&[("x-forwarded-for", "2001:db8::1")]),
            "ip:2001:db8::/64"
        );
        assert_eq!(
            via_proxy(&[("x-forwarded-for", "[2001:db8::1]:5000, fd00::1")]),
            "ip:2001:db8::/64"
        );
    }

    #[test]
    fn header_lines_form_one_list_in_order() {
        let lines = [
            ("x-forwarded-for", "192.0.2.1"),
            ("x-forwarded-for", "203.0.113.7, 10.0.0.1"),
            ("x-forwarded-for", "10.0.0.3"),
        ];
        assert_eq!(via_proxy(&lines), "ip:203.0.113.7");
    }

    #[test]
    fn all_trusted_hops_give_the_leftmost() {
        assert_eq!(
            via_proxy(&[("x-forwarded-for", "10.0.0.5, 10.0.0.1")]),
            "ip:10.0.0.5"
        );
    }

    #[test]
    fn garbage_stops_the_walk_at_the_last_trusted_hop() {
        let forged = "192.0.2.1, not-an-ip, 10.0.0.1";
        assert_eq!(via_proxy(&[("x-forwarded-for", forged)]), "ip:10.0.0.1");
        assert_eq!(
            via_proxy(&[("x-forwarded-for", "192.0.2.1, ")]),
            "ip:10.0.0.2"
        );
        assert_eq!(
            via_proxy(&[("x-forwarded-for", "192.0.2.1,,")]),
            "ip:10.0.0.2"
        );
        assert_eq!(via_proxy(&[("x-forwarded-for", "")]), "ip:10.0.0.2");
    }

    #[test]
    fn non_utf8_line_stops_the_walk() {
        let mut parts = parts(Some("10.0.0.2:443"), &[("x-forwarded-for", "192.0.2.1")]);
        let line = HeaderValue::from_bytes(b"\xff, 10.0.0.1").unwrap();
        parts.headers.append("x-forwarded-for", line);
        assert_eq!(key(&behind_proxies(), &parts), "ip:10.0.0.1");
    }

    #[test]
    fn hops_beyond_the_cap_are_not_examined() {
        let chain = format!("203.0.113.7{}", ", 10.0.0.1".repeat(MAX_HOPS));
        assert_eq!(via_proxy(&[("x-forwarded-for", &chain)]), "ip:10.0.0.1");
        let chain = format!("203.0.113.7{}", ", 10.0.0.1".repeat(MAX_HOPS - 1));
        assert_eq!(via_proxy(&[("x-forwarded-for", &chain)]), "ip:203.0.113.7");
    }

    #[test]
    fn each_extractor_reads_only_its_own_header() {
        let headers = [
            ("x-forwarded-for", "192.0.2.1"),
            ("forwarded", "for=203.0.113.7"),
        ];
        let request = parts(Some("10.0.0.2:443"), &headers);
        assert_eq!(key(&behind_proxies(), &request), "ip:192.0.2.1");
        assert_eq!(
            key(&behind_forwarding_proxies(), &request),
            "ip:203.0.113.7"
        );
        // A client cannot pick its key by sending the header its proxy does not write.
        let spoofed = parts(Some("10.0.0.2:443"), &[("forwarded", "for=198.51.100.1")]);
        assert_eq!(key(&behind_proxies(), &spoofed), "ip:10.0.0.2");
        let spoofed = parts(Some("10.0.0.2:443"), &[("x-forwarded-for", "198.51.100.1")]);
        assert_eq!(key(&behind_forwarding_proxies(), &spoofed), "ip:10.0.0.2");
    }

    #[test]
    fn forwarded_quoted_ipv6_with_port() {
        let header = r#"for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.1"#;
        assert_eq!(via_proxy(&[("forwarded", header)]), "ip:2001:db8:cafe::/64");
    }

    #[test]
    fn forwarded_ipv4_with_port_and_obfuscated_port() {
        assert_eq!(
            via_proxy(&[("forwarded", r#"for="203.0.113.7:4711""#)]),
            "ip:203.0.113.7"
        );
        assert_eq!(
            via_proxy(&[("forwarded", r#"for="[2001:db8::1]:_p0rt""#)]),
            "ip:2001:db8::/64"
        );
    }

    #[test]
    fn forwarded_parameter_names_ignore_case() {
        let header = "proto=https;For=203.0.113.7;by=10.0.0.2, FOR=10.0.0.1";
        assert_eq!(via_proxy(&[("forwarded", header)]), "ip:203.0.113.7");
    }

    #[test]
    fn forwarded_unknown_stops_the_walk() {
        let header = "for=192.0.2.1, for=unknown, for=10.0.0.1";
        assert_eq!(via_proxy(&[("forwarded", header)]), "ip:10.0.0.1");
        assert_eq!(via_proxy(&[("forwarded", "for=unknown")]), "ip:10.0.0.2");
    }

    #[test]
    fn forwarded_obfuscated_or_malformed_stops_the_walk() {
        for element in [
            "for=_hidden",
            "proto=https",
            "for=2001:db8::1",
            r#"for="[2001:db8::1"#,
            r#"for="[2001:db8::1]x""#,
            "for=203.0.113.7:",
        ] {
            let header = format!("for=192.0.2.1, {element}, for=10.0.0.1");
            assert_eq!(
                via_proxy(&[("forwarded", &header)]),
                "ip:10.0.0.1",
                "{element}"
            );
        }
    }

    #[test]
    fn x_real_ip_is_believed_from_trusted_peers_only() {
        let real_ip = KeyExtractor::client_ip_real_ip(["10.0.0.0/8".parse().unwrap()]);
        let headers = [
            ("x-real-ip", "203.0.113.7"),
            ("x-forwarded-for", "198.51.100.1"),
        ];
        assert_eq!(
            key(&real_ip, &parts(Some("10.0.0.2:443"), &headers)),
            "ip:203.0.113.7"
        );
        assert_eq!(
            key(&real_ip, &parts(Some("192.0.2.5:443"), &headers)),
            "ip:192.0.2.5",
            "an untrusted peer is keyed by its own address"
        );
        let twice = parts(
            Some("10.0.0.2:443"),
            &[("x-real-ip", "198.51.100.66"), ("x-real-ip", "203.0.113.7")],
        );
        assert_eq!(
            key(&real_ip, &twice),
            "ip:10.0.0.2",
            "which is the proxy's?"
        );
        for bogus in ["", "not an address", "0.0.0.0"] {
            let headers = [("x-real-ip", bogus)];
            assert_eq!(
                key(&real_ip, &parts(Some("10.0.0.2:443"), &headers)),
                "ip:10.0.0.2",
                "{bogus:?}"
            );
        }
    }

    #[test]
    fn hops_count_from_the_peer() {
        let peer = Some("10.9.9.9:443");
        let xff = [("x-forwarded-for", "1.1.1.1, 198.51.100.1, 203.0.113.7")];
        let hops = |n| key(&KeyExtractor::client_ip_hops(n), &parts(peer, &xff));
        assert_eq!(hops(0), "ip:10.9.9.9");
        assert_eq!(hops(1), "ip:203.0.113.7");
        assert_eq!(hops(2), "ip:198.51.100.1");
        assert_eq!(hops(3), "ip:1.1.1.1");
        assert_eq!(hops(9), "ip:1.1.1.1", "fewer entries: the leftmost");
        let broken = [("x-forwarded-for", "1.1.1.1, garbage, 203.0.113.7")];
        let extractor = KeyExtractor::client_ip_hops(3);
        assert_eq!(
            key(&extractor, &parts(peer, &broken)),
            "ip:203.0.113.7",
            "stops at the last entry that names an address"
        );
    }

    #[test]
    fn addresses_no_client_sends_from_end_the_walk() {
        for bogus in ["0.0.0.0", "::", "255.255.255.255", "224.0.0.1", "ff02::1"] {
            // Behind the trusted proxy, the entry is not a client: the key is the proxy's.
            let header = format!("198.51.100.9, {bogus}");
            assert_eq!(
                via_proxy(&[("x-forwarded-for", &header)]),
                "ip:10.0.0.2",
                "{bogus}"
            );
        }
        assert_eq!(
            via_proxy(&[("x-forwarded-for", "198.51.100.9")]),
            "ip:198.51.100.9"
        );
    }

    #[test]
    fn forwarded_ipv4_mapped_is_keyed_as_ipv4() {
        let header = r#"for="[::ffff:203.0.113.7]""#;
        assert_eq!(via_proxy(&[("forwarded", header)]), "ip:203.0.113.7");
    }

    #[test]
    fn long_keys_are_hashed_and_short_ones_kept() {
        let api_key = KeyExtractor::header_in_clear("x-api-key").unwrap();
        let tag = "hdr:x-api-key:";
        let exact = "k".repeat(MAX_NAME_LEN);
        assert_eq!(
            key(&api_key, &parts(None, &[("x-api-key", &exact)])),
            format!("{tag}{exact}")
        );
        let long = "k".repeat(64 * 1024);
        let hashed = key(&api_key, &parts(None, &[("x-api-key", &long)]));
        assert_eq!(hashed.len(), tag.len() + HASHED_NAME_PREFIX.len() + 64);
        assert!(hashed.starts_with("hdr:x-api-key:sha256:"), "{hashed}");
        let other = key(
            &api_key,
            &parts(None, &[("x-api-key", &format!("{long}x"))]),
        );
        assert_ne!(hashed, other);
        // A value that looks like a hash is hashed in turn: no client can take another's.
        let lookalike = &hashed[tag.len()..];
        let forged = key(&api_key, &parts(None, &[("x-api-key", lookalike)]));
        assert_ne!(forged, hashed);
        assert!(forged.starts_with("hdr:x-api-key:sha256:"));
        let closure = KeyExtractor::from_fn(|_| Ok(vec![b'x'; MAX_NAME_LEN + 1]));
        assert!(key(&closure, &parts(None, &[])).starts_with("fn:sha256:"));
    }

    #[test]
    fn no_extractor_can_forge_another_ones_key() {
        let peer = parts(Some("203.0.113.7:5000"), &[]);
        let victim = key(&KeyExtractor::peer_ip(), &peer);
        let global = key(&KeyExtractor::global(), &peer);
        let in_clear = KeyExtractor::header_in_clear("x-tenant").unwrap();
        let closure = KeyExtractor::from_fn(|parts| {
            Ok(parts
                .headers
                .get("x-tenant")
                .map_or_else(Vec::new, |v| v.as_bytes().to_vec()))
        });
        for forged in [victim.as_str(), global.as_str(), "hdr:x-api-key:sha256:00"] {
            let request = parts(None, &[("x-tenant", forged)]);
            let by_header = key(&in_clear, &request);
            let by_closure = key(&closure, &request);
            for key in [&by_header, &by_closure] {
                assert_ne!(key.as_str(), victim);
                assert_ne!(key.as_str(), global);
                assert_ne!(key.as_str(), "hdr:x-api-key:sha256:00");
            }
        }
        // Two headers with the same value are two clients.
        let a = KeyExtractor::header("x-a").unwrap();
        let b = KeyExtractor::header("x-b").unwrap();
        let request = parts(None, &[("x-a", "same"), ("x-b", "same")]);
        assert_ne!(key(&a, &request), key(&b, &request));
    }

    #[test]
    fn braces_in_client_keys_choose_no_slot() {
        let in_clear = KeyExtractor::header_in_clear("x-tenant").unwrap();
        let braced = key(&in_clear, &parts(None, &[("x-tenant", "{slot}%")]));
        assert_eq!(braced, "hdr:x-tenant:%7Bslot%7D%25");
        // Written so, two different values stay two keys.
        let escaped = key(&in_clear, &parts(None, &[("x-tenant", "%7Bslot%7D%25")]));
        assert_ne!(braced, escaped);
        let closure = KeyExtractor::from_fn(|_| Ok(b"a{b}".to_vec()));
        assert_eq!(key(&closure, &parts(None, &[])), "fn:a%7Bb%7D");
        // No brace is left to make a hash tag: the slot is the whole key's.
        assert!(!braced.contains('{') && !braced.contains('}'));
    }
}
