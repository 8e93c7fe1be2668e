//! The two kinds of connection to a deployment, behind one `query`.

use redis::aio::ConnectionLike;
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisError, Value};

/// A live connection to a deployment. Cloning shares the underlying connection.
pub(crate) enum Connection {
    /// One server: a standalone server, or the primary that Sentinel named. It never
    /// reconnects by itself: once a step finds it broken, the link makes a new one (asking
    /// the sentinels again), so that nothing retries behind the steps' backs (see
    /// [`Link`](super::link::Link)).
    Server(MultiplexedConnection),
    /// A Redis Cluster; the client follows MOVED/ASK, refreshes its slot map and reconnects
    /// to its nodes itself.
    Cluster(ClusterConnection),
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
            Connection::Server(connection) => request.send(&mut connection.clone()).await,
            Connection::Cluster(cluster) => request.send(&mut cluster.clone()).await,
        }
    }

    /// Whether a broken connection is replaced by a new one (one server), rather than
    /// healing itself (a Cluster's).
    pub(crate) fn reconnects(&self) -> bool {
        matches!(self, Connection::Server(_))
    }
}
