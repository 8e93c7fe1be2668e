//! rustls's cryptography, which is the process's: a handle that speaks no TLS installs
//! none, so that an application installs its own at any time (with the `.expect()` rustls's
//! docs show), and a TLS connection made after uses the application's. Alone in its test
//! binary: the provider is one per process.

#![cfg(feature = "tls")]

mod support;

use leasehold::Coordination;
use leasehold::backend::redis::{RedisBackend, TlsSettings};
use rustls::crypto::CryptoProvider;
use support::{ServerKind, shared, tls, unique_prefix};

#[tokio::test]
async fn only_a_tls_connection_needs_a_provider_and_an_applications_own_is_kept() {
    let plain: Coordination = RedisBackend::standalone(shared(ServerKind::Redis7).url())
        .key_prefix(unique_prefix("provider-plain"))
        .connect()
        .await
        .expect("connect")
        .into();
    plain.ready().await.expect("ready");
    assert!(
        CryptoProvider::get_default().is_none(),
        "a plain connection installed a provider"
    );

    // The application's own, installed after the handle was made, as rustls's docs show.
    rustls::crypto::ring::default_provider()
        .install_default()
        .expect("nothing installed before the application's own");
    let installed = CryptoProvider::get_default().expect("the application's");

    let (_server, port) = tls::server(false);
    let over_tls: Coordination = RedisBackend::standalone(format!("rediss://127.0.0.1:{port}"))
        .key_prefix(unique_prefix("provider-tls"))
        .tls(TlsSettings::new().root_certificates_pem(tls::certificates().ca()))
        .connect()
        .await
        .expect("connect over TLS")
        .into();
    over_tls.ready().await.expect("ready over TLS");
    assert!(
        std::sync::Arc::ptr_eq(installed, CryptoProvider::get_default().expect("kept")),
        "the application's provider was replaced"
    );
}
