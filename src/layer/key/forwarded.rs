//! Reading the client's address from the peer's and from a forwarding header
//! (`X-Forwarded-For`, `Forwarded`, `X-Real-IP`), walking only through trusted proxies.

use std::net::{IpAddr, SocketAddr};

use http::HeaderName;
use http::header::FORWARDED;
use http::request::Parts;
use ipnet::IpNet;

use super::{KeyError, KeyErrorKind};

/// How many forwarding hops [`KeyExtractor::client_ip`](super::KeyExtractor::client_ip) examines at most, so that a huge
/// header costs little.
pub(super) const MAX_HOPS: usize = 32;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

/// The one forwarding header a `client_ip` extractor reads. Never both: a proxy appends to
/// one of them and passes the other through, so falling back from one to the other would
/// let a client write its own key.
#[derive(Debug, Clone, Copy)]
pub(super) enum Forwarding {
    XForwardedFor,
    Forwarded,
    XRealIp,
}

pub(super) fn peer_ip(parts: &Parts) -> Result<IpAddr, KeyError> {
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

pub(super) fn client_ip(
    parts: &Parts,
    trusted: &[IpNet],
    header: Forwarding,
) -> Result<IpAddr, KeyError> {
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
pub(super) fn client_ip_hops(parts: &Parts, hops: usize) -> Result<IpAddr, KeyError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brackets_are_for_ipv6() {
        assert_eq!(
            x_forwarded_for("[2001:db8::7]"),
            Some("2001:db8::7".parse().expect("an address"))
        );
        assert_eq!(x_forwarded_for("[203.0.113.7]"), None);
    }
}
