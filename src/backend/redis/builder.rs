//! Configuration and connection of a [`RedisBackend`].

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{AsyncConnectionConfig, Client};

use super::connection::{Connection, SentinelConnection};
use super::watch::Watcher;
use super::{Capabilities, RedisBackend, Shared, error_map};
use crate::backend::KeyPrefix;
use crate::error::{Error, Result};

/// Default bound on the wait for one reply.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
/// Default bound on establishing a connection.
pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub(super) enum Target {
    Standalone(String),
    Cluster(Vec<String>),
    Sentinel {
        sentinels: Vec<String>,
        service_name: String,
    },
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
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `connect` is awaited"]
pub struct RedisBackendBuilder {
    target: Target,
    prefix: KeyPrefix,
    response_timeout: Duration,
    connection_timeout: Duration,
}

impl RedisBackendBuilder {
    fn new(target: Target) -> Self {
        RedisBackendBuilder {
            target,
            prefix: KeyPrefix::default(),
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connection_timeout: DEFAULT_CONNECTION_TIMEOUT,
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

    /// A binary-safe prefix put in front of every key. Empty by default.
    pub fn key_prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.prefix = KeyPrefix::new(prefix);
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

    /// Connects and returns the backend.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a
    /// malformed URL, an empty address list or a zero timeout, and with an I/O error when
    /// the deployment cannot be reached. After this succeeds, the backend reconnects by
    /// itself: a command that meets a broken connection fails, and later ones go through
    /// once the server is back.
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
        let connection = match &self.target {
            Target::Standalone(url) => self.connect_standalone(url).await?,
            Target::Cluster(urls) => self.connect_cluster(urls).await?,
            Target::Sentinel {
                sentinels,
                service_name,
            } => self.connect_sentinel(sentinels, service_name).await?,
        };
        tracing::debug!(
            topology = connection.topology(),
            prefix = ?self.prefix,
            "connected to redis"
        );
        Ok(RedisBackend {
            shared: Arc::new(Shared {
                connection,
                prefix: self.prefix,
                capabilities: Capabilities::default(),
                watcher: Watcher::new(self.target, self.response_timeout, self.connection_timeout),
            }),
        })
    }

    async fn connect_standalone(&self, url: &str) -> Result<Connection> {
        let client = Client::open(url).map_err(invalid_config)?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.response_timeout))
            .set_connection_timeout(Some(self.connection_timeout));
        let manager = client
            .get_connection_manager_with_config(config)
            .await
            .map_err(error_map::from_redis)?;
        Ok(Connection::Standalone(manager))
    }

    async fn connect_cluster(&self, urls: &[String]) -> Result<Connection> {
        if urls.is_empty() {
            return Err(Error::invalid_argument(
                "a cluster needs at least one node address",
            ));
        }
        let client = redis::cluster::ClusterClient::builder(urls.to_vec())
            .response_timeout(self.response_timeout)
            .connection_timeout(self.connection_timeout)
            .build()
            .map_err(invalid_config)?;
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
        let client = SentinelClient::build(
            sentinels.to_vec(),
            service_name.to_owned(),
            None,
            SentinelServerType::Master,
        )
        .map_err(invalid_config)?;
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(Some(self.response_timeout))
            .set_connection_timeout(Some(self.connection_timeout));
        let connection = SentinelConnection::connect(client, config)
            .await
            .map_err(error_map::from_redis)?;
        Ok(Connection::Sentinel(Box::new(connection)))
    }
}

fn invalid_config(err: redis::RedisError) -> Error {
    Error::invalid_argument(format!("invalid Redis configuration: {err}")).with_source(err)
}
