//! TLS to a Redis the harness starts with a certificate authority of its own: trusted by
//! its root certificate, with a client certificate where the server asks for one; and
//! every way it can fail is a clear refusal, never a plain connection.

#![cfg(feature = "tls")]

mod support;

use std::time::Duration;

use leasehold::backend::redis::{RedisBackend, TlsSettings};
use leasehold::coordination::rate_limit::FixedWindow;
use leasehold::{Coordination, ErrorKind};
use support::tls;
use support::unique_prefix;

async fn connect(port: u16, settings: TlsSettings, test: &str) -> leasehold::Result<Coordination> {
    let redis = RedisBackend::standalone(format!("rediss://127.0.0.1:{port}"))
        .key_prefix(unique_prefix(test))
        .tls(settings)
        .connect()
        .await?;
    let coordination = Coordination::from(redis);
    coordination.ready().await?;
    Ok(coordination)
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
