//! The two kinds of connection to a deployment, behind one `query`.

use redis::aio::ConnectionLike;
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;

use redis::cluster_routing::{
    MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo, SingleNodeRoutingInfo,
};
use redis::{Cmd, ErrorKind as RedisKind, Pipeline, RedisError, ServerErrorKind, Value};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::error_map;
use crate::backend::caller_bound;

/// A live connection to a deployment. Cloning shares the underlying connection.
///
/// Whatever its kind, a connection that stops answering is replaced as one that broke is
/// (see [`silence`](super::silence)).
pub(crate) enum Connection {
    /// A standalone server. It never reconnects by itself: once a step finds it broken, the
    /// link makes a new one, so that nothing retries behind the steps' backs (see
    /// [`Link`](super::link::Link)). Its replies are awaited within `response_timeout` here,
    /// not by the client, so that a caller that bounds its attempt itself (a layer's decision
    /// timeout, no longer) costs no second timer: see [`caller_bound`].
    Server {
        connection: MultiplexedConnection,
        response_timeout: Duration,
    },
    /// The primary that Sentinel named, replaced as a standalone server's is, and also
    /// when it may no longer be the primary (see [`must_replace`](Self::must_replace)): the
    /// new connection asks the sentinels again.
    Primary(MultiplexedConnection),
    /// A Redis Cluster. The client refreshes its slot map and reconnects to nodes whose
    /// connections broke itself (one that falls silent, it keeps: the whole client is then
    /// replaced), but sends nothing twice: it is built without retries (which would send again
    /// a request whose connection broke after it was written), and [`query`](Self::query)
    /// follows `ASK` itself; `MOVED` and `TRYAGAIN` go back to [`send`], which sends again
    /// what certainly did not apply.
    ///
    /// [`send`]: super::RedisBackend
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
            Connection::Server {
                connection,
                response_timeout,
            } => {
                let mut connection = connection.clone();
                let timer = (!caller_bound::covers(*response_timeout))
                    .then(|| Box::pin(tokio::time::sleep(*response_timeout)));
                Replied {
                    reply: request.send(&mut connection),
                    timer,
                }
                .await
            }
            Connection::Primary(connection) => request.send(&mut connection.clone()).await,
            // Boxed: the cluster client's futures, and the redirection it may follow here,
            // would otherwise weigh on every step's future, standalone ones included; a
            // cluster request allocates several times already.
            Connection::Cluster(cluster) => Box::pin(query_cluster(cluster.clone(), request)).await,
        }
    }

    /// A standalone server, on a new connection whose client awaits its replies without a
    /// timeout of its own: `query` keeps `response_timeout`.
    pub(crate) fn server(connection: MultiplexedConnection, response_timeout: Duration) -> Self {
        Connection::Server {
            connection,
            response_timeout,
        }
    }

    /// Sentinel's primary, on a new connection.
    pub(crate) fn primary(connection: MultiplexedConnection) -> Self {
        Connection::Primary(connection)
    }

    /// Whether a census of a cluster's primaries finds one silent: `PING` sent to every
    /// primary, and one left unanswered within `bound` (see [`silence`](super::silence)). A node
    /// whose connection broke or that refused is no silence (the cluster client heals
    /// it); nor is anything on a connection to one server, which its steps' count covers.
    ///
    /// Cancel safe: it only reads.
    pub(crate) async fn has_silent_node(&self, bound: Duration) -> bool {
        let Connection::Cluster(cluster) = self else {
            return false;
        };
        // The primaries: the crate reads from no replica, whose silence is not its own.
        let every_node = RoutingInfo::MultiNode((
            MultipleNodeRoutingInfo::AllMasters,
            Some(ResponsePolicy::AllSucceeded),
        ));
        let mut cluster = cluster.clone();
        let census = cluster.route_command(redis::cmd("PING"), every_node);
        match tokio::time::timeout(bound, census).await {
            Ok(Ok(_)) => false,
            Ok(Err(err)) => err.is_timeout(),
            Err(_) => true,
        }
    }

    /// Whether this is a cluster's connection, on which one node may fall silent alone.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Connection::Cluster(_))
    }

    /// Whether a connection that failed a request so must be replaced by a new one (beside
    /// one that fell silent: see [`silence`](super::silence)):
    ///
    /// - a standalone server's or Sentinel's primary's that broke (a lost connection, a
    ///   reply stream out of step);
    /// - Sentinel's primary, also when it answers as a replica (`READONLY`, also from inside
    ///   a script, or `MASTERDOWN`: it was demoted);
    /// - never a Cluster's for one failure, which the cluster client heals node by node.
    ///
    /// A standalone server that times out once or answers `READONLY` is the one server there
    /// is: a new connection would reach it again, at the cost of a handshake per reply.
    pub(crate) fn must_replace(&self, err: &RedisError) -> bool {
        match self {
            Connection::Server { .. } => error_map::breaks_connection(err),
            Connection::Primary(_) => {
                error_map::breaks_connection(err) || error_map::is_demoted(err)
            }
            Connection::Cluster(_) => false,
        }
    }
}

pin_project_lite::pin_project! {
    /// A reply, within a timer when there is one. Hand-written, with the timer boxed:
    /// inline, it would weigh on every step's future, the layers' (which arm none) included.
    struct Replied<F> {
        #[pin]
        reply: F,
        timer: Option<Pin<Box<tokio::time::Sleep>>>,
    }
}

impl<F: Future<Output = Result<Value, RedisError>>> Future for Replied<F> {
    type Output = Result<Value, RedisError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(reply) = this.reply.poll(cx) {
            return Poll::Ready(reply);
        }
        match this.timer {
            Some(timer) => timer.as_mut().poll(cx).map(|()| Err(timed_out())),
            None => Poll::Pending,
        }
    }
}

/// No reply within the response timeout: the error the client gives for it (its request may
/// have applied).
fn timed_out() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no reply within the response timeout",
    ))
}

/// Sends one request to a cluster: `ASK` followed here, any other failure read as
/// [`cluster_failure`] says.
async fn query_cluster(
    mut cluster: ClusterConnection,
    request: Request<'_>,
) -> Result<Value, RedisError> {
    match request.send(&mut cluster).await {
        Err(err) if err.kind() == RedisKind::Server(ServerErrorKind::Ask) => match request {
            Request::Cmd(cmd) => follow_ask(&mut cluster, cmd, err).await,
            Request::Pipeline(_) => Err(may_have_applied(err)),
        },
        Err(err) => Err(cluster_failure(request, err)),
        Ok(reply) => Ok(reply),
    }
}

/// A cluster request's failure as [`send`](super::RedisBackend) must read it. An error reply
/// to one command (`MOVED`, `TRYAGAIN`, `CLUSTERDOWN`, a refusal) is the node's answer to
/// that command. Anything else may come after the request was written: the cluster client
/// hands the error of a failed slot-map refresh to every request in flight, written or not,
/// and a pipeline's commands before or after a redirected one may have run. Those say so.
fn cluster_failure(request: Request<'_>, err: RedisError) -> RedisError {
    let one_reply = matches!(request, Request::Cmd(_))
        && matches!(err.kind(), RedisKind::Server(_) | RedisKind::Extension);
    if one_reply || err.is_timeout() {
        err
    } else {
        may_have_applied(err)
    }
}

/// The error, as one that may have applied (read so by [`error_map`]).
fn may_have_applied(err: RedisError) -> RedisError {
    RedisError::from((
        RedisKind::Client,
        "the cluster request may have reached a node",
        err.to_string(),
    ))
}

/// Sends `cmd` again to the node that an `ASK` named (the slot is moving there, and the key
/// has moved already), after `ASKING`, as one pipeline on that node's connection, so that
/// nothing comes between the two. The `ASK` says the command did not run where it went.
async fn follow_ask(
    cluster: &mut ClusterConnection,
    cmd: &Cmd,
    ask: RedisError,
) -> Result<Value, RedisError> {
    let Some((host, port)) = ask.redirect_node().and_then(|(addr, _slot)| {
        let (host, port) = addr.rsplit_once(':')?;
        Some((host.to_owned(), port.parse::<u16>().ok()?))
    }) else {
        return Err(ask);
    };
    let mut pipe = redis::pipe();
    pipe.cmd("ASKING").add_command(cmd.clone());
    let route = SingleNodeRoutingInfo::ByAddress { host, port };
    match cluster.route_pipeline(pipe, 1, 1, route).await {
        Ok(mut replies) => match replies.pop() {
            Some(Value::ServerError(err)) => Err(err.into()),
            Some(reply) => Ok(reply),
            None => Err(may_have_applied(RedisError::from((
                RedisKind::Client,
                "no reply to a command sent after ASKING",
            )))),
        },
        Err(err) if err.is_timeout() => Err(err),
        // The command's own error reply (`ASKING` fails for nothing but the connection): an
        // answer to it alone, as if sent without `ASKING`.
        Err(err) => {
            let own = err
                .clone()
                .into_server_errors()
                .filter(|failures| failures.len() == 1)
                .and_then(|failures| failures.first().map(|(_, reply)| reply.clone()));
            Err(own.map_or_else(|| may_have_applied(err), RedisError::from))
        }
    }
}
