//! The Sentinel client that finds the primary, for the steps' connection and the watches'
//! alike: plain, or over TLS to the sentinels and the primary with the handle's
//! certificates.

use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{ProtocolVersion, RedisConnectionInfo};

use super::target::PrimaryCredentials;
use super::tls::TlsSettings;

/// A client for the primary that `sentinels` name `service_name`, reached with `primary`'s
/// credentials and spoken to in `protocol`. Over TLS when there are TLS settings (whose
/// check made every sentinel URL `rediss://`) or the sentinel URLs are `rediss://`: the
/// sentinels and the primary alike, never the primary in plain text; the sentinels'
/// credentials are then those of the URLs, which must agree.
pub(super) fn client(
    sentinels: &[String],
    service_name: &str,
    primary: Option<&PrimaryCredentials>,
    tls: Option<&TlsSettings>,
    protocol: ProtocolVersion,
) -> redis::RedisResult<SentinelClient> {
    #[cfg(feature = "tls")]
    {
        let public_roots = TlsSettings::new();
        let over_rediss = sentinels.iter().any(|url| super::tls::is_tls_url(url));
        if let Some(tls) = tls.or(over_rediss.then_some(&public_roots)) {
            return over_tls(sentinels, service_name, primary, tls, protocol);
        }
    }
    // Without the feature, settings are refused before any connection (see `check`), and
    // redis-rs refuses a `rediss://` URL.
    let _ = tls;
    let mut settings = RedisConnectionInfo::default().set_protocol(protocol);
    if let Some(primary) = primary {
        if let Some(username) = &primary.username {
            settings = settings.set_username(username);
        }
        settings = settings.set_password(&primary.password);
    }
    let primary = SentinelNodeConnectionInfo::default().set_redis_connection_info(settings);
    // Without the `tls` feature redis-rs takes the name as a `String`.
    #[allow(clippy::unnecessary_to_owned)]
    SentinelClient::build(
        sentinels.to_vec(),
        service_name.to_owned(),
        Some(primary),
        SentinelServerType::Master,
    )
}

/// redis-rs takes certificates for the sentinels and the primary only through its builder,
/// which takes the sentinels' addresses and one set of credentials for all of them.
#[cfg(feature = "tls")]
fn over_tls(
    sentinels: &[String],
    service_name: &str,
    primary: Option<&PrimaryCredentials>,
    tls: &TlsSettings,
    protocol: ProtocolVersion,
) -> redis::RedisResult<SentinelClient> {
    use redis::IntoConnectionInfo as _;
    use redis::TlsMode;
    use redis::sentinel::SentinelClientBuilder;

    let infos = sentinels
        .iter()
        .map(|url| url.as_str().into_connection_info())
        .collect::<redis::RedisResult<Vec<_>>>()?;
    let credentials = |info: &redis::ConnectionInfo| {
        let settings = info.redis_settings();
        (
            settings.username().map(str::to_owned),
            settings.password().map(str::to_owned),
        )
    };
    let refuse = |words: &'static str| Err((redis::ErrorKind::InvalidClientConfig, words).into());
    // (`#insecure`, which checks no certificate, is refused by redis-rs as built here.)
    if infos
        .iter()
        .any(|info| !matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }))
    {
        return refuse("sentinel URLs are all `rediss://` or all `redis://`");
    }
    let first = infos.first().map(credentials).unwrap_or_default();
    if infos.iter().any(|info| credentials(info) != first) {
        return refuse("over TLS, every sentinel URL must carry the same credentials");
    }
    let (username, password) = first;
    let mut builder = SentinelClientBuilder::new(
        infos.iter().map(|info| info.addr().clone()),
        service_name,
        SentinelServerType::Master,
    )?
    .set_client_to_sentinel_certificates(tls.certificates())
    .set_client_to_redis_tls_mode(TlsMode::Secure)
    .set_client_to_redis_certificates(tls.certificates())
    .set_client_to_redis_protocol(protocol);
    if let Some(username) = username {
        builder = builder.set_client_to_sentinel_username(username);
    }
    if let Some(password) = password {
        builder = builder.set_client_to_sentinel_password(password);
    }
    if let Some(primary) = primary {
        if let Some(username) = &primary.username {
            builder = builder.set_client_to_redis_username(username);
        }
        builder = builder.set_client_to_redis_password(&primary.password);
    }
    builder.build()
}
