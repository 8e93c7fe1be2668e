//! TLS settings for a deployment that public roots do not vouch for: a private certificate
//! authority, and client certificates (mutual TLS).

use std::fmt;

use crate::error::{Error, Result};

/// The certificates a `rediss://` connection trusts and presents, for a Redis whose
/// certificate is signed by a private certificate authority, or that asks clients for
/// theirs (mutual TLS). Given to
/// [`RedisBackendBuilder::tls`](super::RedisBackendBuilder::tls); needs the `tls` feature.
///
/// Without it, a `rediss://` URL trusts the public roots (webpki). With root certificates,
/// only those are trusted: by a standalone server, a cluster's nodes, and through Sentinel
/// the sentinels and the primary (see
/// [`RedisBackendBuilder::tls`](super::RedisBackendBuilder::tls)). A certificate that does
/// not verify, or a server that refuses the client's, fails the connection with
/// [`ErrorKind::Tls`](crate::ErrorKind::Tls) (refused: never failed open), and never falls
/// back to a plain connection. Debug output never shows the certificates or the key.
///
/// # Example
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use leasehold::backend::redis::{RedisBackend, TlsSettings};
///
/// let tls = TlsSettings::new()
///     .root_certificates_pem(std::fs::read("/etc/redis/ca.crt")?)
///     .client_certificate_pem(
///         std::fs::read("/etc/redis/client.crt")?,
///         std::fs::read("/etc/redis/client.key")?,
///     );
/// let redis = RedisBackend::standalone("rediss://redis.internal:6380")
///     .key_prefix("billing:")
///     .tls(tls)
///     .connect()
///     .await?;
/// # let _ = redis;
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct TlsSettings {
    root_certificates: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsSettings {
    /// Public roots, no client certificate: what `rediss://` does without settings.
    pub fn new() -> Self {
        TlsSettings::default()
    }

    /// Trusts the certificate authorities in `pem` (one or more PEM certificates), and no
    /// other: the public roots are no longer used.
    pub fn root_certificates_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.root_certificates = Some(pem.into());
        self
    }

    /// Presents the certificate `certificate_pem` (PEM, its chain after it) with its
    /// private key `key_pem` (PEM), for a server that asks for client certificates
    /// (`tls-auth-clients yes`).
    pub fn client_certificate_pem(
        mut self,
        certificate_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.client = Some((certificate_pem.into(), key_pem.into()));
        self
    }

    /// Refuses settings that cannot apply to `urls`: each must be `rediss://`, so that a
    /// mistyped scheme is never a plain connection; and the `tls` feature must be on.
    pub(super) fn check<'a>(&self, urls: impl IntoIterator<Item = &'a str>) -> Result<()> {
        if !cfg!(feature = "tls") {
            return Err(Error::invalid_argument(
                "TLS settings need leasehold's `tls` feature",
            ));
        }
        for url in urls {
            if !is_tls_url(url) {
                return Err(Error::invalid_argument(format!(
                    "TLS settings are given, but {} is not a `rediss://` (or `valkeys://`) URL: \
                     it would connect in plain text",
                    super::endpoint::redact(url)
                )));
            }
        }
        Ok(())
    }

    /// As redis-rs takes them.
    #[cfg(feature = "tls")]
    pub(super) fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.root_certificates.clone(),
        }
    }
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("root_certificates", &self.root_certificates.is_some())
            .field("client_certificate", &self.client.is_some())
            .finish()
    }
}

/// Makes sure rustls has its cryptography before a TLS connection is made: ring, the one this
/// crate brings, installed as the process's default only when none is (rustls cannot pick
/// one by itself when an application's dependencies enable more than one). Called before
/// each TLS connection, never for a plain one: an application that installs its own
/// provider before its first TLS connection keeps it, and one that uses no TLS finds none
/// installed.
#[cfg(feature = "tls")]
pub(super) fn ensure_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one meanwhile: then its is kept.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Whether `url` asks for TLS: its scheme, read as redis-rs reads it (the URL parser's,
/// whatever its case), is `rediss` or `valkeys`. Never a prefix of the text: `REDISS://`
/// and `valkeys://` are TLS too, and must never leave a primary, or its password, in plain
/// text.
pub(super) fn is_tls_url(url: &str) -> bool {
    // The URL parser drops leading spaces and control characters first.
    let url = url.trim_start_matches(|c: char| c <= ' ');
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
    })
}

/// A client for one server, with `tls`'s certificates when given.
pub(super) fn client(
    info: impl redis::IntoConnectionInfo,
    tls: Option<&TlsSettings>,
) -> redis::RedisResult<redis::Client> {
    match tls {
        #[cfg(feature = "tls")]
        Some(tls) => redis::Client::build_with_tls(info, tls.certificates()),
        // Without the feature, settings are refused before any connection (see `check`).
        _ => redis::Client::open(info),
    }
}

#[cfg(test)]
mod tests {
    use super::is_tls_url;

    #[test]
    fn a_scheme_is_read_whatever_its_case_and_valkeys_is_tls() {
        for tls in [
            "rediss://h:6379",
            "REDISS://h:6379",
            "Rediss://u:p@h",
            "valkeys://h:6379",
            "Valkeys://h",
            " \trediss://h",
        ] {
            assert!(is_tls_url(tls), "{tls}");
        }
        for plain in [
            "redis://h:6379",
            "valkey://h",
            "redis+unix:///tmp/r.sock",
            "rediss",
            "h:6379",
            "redis://rediss://h",
        ] {
            assert!(!is_tls_url(plain), "{plain}");
        }
    }
}
