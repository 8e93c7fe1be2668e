//! The three ways to reach Redis, behind one `query`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use redis::aio::ConnectionLike;
use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::SentinelClient;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisError, Value};

use super::error_map;

/// A live connection to a deployment. Cloning shares the underlying connection.
pub(crate) enum Connection {
    /// A standalone server through a reconnecting [`ConnectionManager`].
    Standalone(ConnectionManager),
    /// A Redis Cluster; the client follows MOVED/ASK and refreshes its slot map itself.
    Cluster(ClusterConnection),
    /// The primary that Sentinel names; re-resolved after the connection breaks.
    Sentinel(Box<SentinelConnection>),
}

/// What one round trip sends.
#[derive(Clone, Copy)]
pub(crate) enum Request<'a> {
    /// One command.
    Cmd(&'a Cmd),
    /// Several commands written together; the reply is an array of their replies.
    Pipeline(&'a Pipeline),
}

impl Request<'_> {
    async fn send(self, connection: &mut impl ConnectionLike) -> Result<Value, RedisError> {
        match self {
            Request::Cmd(cmd) => cmd.query_async(connection).await,
            Request::Pipeline(pipe) => pipe
                .query_async::<Vec<Value>>(connection)
                .await
                .map(Value::Array),
        }
    }
}

impl Connection {
    /// Sends one request and returns its raw reply.
    pub(crate) async fn query(&self, request: Request<'_>) -> Result<Value, RedisError> {
        match self {
            Connection::Standalone(manager) => request.send(&mut manager.clone()).await,
            Connection::Cluster(cluster) => request.send(&mut cluster.clone()).await,
            Connection::Sentinel(sentinel) => sentinel.query(request).await,
        }
    }

    pub(crate) fn topology(&self) -> &'static str {
        match self {
            Connection::Standalone(_) => "standalone",
            Connection::Cluster(_) => "cluster",
            Connection::Sentinel(_) => "sentinel",
        }
    }
}

/// A connection to the primary that Sentinel reports.
///
/// redis-rs resolves the primary once per connection and a multiplexed connection never
/// reconnects, so this keeps the current connection and, when a command fails in a way
/// that suggests the primary moved (I/O error, `READONLY` from a demoted primary), drops it;
/// the next command asks Sentinel again. The failing command's error is returned as is:
/// whether it ran is uncertain and only its caller can settle that.
pub(crate) struct SentinelConnection {
    resolver: tokio::sync::Mutex<SentinelClient>,
    config: AsyncConnectionConfig,
    current: Mutex<Option<(u64, MultiplexedConnection)>>,
    generation: AtomicU64,
}

impl SentinelConnection {
    pub(crate) async fn connect(
        client: SentinelClient,
        config: AsyncConnectionConfig,
    ) -> Result<Self, RedisError> {
        let connection = SentinelConnection {
            resolver: tokio::sync::Mutex::new(client),
            config,
            current: Mutex::new(None),
            generation: AtomicU64::new(0),
        };
        connection.connection().await?;
        Ok(connection)
    }

    async fn query(&self, request: Request<'_>) -> Result<Value, RedisError> {
        let (generation, mut connection) = self.connection().await?;
        let result = request.send(&mut connection).await;
        if let Err(err) = &result
            && error_map::suggests_primary_moved(err)
        {
            self.forget(generation);
        }
        result
    }

    async fn connection(&self) -> Result<(u64, MultiplexedConnection), RedisError> {
        if let Some(current) = self.cached() {
            return Ok(current);
        }
        // One resolution at a time; whoever waited behind it reuses its result.
        let mut resolver = self.resolver.lock().await;
        if let Some(current) = self.cached() {
            return Ok(current);
        }
        let connection = resolver
            .get_async_connection_with_config(&self.config)
            .await?;
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::debug!(generation, "connected to the primary named by Sentinel");
        *self.lock_current() = Some((generation, connection.clone()));
        Ok((generation, connection))
    }

    fn cached(&self) -> Option<(u64, MultiplexedConnection)> {
        self.lock_current().clone()
    }

    fn forget(&self, generation: u64) {
        let mut current = self.lock_current();
        if current.as_ref().is_some_and(|(g, _)| *g == generation) {
            tracing::debug!(generation, "dropping the Sentinel primary connection");
            *current = None;
        }
    }

    fn lock_current(&self) -> std::sync::MutexGuard<'_, Option<(u64, MultiplexedConnection)>> {
        // Holds only a cached handle: a panic elsewhere cannot leave it inconsistent.
        self.current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
