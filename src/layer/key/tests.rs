//! The key extractors, request by request.

use std::net::SocketAddr;

use http::{HeaderValue, Request, StatusCode};

use super::*;
use crate::coordination::{HASHED_NAME_PREFIX, MAX_NAME_LEN};

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
    KeyExtractor::client_ip_forwarded(["10.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()])
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
