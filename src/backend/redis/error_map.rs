//! Mapping redis-rs errors onto the crate's error.

use redis::{ErrorKind as RedisKind, RedisError, ServerErrorKind};

use crate::error::{Error, ErrorKind};

/// Converts a client error, classifying whether the command may have run anyway.
pub(crate) fn from_redis(err: RedisError) -> Error {
    let (kind, uncertain) = classify(&err);
    Error::new(kind, err.to_string())
        .uncertain(uncertain)
        .with_source(err)
}

fn classify(err: &RedisError) -> (ErrorKind, bool) {
    if err.is_timeout() {
        // The request was written; the server may have executed it.
        return (ErrorKind::Timeout, true);
    }
    if err.is_connection_refusal() {
        return (ErrorKind::Io, false);
    }
    match err.kind() {
        RedisKind::Server(ServerErrorKind::CrossSlot) => (ErrorKind::CrossSlot, false),
        RedisKind::Server(_) | RedisKind::Extension => (ErrorKind::Server, false),
        RedisKind::Parse | RedisKind::UnexpectedReturnType => (ErrorKind::UnexpectedReply, false),
        RedisKind::InvalidClientConfig => (ErrorKind::InvalidArgument, false),
        // A dropped connection may have carried the request to the server before it broke.
        _ if err.is_io_error() || err.is_connection_dropped() => (ErrorKind::Io, true),
        _ => (ErrorKind::Io, false),
    }
}

/// Whether the server rejected a command it does not know (`ERR unknown command ...`).
/// Inside a pipeline the reply's text is wrapped, so look at the whole message.
pub(crate) fn is_unknown_command(err: &RedisError) -> bool {
    matches!(
        err.kind(),
        RedisKind::Server(ServerErrorKind::ResponseError)
    ) && err.to_string().contains("unknown command")
}

/// Whether the server answered `NOSCRIPT`: the script cache does not hold this SHA-1.
pub(crate) fn is_noscript(err: &RedisError) -> bool {
    matches!(err.kind(), RedisKind::Server(ServerErrorKind::NoScript))
}

/// Whether the error suggests the connection no longer reaches the primary (Sentinel
/// failover): a lost connection, or a write refused by a demoted replica.
pub(crate) fn suggests_primary_moved(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || matches!(err.kind(), RedisKind::Server(ServerErrorKind::ReadOnly))
}
