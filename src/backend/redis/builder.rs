//! Configuration and connection of a [`RedisBackend`].

use std::sync::Arc;
use std::time::Duration;

use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{AsyncConnectionConfig, Client};

use redis::Value;

use super::connection::{Connection, Request};
use super::link::{Connected, Link};
use super::server_clock::ServerClock;
use super::server_version::ServerVersion;
use super::watch::Watcher;
use super::{Capabilities, RedisBackend, Shared, endpoint, error_map};
use crate::backend::KeyPrefix;
use crate::error::{Error, ErrorKind, Result};

/// Default bound on the wait for one reply.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
/// Default bound on establishing a connection.
pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
/// Default bound on sending a step again after a transient failure (see
/// [`RedisBackendBuilder::transient_retry`]).
pub const DEFAULT_TRANSIENT_RETRY: Duration = Duration::from_secs(1);

/// Not `Debug`: its URLs may hold passwords (see [`endpoint::describe`]).
#[derive(Clone)]
pub(super) enum Target {
    Standalone(String),
    Cluster(Vec<String>),
    Sentinel {
        sentinels: Vec<String>,
        service_name: String,
    },
}

impl Target {
    /// `"standalone"`, `"cluster"` or `"sentinel"`.
    pub(super) fn topology(&self) -> &'static str {
        match self {
            Target::Standalone(_) => "standalone",
            Target::Cluster(_) => "cluster",
            Target::Sentinel { .. } => "sentinel",
        }
    }
}

/// Builds a [`RedisBackend`]: the deployment to reach, a key prefix and timeouts.
///
/// Start from [`RedisBackend::standalone`], [`RedisBackend::cluster`] or
/// [`RedisBackend::sentinel`].
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use leasehold::backend::redis::RedisBackend;
///
/// # async fn example() -> leasehold::Result<()> {
/// let backend = RedisBackend::standalone("redis://127.0.0.1:6379")
///     .key_prefix("myapp:")
///     .response_timeout(Duration::from_millis(250))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until `connect` is awaited"]
pub struct RedisBackendBuilder {
    target: Target,
    /// Required: see [`key_prefix`](Self::key_prefix).
    prefix: Option<KeyPrefix>,
    response_timeout: Duration,
    connection_timeout: Duration,
    transient_retry: Duration,
}

impl RedisBackendBuilder {
    fn new(target: Target) -> Self {
        RedisBackendBuilder {
            target,
            prefix: None,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connection_timeout: DEFAULT_CONNECTION_TIMEOUT,
            transient_retry: DEFAULT_TRANSIENT_RETRY,
        }
    }

    pub(super) fn standalone(url: String) -> Self {
        Self::new(Target::Standalone(url))
    }

    pub(super) fn cluster(urls: Vec<String>) -> Self {
        Self::new(Target::Cluster(urls))
    }

    pub(super) fn sentinel(sentinels: Vec<String>, service_name: String) -> Self {
        Self::new(Target::Sentinel {
            sentinels,
            service_name,
        })
    }

    /// The binary-safe prefix put in front of every key this handle touches: this service's
    /// namespace, such as `"billing:"`. Required: two services on one Redis that both name a
    /// limit `"api"` would otherwise share its counters, and their locks and semaphores
    /// alike. Give the same prefix to every replica of one service, and `""` only to share
    /// keys with another service on purpose.
    ///
    /// Every key is stored as the prefix, `|`, then the key, so that services whose prefixes
    /// are prefixes of one another (`a:` and `a:b:`) never share one; a `|` or `%` inside
    /// the prefix is written `%7C` or `%25`, which moves a hash tag that holds one to
    /// another slot.
    pub fn key_prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.prefix = Some(KeyPrefix::new(prefix));
        self
    }

    /// How long to wait for one reply before failing with
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout). Default
    /// [`DEFAULT_RESPONSE_TIMEOUT`]. A timed-out step may still have run on the server.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long to wait for a connection to be established. Default
    /// [`DEFAULT_CONNECTION_TIMEOUT`].
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// How long a step that failed without effect is sent again (default
    /// [`DEFAULT_TRANSIENT_RETRY`]; zero sends once). It covers what a failover or a restart
    /// answers: `READONLY` from a demoted primary, `MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN`,
    /// `LOADING`, `BUSY`, and refused connections. Each attempt waits with jittered backoff
    /// (20 ms doubling to 100 ms) and the last failure is returned when the bound would be
    /// passed. A step whose outcome is uncertain (a timeout, a connection lost after
    /// sending) is sent again within the same bound only when it is harmless twice: a latch
    /// count-down (it carries an id and counts once), an acquisition (it carries its owner
    /// token, and finding it is a grant) and a step that only reads.
    /// Layers bound the whole step with their own timeout too.
    pub fn transient_retry(mut self, bound: Duration) -> Self {
        self.transient_retry = bound;
        self
    }

    /// Connects and returns the backend.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a
    /// malformed URL, an empty address list or a zero timeout, and with the server's refusal
    /// (credentials, an ACL, a server below [`SERVER_FLOOR`](super::SERVER_FLOOR)) when it
    /// answers. A deployment that cannot be reached now
    /// ([unavailable](crate::Error::is_unavailable)) is no failure: the backend is returned
    /// with a `tracing` warning, and every step fails as unavailable (which the layers'
    /// failure policy covers) until one reaches it and connects. Steps share one connection
    /// attempt at a time, run in the background and bounded by two connection timeouts and
    /// three response timeouts; a failed attempt is every step's answer for half a second
    /// more (a refused connection, 50 ms). A service that must not start without Redis awaits
    /// [`RedisBackend::ready`] after this. Every error names the deployment, passwords
    /// masked. Once connected, the backend reconnects by itself, the same way: a command
    /// that meets a broken connection fails, and later ones make a new connection (one
    /// attempt at a time, its failure the answer for half a second, a refused
    /// connection's for 50 ms), so a server that refuses the credentials is every step's
    /// answer at once, and a server that is back is used again within that time. A refused
    /// connection is tried again within
    /// [`transient_retry`](Self::transient_retry), so a restart shorter than that costs
    /// latency, not errors. Every new connection reads the server's version and clock
    /// again: after a failover, the first acquisition carries a deadline on the new
    /// primary's clock.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the half-made connection.
    pub async fn connect(self) -> Result<RedisBackend> {
        if self.response_timeout.is_zero() || self.connection_timeout.is_zero() {
            return Err(Error::invalid_argument(
                "timeouts must be greater than zero",
            ));
        }
        let Some(prefix) = self.prefix.clone() else {
            return Err(Error::invalid_argument(
                "no key prefix: name this service's keys with `.key_prefix(\"myapp:\")`, so \
                 that another service on the same Redis cannot share its limits and locks by \
                 naming them alike (`.key_prefix(\"\")` shares keys on purpose)",
            ));
        };
        let endpoint = endpoint::describe(&self.target);
        let topology = self.target.topology();
        let backend = RedisBackend {
            shared: Arc::new(Shared {
                link: Link::new(self.clone()),
                endpoint,
                topology,
                response_timeout: self.response_timeout,
                connection_timeout: self.connection_timeout,
                transient_retry: self.transient_retry,
                prefix,
                capabilities: Capabilities::default(),
                outage: super::outage::Outage::new(),
                watcher: Watcher::new(self.target, self.response_timeout, self.connection_timeout),
            }),
        };
        match backend.ready().await {
            Ok(()) => {}
            // Not reachable now: every step fails as unavailable, which the layers' failure
            // policy covers, until it is; the first step that reaches it connects.
            Err(err) if err.is_unavailable() => tracing::warn!(
                error = %err,
                "Redis is not reachable at start-up; steps fail as unavailable until it is"
            ),
            // Refused (credentials, ACL, a server below the floor) or misconfigured: waiting
            // would not help.
            Err(err) => return Err(err),
        }
        Ok(backend)
    }

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
        match tokio::time::timeout(bound, self.open_within(&endpoint)).await {
            Ok(opened) => opened.map_err(|err| at(err.uncertain(false))),
            Err(_) => Err(at(Error::new(
                ErrorKind::Timeout,
                format!("no connection within {bound:?}"),
            ))),
        }
    }

    async fn open_within(&self, endpoint: &str) -> Result<Connected> {
        let connection = match &self.target {
            Target::Standalone(url) => self.connect_standalone(url).await,
            Target::Cluster(urls) => self.connect_cluster(urls).await,
            Target::Sentinel {
                sentinels,
                service_name,
            } => self.connect_sentinel(sentinels, service_name).await,
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
        let client = Client::open(url).map_err(error_map::invalid_config)?;
        let connection = client
            .get_multiplexed_async_connection_with_config(&self.server_config())
            .await
            .map_err(error_map::from_redis)?;
        Ok(Connection::Server(connection))
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
        let client = redis::cluster::ClusterClient::builder(urls.to_vec())
            .response_timeout(self.response_timeout)
            .connection_timeout(self.connection_timeout)
            .retries(0)
            .build()
            .map_err(error_map::invalid_config)?;
        let connection = client
            .get_async_connection()
            .await
            .map_err(error_map::from_redis)?;
        Ok(Connection::Cluster(connection))
    }

    async fn connect_sentinel(
        &self,
        sentinels: &[String],
        service_name: &str,
    ) -> Result<Connection> {
        if sentinels.is_empty() {
            return Err(Error::invalid_argument(
                "Sentinel needs at least one sentinel address",
            ));
        }
        // Without the `tls` feature redis-rs takes the name as a `String`.
        #[allow(clippy::unnecessary_to_owned)]
        let mut client = SentinelClient::build(
            sentinels.to_vec(),
            service_name.to_owned(),
            None,
            SentinelServerType::Master,
        )
        .map_err(error_map::invalid_config)?;
        // Asks the sentinels for the primary on every attempt: after a failover, the
        // connection that broke is replaced by one to the new primary.
        let connection = client
            .get_async_connection_with_config(&self.server_config())
            .await
            .map_err(error_map::from_redis)?;
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

/// The deployment with its passwords masked, never the URLs as given.
impl std::fmt::Debug for RedisBackendBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackendBuilder")
            .field("endpoint", &endpoint::describe(&self.target))
            .field("prefix", &self.prefix)
            .field("response_timeout", &self.response_timeout)
            .field("connection_timeout", &self.connection_timeout)
            .field("transient_retry", &self.transient_retry)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::super::RedisBackend;

    #[test]
    fn debug_never_shows_a_password() {
        let shown = format!(
            "{:?}",
            RedisBackend::standalone("redis://app:s3cret@10.0.0.1:6379").key_prefix("p:")
        );
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("redis://app:***@10.0.0.1:6379"), "{shown}");
        let shown = format!(
            "{:?}",
            RedisBackend::sentinel(["redis://:s3cret@s:26379"], "mymaster")
        );
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}
