//! Opening a connection to a deployment: the connection, then the server's version and
//! clock, within one bound, every failure naming the deployment (never its password).

use std::time::Duration;

use redis::{AsyncConnectionConfig, ProtocolVersion, Value};

use super::connection::{Connection, Request};
use super::endpoint;
use super::error_map;
use super::server_clock::ServerClock;
use super::server_version::ServerVersion;
use super::target::{PrimaryCredentials, Target};
use super::tls::TlsSettings;
use crate::backend::KeyPrefix;
use crate::error::{Error, ErrorKind, Result};

/// What one connection attempt learned: the connection, the server's version and its clock.
pub(super) struct Connected {
    pub(super) connection: Connection,
    pub(super) server: ServerVersion,
    pub(super) clock: ServerClock,
    /// Whether this connection's server was found to have hash field expiry: probed until
    /// it is, and again on the next connection, which may reach another server (a failover
    /// to an older one).
    pub(super) hash_field_expiry: std::sync::atomic::AtomicBool,
    /// Whether it still answers: once silent, a successor is dialled, which takes its place
    /// once made.
    pub(super) silence: super::silence::Silence,
}

/// What a connection attempt needs: the deployment and the bounds of each connection.
#[derive(Clone)]
pub(super) struct Dialer {
    pub(super) target: Target,
    /// The handle's key prefix, for the connection's log line.
    pub(super) prefix: KeyPrefix,
    pub(super) response_timeout: Duration,
    pub(super) connection_timeout: Duration,
    /// The certificates of a deployment the public roots do not vouch for.
    pub(super) tls: Option<TlsSettings>,
}

impl Dialer {
    /// Connects: the connection, then the server's version and clock. Every failure names the
    /// deployment (never its password), so that an application's logs say what it could not
    /// reach.
    pub(super) async fn open(&self) -> Result<Connected> {
        let endpoint = endpoint::describe(&self.target);
        let at = |err: Error| err.context(format_args!("connecting to Redis at {endpoint}"));
        // Up to two handshakes (a sentinel, then the primary it names), then INFO and TIME: a bound on
        // the whole, since a server that stops answering half-way would otherwise hold every
        // waiting step for the client's retries. Nothing was sent that could apply.
        let bound = self
            .connection_timeout
            .saturating_mul(2)
            .saturating_add(self.response_timeout.saturating_mul(3));
        #[cfg(feature = "tls")]
        if !self.tls_addresses().is_empty() {
            super::tls::ensure_provider();
        }
        let err = match tokio::time::timeout(bound, self.open_within(&endpoint)).await {
            Ok(Ok(connected)) => return Ok(connected),
            Ok(Err(err)) => err,
            Err(_) => Error::new(
                ErrorKind::Timeout,
                format!("no connection within {bound:?}"),
            ),
        };
        Err(at(self.no_tls_answer(err).await.uncertain(false)))
    }

    /// A TLS deployment whose dial timed out, one of whose configured addresses answers a
    /// plain `PING` as Redis does (`+PONG`, or an error line): a plaintext port, which waits
    /// for the end of a command line that a TLS handshake never sends. A misconfiguration, a
    /// refusal ([`ErrorKind::Tls`]), never an outage that failing open could cover. Every
    /// configured address is asked at once (a cluster's seed nodes, the sentinels): which
    /// one the dial timed out on is not known, and any that speaks plain text behind a
    /// `rediss://` URL is a mistake. Anything else (a proxy that accepts while its backend
    /// is down, a stalled server, no answer) is `err` as it was.
    async fn no_tls_answer(&self, err: Error) -> Error {
        #[cfg(feature = "tls")]
        if err.kind() == ErrorKind::Timeout
            || (err.kind() == ErrorKind::Io && err.to_string().contains("timed out"))
        {
            let mut probes = tokio::task::JoinSet::new();
            for (host, port) in self.tls_addresses() {
                probes.spawn(async move {
                    answers_in_plain_text(&host, port)
                        .await
                        .then(|| format!("{host}:{port}"))
                });
            }
            let plain = tokio::time::timeout(self.connection_timeout, async {
                while let Some(probe) = probes.join_next().await {
                    if let Ok(Some(address)) = probe {
                        return Some(address);
                    }
                }
                None
            })
            .await
            .ok()
            .flatten();
            if let Some(address) = plain {
                return Error::new(
                    ErrorKind::Tls,
                    format!(
                        "{address} answers in plain text, not TLS: a `rediss://` URL for a \
                         plaintext port"
                    ),
                );
            }
        }
        err
    }

    /// The hosts and ports a TLS deployment is dialled at (the server, a cluster's seed
    /// nodes, the sentinels); none in plain text.
    #[cfg(feature = "tls")]
    fn tls_addresses(&self) -> Vec<(String, u16)> {
        use redis::IntoConnectionInfo as _;
        let urls: &[String] = match &self.target {
            Target::Standalone(url) => std::slice::from_ref(url),
            Target::Cluster(urls) => urls,
            Target::Sentinel { sentinels, .. } => sentinels,
        };
        urls.iter()
            .filter(|url| super::tls::is_tls_url(url))
            .filter_map(
                |url| match url.as_str().into_connection_info().ok()?.addr() {
                    redis::ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
                    _ => None,
                },
            )
            .collect()
    }

    async fn open_within(&self, endpoint: &str) -> Result<Connected> {
        let connection = match &self.target {
            Target::Standalone(url) => self.connect_standalone(url).await,
            Target::Cluster(urls) => self.connect_cluster(urls).await,
            Target::Sentinel {
                sentinels,
                service_name,
                primary,
            } => {
                self.connect_sentinel(sentinels, service_name, primary.as_ref())
                    .await
            }
        }?;
        let server = server_version(&connection).await?;
        let clock = server_clock(&connection).await?;
        tracing::debug!(
            topology = self.target.topology(),
            prefix = ?self.prefix,
            %server,
            %endpoint,
            "connected to redis"
        );
        Ok(Connected {
            connection,
            server,
            clock,
            hash_field_expiry: std::sync::atomic::AtomicBool::new(false),
            silence: super::silence::Silence::default(),
        })
    }

    /// The bounds of every connection to one server: the connection timeout for the
    /// handshake, the response timeout for each reply.
    fn server_config(&self) -> AsyncConnectionConfig {
        AsyncConnectionConfig::new()
            .set_response_timeout(Some(self.response_timeout))
            .set_connection_timeout(Some(self.connection_timeout))
    }

    /// One plain attempt: no retries inside the client, so that a server that refuses (a
    /// password, an ACL) or does not answer costs a step one attempt, and the link decides
    /// when to try again.
    async fn connect_standalone(&self, url: &str) -> Result<Connection> {
        let client =
            super::tls::client(url, self.tls.as_ref()).map_err(error_map::invalid_config)?;
        // Replies are awaited within the response timeout by `Connection::query`, which
        // arms no timer where the caller bounds the attempt itself; the handshake stays
        // within the connection timeout.
        let config = self.server_config().set_response_timeout(None);
        let connection = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(error_map::from_handshake)?;
        Ok(Connection::server(connection, self.response_timeout))
    }

    async fn connect_cluster(&self, urls: &[String]) -> Result<Connection> {
        if urls.is_empty() {
            return Err(Error::invalid_argument(
                "a cluster needs at least one node address",
            ));
        }
        // No retries inside the client: it keeps one budget for every resend, and spends it
        // alike on a redirection (which certainly did not apply) and on a request whose
        // connection broke after it was written, or that met a failed refresh of the slot
        // map (which may have). It still refreshes its map on `MOVED` and reconnects its
        // nodes. `Connection::query` follows `ASK`; `send` sends again, within
        // `transient_retry`, what a node answered `MOVED`, `TRYAGAIN` or `CLUSTERDOWN`.
        let builder = redis::cluster::ClusterClient::builder(urls.to_vec())
            .response_timeout(self.response_timeout)
            .connection_timeout(self.connection_timeout)
            .retries(0);
        #[cfg(feature = "tls")]
        let builder = match &self.tls {
            Some(tls) => builder.certs(tls.certificates()),
            None => builder,
        };
        let client = builder.build().map_err(error_map::invalid_config)?;
        let connection = client
            .get_async_connection()
            .await
            .map_err(error_map::from_handshake)?;
        Ok(Connection::Cluster(connection))
    }

    async fn connect_sentinel(
        &self,
        sentinels: &[String],
        service_name: &str,
        primary: Option<&PrimaryCredentials>,
    ) -> Result<Connection> {
        if sentinels.is_empty() {
            return Err(Error::invalid_argument(
                "Sentinel needs at least one sentinel address",
            ));
        }
        let mut client = super::sentinel::client(
            sentinels,
            service_name,
            primary,
            self.tls.as_ref(),
            ProtocolVersion::RESP2,
        )
        .map_err(error_map::invalid_config)?;
        // Asks the sentinels for the primary on every attempt: after a failover, the
        // connection that broke is replaced by one to the new primary.
        let connection = client
            .get_async_connection_with_config(&self.server_config())
            .await
            .map_err(error_map::from_handshake)?;
        Ok(Connection::primary(connection))
    }
}

/// Reads the server's clock once, for the deadlines acquisitions carry.
async fn server_clock(connection: &Connection) -> Result<ServerClock> {
    let sent = tokio::time::Instant::now();
    let reply = connection
        .query(Request::Cmd(&redis::cmd("TIME")))
        .await
        .map_err(error_map::from_redis)?;
    let received = tokio::time::Instant::now();
    let now = super::server_clock::time_reply(reply)?;
    Ok(ServerClock::new(
        sent,
        received,
        super::server_clock::millis(now),
    ))
}

/// Asks the server for its version and refuses one below [`SERVER_FLOOR`](super::SERVER_FLOOR).
async fn server_version(connection: &Connection) -> Result<ServerVersion> {
    let mut info = redis::cmd("INFO");
    info.arg("server");
    let reply = match connection.query(Request::Cmd(&info)).await {
        Ok(reply) => reply,
        Err(err) => {
            let err = error_map::from_redis(err);
            if err.kind() != ErrorKind::Permission {
                return Err(err);
            }
            // INFO is in ACL's @dangerous category, which many application users lack: the
            // floor cannot be checked, and scripts are sent as Redis 6.2 needs them (see
            // `ServerVersion::unknown`), which every later server takes too.
            tracing::warn!(error = %err, "INFO is denied; the server's version is not checked");
            return Ok(ServerVersion::unknown());
        }
    };
    // A cluster client may answer with one reply per node: any node speaks for the rest.
    let text = match reply {
        Value::Map(nodes) => nodes.into_iter().next().map(|(_, info)| info),
        Value::Array(nodes) => nodes.into_iter().next(),
        single => Some(single),
    }
    .and_then(|info| redis::from_redis_value::<String>(info).ok())
    .ok_or_else(|| Error::unexpected_reply("INFO server did not answer with text"))?;
    ServerVersion::parse(&text)
}

/// Whether `host:port` answers a plain `PING` as Redis does: the first byte of a simple
/// string or an error line. A TLS server answers no such byte (an alert, or nothing).
#[cfg(feature = "tls")]
async fn answers_in_plain_text(host: &str, port: u16) -> bool {
    let Ok(stream) = tokio::net::TcpStream::connect((host, port)).await else {
        return false;
    };
    // Six bytes: one write takes them, on a new connection.
    if stream.writable().await.is_err() || !matches!(stream.try_write(b"PING\r\n"), Ok(6)) {
        return false;
    }
    let mut first = [0u8; 1];
    loop {
        if stream.readable().await.is_err() {
            return false;
        }
        match stream.try_read(&mut first) {
            Ok(1) => return matches!(first[0], b'+' | b'-'),
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
            _ => return false,
        }
    }
}
