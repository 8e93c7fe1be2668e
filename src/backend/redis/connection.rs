//! The two kinds of connection to a deployment, behind one `query`.

use redis::aio::ConnectionLike;
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use std::sync::atomic::{AtomicU32, Ordering};

use redis::{Cmd, Pipeline, RedisError, Value};

use super::error_map;

/// A live connection to a deployment. Cloning shares the underlying connection.
pub(crate) enum Connection {
    /// A standalone server. It never reconnects by itself: once a step finds it broken, the
    /// link makes a new one, so that nothing retries behind the steps' backs (see
    /// [`Link`](super::link::Link)).
    Server(MultiplexedConnection),
    /// The primary that Sentinel named, replaced as a standalone server's is, and also
    /// when it may no longer be the primary (see [`must_replace`](Self::must_replace)): the
    /// new connection asks the sentinels again.
    Primary {
        connection: MultiplexedConnection,
        /// Requests timed out in a row since its last answer.
        silent: AtomicU32,
    },
    /// A Redis Cluster; the client follows MOVED/ASK, refreshes its slot map and reconnects
    /// to its nodes itself.
    Cluster(ClusterConnection),
}

/// How many requests in a row Sentinel's primary may leave unanswered within the response
/// timeout before its connection is replaced.
pub(crate) const SILENT_TIMEOUTS: u32 = 3;

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
            Connection::Primary { connection, silent } => {
                let reply = request.send(&mut connection.clone()).await;
                if reply.is_ok() && silent.load(Ordering::Relaxed) != 0 {
                    silent.store(0, Ordering::Relaxed);
                }
                reply
            }
            Connection::Cluster(cluster) => request.send(&mut cluster.clone()).await,
        }
    }

    /// Sentinel's primary, on a new connection.
    pub(crate) fn primary(connection: MultiplexedConnection) -> Self {
        Connection::Primary {
            connection,
            silent: AtomicU32::new(0),
        }
    }

    /// Whether a connection that failed a request so must be replaced by a new one:
    ///
    /// - any that broke (a lost connection, a reply stream out of step);
    /// - Sentinel's primary, also when it answers as a replica (`READONLY`, also from inside
    ///   a script, or `MASTERDOWN`: it was demoted) or not at all, [`SILENT_TIMEOUTS`]
    ///   requests in a row, within the response timeout (a primary that died without closing
    ///   its connections: the sentinels have promoted another meanwhile, and the kernel would
    ///   take minutes to notice; one slow reply is no reason for a new handshake);
    /// - never a Cluster's, which the cluster client heals node by node.
    ///
    /// A standalone server that times out or answers `READONLY` is the one server there is:
    /// a new connection would reach it again, at the cost of a handshake per reply.
    pub(crate) fn must_replace(&self, err: &RedisError) -> bool {
        match self {
            Connection::Server(_) => error_map::breaks_connection(err),
            Connection::Primary { silent, .. } => {
                error_map::breaks_connection(err)
                    || error_map::is_demoted(err)
                    || (err.is_timeout()
                        && silent.fetch_add(1, Ordering::Relaxed) + 1 >= SILENT_TIMEOUTS)
            }
            Connection::Cluster(_) => false,
        }
    }
}
