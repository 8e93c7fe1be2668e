//! TLS to a Redis, and a cluster, the harness starts with a certificate authority of its
//! own: trusted by its root certificate, with a client certificate where the server asks
//! for one; and every way it can fail is a clear refusal, never a plain connection.

#![cfg(feature = "tls")]

mod support;

use std::time::Duration;

use leasehold::backend::redis::{RedisBackend, RedisBackendBuilder, TlsSettings};
use leasehold::coordination::lock::FencedLock;
use leasehold::coordination::rate_limit::FixedWindow;
use leasehold::{Coordination, ErrorKind};
use support::tls;
use support::unique_prefix;

/// `rediss://` to a port on this machine.
fn tls_url(port: &u16) -> String {
    format!("rediss://127.0.0.1:{port}")
}

/// `builder` with `settings` and a key prefix of `test`'s, connected and answering.
async fn connect_with(
    builder: RedisBackendBuilder,
    settings: TlsSettings,
    test: &str,
) -> leasehold::Result<RedisBackend> {
    let redis = builder
        .key_prefix(unique_prefix(test))
        .tls(settings)
        .connect()
        .await?;
    Coordination::from(redis.clone()).ready().await?;
    Ok(redis)
}

async fn connect(port: u16, settings: TlsSettings, test: &str) -> leasehold::Result<Coordination> {
    connect_with(RedisBackend::standalone(tls_url(&port)), settings, test)
        .await
        .map(Coordination::from)
}

/// A step decided over TLS, counted on the server.
async fn decide(coordination: &Coordination) {
    let window = FixedWindow::new(coordination, "tls", 2, Duration::from_secs(60)).expect("valid");
    assert!(
        window
            .try_acquire(b"k", 1)
            .await
            .expect("decided")
            .is_granted()
    );
    assert!(
        window
            .try_acquire(b"k", 1)
            .await
            .expect("decided")
            .is_granted()
    );
    assert!(
        !window
            .try_acquire(b"k", 1)
            .await
            .expect("decided")
            .is_granted()
    );
}

/// A server whose certificate a private authority signed: trusted by that authority's root
/// certificate (the public roots do not know it).
#[tokio::test]
async fn a_private_certificate_authority_is_trusted_by_its_root_certificate() {
    let (_server, port) = tls::server(false);
    let certificates = tls::certificates();
    let settings = TlsSettings::new().root_certificates_pem(certificates.ca());
    let coordination = connect(port, settings, "tls-ca")
        .await
        .expect("connected over TLS");
    decide(&coordination).await;
}

/// A server that asks for client certificates (mutual TLS): served with one the authority
/// signed, refused without.
#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let (_server, port) = tls::server(true);
    let certificates = tls::certificates();
    let (certificate, key) = certificates.client();
    let settings = TlsSettings::new()
        .root_certificates_pem(certificates.ca())
        .client_certificate_pem(certificate, key);
    let coordination = connect(port, settings, "mtls")
        .await
        .expect("connected with mTLS");
    decide(&coordination).await;

    let without = TlsSettings::new().root_certificates_pem(certificates.ca());
    let err = connect(port, without, "mtls-without")
        .await
        .expect_err("the server asks for a client certificate");
    assert_eq!(err.kind(), ErrorKind::Tls, "{err:?}");
    assert!(err.is_refused(), "never failed open: {err}");
}

/// A server certificate that does not verify (signed by an authority the client does not
/// trust; or no root given, so the public roots, which know none of these) is a refusal
/// that says so, at `connect`; and TLS settings with a plain `redis://` URL are refused
/// before anything is sent, never a plain connection.
#[tokio::test]
async fn a_certificate_that_does_not_verify_is_a_clear_refusal() {
    let (server, port) = tls::server(false);
    let certificates = tls::certificates();
    for (what, settings) in [
        (
            "another authority",
            TlsSettings::new().root_certificates_pem(certificates.stranger_ca()),
        ),
        ("the public roots", TlsSettings::new()),
    ] {
        let err = connect(port, settings, "tls-stranger")
            .await
            .expect_err("the certificate does not verify");
        assert_eq!(err.kind(), ErrorKind::Tls, "{what}: {err:?}");
        assert!(err.is_refused(), "{what}: never failed open: {err}");
        assert!(
            err.to_string().contains("certificate"),
            "{what}: says why: {err}"
        );
    }

    let plain = RedisBackend::standalone(server.url())
        .key_prefix(unique_prefix("tls-plain"))
        .tls(TlsSettings::new().root_certificates_pem(certificates.ca()))
        .connect()
        .await
        .expect_err("TLS settings with a plain URL");
    assert_eq!(plain.kind(), ErrorKind::InvalidArgument, "{plain:?}");
    assert!(plain.to_string().contains("rediss://"), "{plain}");
}

async fn connect_cluster(
    ports: &[u16],
    settings: TlsSettings,
    test: &str,
) -> leasehold::Result<RedisBackend> {
    connect_with(
        RedisBackend::cluster(ports.iter().map(tls_url)),
        settings,
        test,
    )
    .await
}

/// A cluster whose nodes a private authority vouches for, and that asks for client
/// certificates: served over TLS on every node (keys in each third of the slots, a watch's
/// tracking connection), and a certificate that does not verify, or none where one is
/// asked for, is a refusal that says so, as on one server.
#[tokio::test]
async fn a_cluster_is_reached_over_tls_and_refuses_what_does_not_verify() {
    let (cluster, ports) = tls::cluster(true);
    let certificates = tls::certificates();
    let (certificate, key) = certificates.client();
    let settings = TlsSettings::new()
        .root_certificates_pem(certificates.ca())
        .client_certificate_pem(certificate.clone(), key.clone());
    let redis = connect_cluster(&ports, settings, "tls-cluster")
        .await
        .expect("connected over TLS");
    let coordination = Coordination::from(redis.clone());
    decide(&coordination).await;
    // A watch's tracking connection, to the node that serves the key, speaks TLS too: a
    // write by another client wakes it.
    let mut watch = redis.watch_key(b"watched").await.expect("a watch over TLS");
    let mut other = cluster
        .client()
        .get_connection()
        .expect("the harness's client");
    let () = redis::cmd("SET")
        .arg(redis.physical_key(b"watched"))
        .arg("written")
        .query(&mut other)
        .expect("SET");
    tokio::time::timeout(Duration::from_secs(2), watch.changed())
        .await
        .expect("woken by the write");
    let window =
        FixedWindow::new(&coordination, "spread", 1, Duration::from_secs(60)).expect("valid");
    for key in 0..30u32 {
        assert!(
            window
                .try_acquire(&key.to_be_bytes(), 1)
                .await
                .expect("decided on the node that serves its slot")
                .is_granted()
        );
    }

    for (what, settings) in [
        (
            "another authority",
            TlsSettings::new()
                .root_certificates_pem(certificates.stranger_ca())
                .client_certificate_pem(certificate.clone(), key.clone()),
        ),
        (
            "no client certificate",
            TlsSettings::new().root_certificates_pem(certificates.ca()),
        ),
    ] {
        let err = connect_cluster(&ports, settings, "tls-cluster-refused")
            .await
            .expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::Tls, "{what}: {err:?}");
        assert!(err.is_refused(), "{what}: never failed open: {err}");
    }
    // One plain node URL among them: refused before anything is sent.
    let mut urls: Vec<String> = ports.iter().map(tls_url).collect();
    urls[1] = cluster.urls()[1].clone();
    let plain = RedisBackend::cluster(urls)
        .key_prefix(unique_prefix("tls-cluster-plain"))
        .tls(TlsSettings::new().root_certificates_pem(certificates.ca()))
        .connect()
        .await
        .expect_err("a plain node URL with TLS settings");
    assert_eq!(plain.kind(), ErrorKind::InvalidArgument, "{plain:?}");
}

/// Through Sentinel over TLS, the sentinels and the primary asking for client certificates:
/// a step decided and a watch woken at the primary; after the primary is killed and its
/// replica elected, steps go on at the new one, over TLS; and a certificate that does not
/// verify is a refusal that says so.
#[tokio::test]
async fn sentinel_finds_the_primary_over_tls_across_a_failover() {
    let setup = std::sync::Arc::new(tls::sentinel());
    let certificates = tls::certificates();
    let (certificate, key) = certificates.client();
    let connect = |roots: Vec<u8>| {
        RedisBackend::sentinel(setup.tls_sentinel_urls(), setup.service_name())
            .key_prefix(unique_prefix("tls-sentinel"))
            .transient_retry(Duration::from_secs(10))
            .tls(
                TlsSettings::new()
                    .root_certificates_pem(roots)
                    .client_certificate_pem(certificate.clone(), key.clone()),
            )
            .connect()
    };
    let redis = connect(certificates.ca())
        .await
        .expect("connected over TLS");
    let coordination = Coordination::from(redis.clone());
    coordination.ready().await.expect("the primary answers");
    decide(&coordination).await;
    let mut watch = redis.watch_key(b"watched").await.expect("a watch over TLS");
    let () = setup.current_master().cmd(&[
        "SET",
        &String::from_utf8_lossy(&redis.physical_key(b"watched")),
        "written",
    ]);
    tokio::time::timeout(Duration::from_secs(2), watch.changed())
        .await
        .expect("woken by the write");

    setup.kill_primary().await;
    // An acquisition, which is sent again once the connection to the dead primary is found
    // broken: through the sentinels, over TLS, to the new one.
    let lock = FencedLock::named(&coordination, "after-failover");
    let lease = lock
        .try_acquire(Duration::from_secs(5))
        .await
        .expect("acquired at the new primary, over TLS")
        .acquired();
    assert!(lease.is_some(), "the lock is free");

    let err = connect(certificates.stranger_ca())
        .await
        .expect_err("the sentinels' certificates do not verify");
    assert_eq!(err.kind(), ErrorKind::Tls, "{err:?}");
    assert!(err.is_refused(), "never failed open: {err}");
    // `rediss://` sentinels without settings: the public roots, which know none of these.
    let err = RedisBackend::sentinel(setup.tls_sentinel_urls(), setup.service_name())
        .key_prefix(unique_prefix("tls-sentinel-public"))
        .connect()
        .await
        .expect_err("the public roots do not vouch for the sentinels");
    assert_eq!(err.kind(), ErrorKind::Tls, "{err:?}");

    // Refused before anything is sent: a plain sentinel URL, and sentinel URLs whose
    // credentials differ (one set reaches every sentinel over TLS).
    let mut mixed = setup.tls_sentinel_urls();
    mixed[1] = mixed[1].replace("rediss://", "rediss://user:other@");
    for (what, urls) in [("plain", setup.sentinel_urls()), ("mixed", mixed)] {
        let err = RedisBackend::sentinel(urls, setup.service_name())
            .key_prefix(unique_prefix("tls-sentinel-refused"))
            .tls(TlsSettings::new().root_certificates_pem(certificates.ca()))
            .connect()
            .await
            .expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{what}: {err:?}");
    }

    // Schemes as the URL parser reads them, whatever their case, and Valkey's: the
    // sentinels and the primary over TLS (its port speaks nothing else), never refused as
    // plain text.
    for scheme in ["REDISS://", "valkeys://"] {
        let urls: Vec<String> = setup
            .tls_sentinel_urls()
            .iter()
            .map(|url| url.replacen("rediss://", scheme, 1))
            .collect();
        let redis = RedisBackend::sentinel(urls, setup.service_name())
            .key_prefix(unique_prefix("tls-sentinel-scheme"))
            .transient_retry(Duration::from_secs(10))
            .tls(
                TlsSettings::new()
                    .root_certificates_pem(certificates.ca())
                    .client_certificate_pem(certificate.clone(), key.clone()),
            )
            .connect()
            .await
            .unwrap_or_else(|err| panic!("{scheme}: {err:?}"));
        decide(&Coordination::from(redis)).await;
    }
}

/// `rediss://` pointed at a plaintext port: whether the server answers the handshake with an
/// error line (which rustls reads as a corrupt message) or waits for the end of a command
/// line that never comes, it is a refusal (`Tls`) at connect, never an outage that failing
/// open would let through; each try sends a handshake of its own random bytes.
#[tokio::test]
async fn tls_to_a_plaintext_port_is_a_refusal_at_connect() {
    let plain = support::shared(support::ServerKind::Redis7).port();
    let settings = TlsSettings::new().root_certificates_pem(tls::certificates().ca());
    for attempt in 0..4 {
        let err = connect_with(
            RedisBackend::standalone(tls_url(&plain))
                .connection_timeout(Duration::from_millis(300)),
            settings.clone(),
            "tls-to-plain",
        )
        .await
        .expect_err("no TLS there");
        assert_eq!(err.kind(), ErrorKind::Tls, "attempt {attempt}: {err:?}");
        assert!(err.is_refused(), "attempt {attempt}: {err}");
    }
    // The same behind a cluster's seed node and a sentinel: whichever address the dial
    // timed out on, one that speaks plain text behind `rediss://` is a refusal too. Every
    // address is asked: an unreachable one first does not hide the plaintext one.
    let unreachable = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    for (what, builder) in [
        ("cluster", RedisBackend::cluster([tls_url(&plain)])),
        (
            "sentinel",
            RedisBackend::sentinel([tls_url(&plain)], "mymaster"),
        ),
        (
            "sentinels, the first unreachable",
            RedisBackend::sentinel([tls_url(&unreachable), tls_url(&plain)], "mymaster"),
        ),
    ] {
        let err = connect_with(
            builder.connection_timeout(Duration::from_millis(300)),
            settings.clone(),
            "tls-to-plain",
        )
        .await
        .expect_err("no TLS there");
        assert_eq!(err.kind(), ErrorKind::Tls, "{what}: {err:?}");
        assert!(err.is_refused(), "{what}: {err}");
    }
}

/// A handle connected over TLS whose server is replaced by a plaintext one (a proxy
/// retargeted, then its connections cut): every step is a refusal, and a fail-open layer
/// answers 503, never its local fallback.
#[cfg(feature = "axum")]
#[tokio::test]
async fn a_tls_handle_that_meets_a_plaintext_port_fails_closed_under_fail_open() {
    use axum::Router;
    use axum::routing::get;
    use leasehold::layer::FailurePolicy;
    use leasehold::layer::rate_limit::RedisRateLimitLayer;
    use support::http::{client, get as http_get, serve};

    let (_server, port) = tls::server(false);
    let proxy = support::proxy::Proxy::to_port(port);
    let settings = TlsSettings::new().root_certificates_pem(tls::certificates().ca());
    let coordination = Coordination::from(
        connect_with(
            RedisBackend::standalone(tls_url(&proxy.addr().port()))
                .connection_timeout(Duration::from_millis(300)),
            settings,
            "tls-then-plain",
        )
        .await
        .expect("connected over TLS"),
    );
    let rate =
        RedisRateLimitLayer::fixed_window(&coordination, "rate", 100, Duration::from_secs(60))
            .expect("valid")
            .failure_policy(FailurePolicy::FailOpen);
    let addr = serve(Router::new().route("/rate", get(|| async { "ok" }).layer(rate))).await;
    let client = client();
    assert_eq!(http_get(&client, addr, "/rate", &[]).await.status, 200);

    proxy.retarget(support::shared(support::ServerKind::Redis7).port());
    proxy.cut();
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(http_get(&client, addr, "/rate", &[]).await.status.as_u16());
    }
    // The request on the cut connection may fail open (unavailable, as any cut is); none
    // after it, once the reconnection meets the plaintext port.
    assert!(
        statuses[1..].iter().all(|&status| status == 503),
        "{statuses:?}"
    );
}
