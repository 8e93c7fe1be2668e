//! Mapping redis-rs errors onto the crate's error.

use redis::{ErrorKind as RedisKind, RedisError, ServerErrorKind};

use crate::error::{Error, ErrorKind};

/// Converts a client error, classifying whether the command may have run anyway.
pub(crate) fn from_redis(err: RedisError) -> Error {
    let (kind, uncertain) = classify(&err);
    Error::new(kind, describe(&err))
        .uncertain(uncertain)
        .with_source(err)
}

/// A client error's words, without the client's own kind name that it appends
/// (`Redis URL did not parse - InvalidClientConfig`): the crate's kind says it instead.
pub(crate) fn describe(err: &RedisError) -> String {
    crate::error::without_kind_tag(&err.to_string()).to_owned()
}

/// Converts a client error met while connecting (a handshake, before any command): every
/// TLS failure there is a refusal ([`ErrorKind::Tls`]), whatever rustls calls it, since none
/// passes by itself; the rest as [`from_redis`] says.
pub(crate) fn from_handshake(err: RedisError) -> Error {
    if is_tls_refusal(&err, true) {
        return Error::new(ErrorKind::Tls, describe(&err))
            .uncertain(false)
            .with_source(err);
    }
    from_redis(err)
}

/// Whether the TLS layer refused the connection: rustls's error, inside the I/O error that
/// redis-rs keeps behind an `Arc` as its source; or, from the cluster client, which keeps a
/// node's error as words alone, those words. In a handshake (`in_handshake`), every TLS
/// failure: a certificate, an alert, an incompatible peer, and a peer that does not speak
/// TLS at all (a plaintext port answers a handshake with words that rustls reads as a
/// corrupt message). On a connection in use, only what a handshake meets (a certificate, an
/// alert, an incompatible peer): a record that does not decrypt there is a broken
/// connection, and a request on it may have applied.
fn is_tls_refusal(err: &RedisError, in_handshake: bool) -> bool {
    #[cfg(feature = "tls")]
    {
        type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
        let rustls = std::error::Error::source(err).and_then(|source| {
            let inner: &(dyn std::error::Error + 'static) = match source.downcast_ref::<Shared>() {
                Some(shared) => &**shared,
                None => source,
            };
            inner.downcast_ref::<rustls::Error>().or_else(|| {
                inner
                    .downcast_ref::<std::io::Error>()
                    .and_then(std::io::Error::get_ref)
                    .and_then(|io| io.downcast_ref::<rustls::Error>())
            })
        });
        match rustls {
            Some(_) if in_handshake => true,
            Some(rustls) => matches!(
                rustls,
                rustls::Error::InvalidCertificate(_)
                    | rustls::Error::NoCertificatesPresented
                    | rustls::Error::AlertReceived(_)
                    | rustls::Error::PeerIncompatible(_)
                    | rustls::Error::UnsupportedNameType
            ),
            None => err.kind() == RedisKind::Io && says_tls_refusal(&err.to_string(), in_handshake),
        }
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = (err, in_handshake);
        false
    }
}

/// Whether a client error's words are those of a TLS failure, in rustls's words (the
/// refusals, and in a handshake the errors of a peer that speaks no TLS too): the cluster
/// client keeps only the words of a node's connection error, not the error itself.
#[cfg(feature = "tls")]
fn says_tls_refusal(words: &str, in_handshake: bool) -> bool {
    const REFUSALS: [&str; 5] = [
        "invalid peer certificate: ",
        "peer sent no certificates",
        "received fatal alert: ",
        "peer is incompatible: ",
        "presented server name type wasn't supported",
    ];
    const NO_TLS: [&str; 7] = [
        "received corrupt message of type ",
        "peer misbehaved: ",
        "received unexpected message: ",
        "received unexpected handshake message: ",
        "cannot decrypt peer's message",
        "peer sent excess record size",
        "peer doesn't support any known protocol",
    ];
    REFUSALS.iter().any(|refusal| words.contains(refusal))
        || (in_handshake && NO_TLS.iter().any(|failure| words.contains(failure)))
}

/// An error in a line of its own: the first error reply's code and words for a reply (not
/// the whole pipeline the client echoes, with its connection's address), else the
/// client's words.
pub(crate) fn summary(err: &RedisError) -> String {
    match first_failure(err) {
        Some((_, code, detail)) if detail.is_empty() => code,
        Some((_, code, detail)) => format!("{code} {detail}"),
        None => describe(err),
    }
}

/// A client that refused its configuration (a URL that does not parse, say), as an
/// invalid argument.
pub(crate) fn invalid_config(err: redis::RedisError) -> Error {
    let words = describe(&err);
    // The client's words name its own feature; the crate's is the one to enable.
    let hint = if cfg!(feature = "tls") || !words.contains("TLS") {
        ""
    } else {
        " (a `rediss://` URL needs leasehold's `tls` feature)"
    };
    // Every setting the crate gives the client is in its URLs but the certificates: a
    // missing host or a database that is no number gets the form too.
    let form = if !words.contains("ertificate") {
        "; a URL looks like redis://[user:password@]host:6379[/db], rediss://… for TLS, or \
         redis+unix:///path/to/redis.sock"
    } else {
        ""
    };
    Error::invalid_argument(format!("invalid Redis configuration: {words}{hint}{form}"))
        .with_source(err)
}

/// The crate's kind for a client error, and whether the command may have run anyway; one row
/// per redis-rs kind and server error code (see the failure classes on [`Error`]).
fn classify(err: &RedisError) -> (ErrorKind, bool) {
    if is_tls_refusal(err, false) {
        // Nothing was sent: the handshake is before any command.
        return (ErrorKind::Tls, false);
    }
    if err.is_timeout() {
        // The request was written; the server may have executed it.
        return (ErrorKind::Timeout, true);
    }
    if err.is_connection_refusal() {
        return (ErrorKind::Io, false);
    }
    if let Some((index, code, detail)) = first_failure(err) {
        let in_script = is_script_error(&detail);
        let kind = reply_kind(&code, &detail);
        // A script that fails keeps what it wrote before; a transient reply or OOM stops a
        // script at its first write, before anything was written.
        let partial = in_script && !matches!(kind, ErrorKind::Transient | ErrorKind::OutOfMemory);
        // In a pipeline, the commands before the failing one ran.
        return (kind, partial || index > 0);
    }
    match err.kind() {
        RedisKind::AuthenticationFailed => (ErrorKind::Authentication, false),
        RedisKind::Parse | RedisKind::UnexpectedReturnType => (ErrorKind::UnexpectedReply, false),
        RedisKind::InvalidClientConfig | RedisKind::EmptySentinelList => {
            (ErrorKind::InvalidArgument, false)
        }
        RedisKind::RESP3NotSupported => (ErrorKind::Unsupported, false),
        // Sentinel names no primary (yet): a failover in progress.
        RedisKind::MasterNameNotFoundBySentinel | RedisKind::NoValidReplicasFoundBySentinel => {
            (ErrorKind::Transient, false)
        }
        // A dropped connection may have carried the request to the server before it broke.
        _ if err.is_io_error() || err.is_connection_dropped() => (ErrorKind::Io, true),
        // The cluster client's internal failures: its reply channel may drop after sending.
        RedisKind::Client => (ErrorKind::Io, true),
        // The cluster client found no connection (or no node) for the slot: nothing was sent.
        _ => (ErrorKind::Io, false),
    }
}

/// The first failing reply of an error reply or a pipeline: its index, code and detail. The
/// code is the one that decides: Redis 6.2 wraps what a script's command answered into its
/// own `ERR` (`ERR Error running script (…): @user_script:1: … -READONLY You can't write…`),
/// and then the wrapped code is given.
fn first_failure(err: &RedisError) -> Option<(usize, String, String)> {
    if !matches!(err.kind(), RedisKind::Server(_) | RedisKind::Extension) {
        return None;
    }
    let Some(failures) = err.clone().into_server_errors() else {
        // An extension error without a reply: an error reply all the same.
        return Some((0, err.code().unwrap_or("").to_owned(), String::new()));
    };
    let (index, reply) = failures.first()?;
    let detail = reply.details().unwrap_or("");
    let code = match (reply.code(), legacy_script_code(detail)) {
        ("ERR", Some(inner)) => inner,
        (code, _) => code,
    };
    Some((*index, code.to_owned(), detail.to_owned()))
}

/// The kind of an error reply, by its code (the reply's first word).
fn reply_kind(code: &str, detail: &str) -> ErrorKind {
    match code {
        "CROSSSLOT" => ErrorKind::CrossSlot,
        "NOPERM" => ErrorKind::Permission,
        "WRONGPASS" | "NOAUTH" => ErrorKind::Authentication,
        "OOM" => ErrorKind::OutOfMemory,
        "READONLY" | "MASTERDOWN" | "CLUSTERDOWN" | "TRYAGAIN" | "LOADING" | "BUSY"
        | "NOREPLICAS" | "MOVED" | "ASK" => ErrorKind::Transient,
        "ERR" if is_script_error(detail) => ErrorKind::Script,
        _ => ErrorKind::Server,
    }
}

/// The code of the reply a command inside a script got, as Redis 6.2 quotes it in the
/// script's error (`… @user_script: 1: -READONLY …`).
fn legacy_script_code(detail: &str) -> Option<&str> {
    if !detail.contains("Error running script") {
        return None;
    }
    let (_, quoted) = detail.rsplit_once(": -")?;
    let code = quoted.split(' ').next()?;
    (!code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase())).then_some(code)
}

/// Whether an `ERR` reply comes from a Lua script: Redis 7+ and Valkey append
/// `script: <sha>, on @user_script:<line>.` to an error a script raised or let through; Redis
/// 6.2 says `Error running script`.
fn is_script_error(detail: &str) -> bool {
    detail.contains("user_script") || detail.contains("Error running script")
}

/// Whether the failure left the server untouched and may pass by waiting: a transient reply
/// (failover, loading) or a connection that was never made. Only these are sent again.
pub(crate) fn may_pass_without_effect(err: &RedisError) -> bool {
    matches!(classify(err), (ErrorKind::Transient | ErrorKind::Io, false))
}

/// Whether the server rejected a command it does not know (`ERR unknown command ...`).
/// Inside a pipeline the reply's text is wrapped, so look at the whole message.
pub(crate) fn is_unknown_command(err: &RedisError) -> bool {
    matches!(
        err.kind(),
        RedisKind::Server(ServerErrorKind::ResponseError)
    ) && err.to_string().contains("unknown command")
}

/// Whether the server refused the command itself, not what it would do: unknown
/// (`ERR unknown command`, a server too old) or denied by an ACL (`NOPERM`, an allow-list
/// written before the command existed). Either way nothing ran.
pub(crate) fn refuses_command(err: &RedisError) -> bool {
    // A later reply of a pipeline, or a command a script ran (a key the ACL denies it): the
    // command itself was taken.
    if first_failure(err).is_some_and(|(index, _, detail)| index > 0 || is_script_error(&detail)) {
        return false;
    }
    is_unknown_command(err)
        || matches!(err.kind(), RedisKind::Server(ServerErrorKind::NoPerm))
        || err.to_string().contains("NOPERM")
}

/// Whether an ACL denied a command of the request, wherever it stands in a pipeline (not one
/// a script ran): for a way of running a step that only an ACL refuses, which then gives way
/// to another. Commands of the pipeline that the ACL allowed may have run.
pub(crate) fn denied_by_acl(err: &RedisError) -> bool {
    match first_failure(err) {
        Some((_, code, detail)) => code == "NOPERM" && !is_script_error(&detail),
        None => matches!(err.kind(), RedisKind::Server(ServerErrorKind::NoPerm)),
    }
}

/// Whether the server answered `NOSCRIPT`: the script cache does not hold this SHA-1.
pub(crate) fn is_noscript(err: &RedisError) -> bool {
    matches!(err.kind(), RedisKind::Server(ServerErrorKind::NoScript))
}

/// Whether the connection broke: it was lost, or its reply stream is out of step. Not a
/// timeout (the connection still works), nor any reply.
pub(crate) fn breaks_connection(err: &RedisError) -> bool {
    err.is_unrecoverable_error() || err.is_connection_dropped()
}

/// Whether the server answered as a replica: a write refused by a demoted primary
/// (`READONLY`, also from inside a script) or a replica that lost its primary
/// (`MASTERDOWN`). Not `LOADING` or `BUSY`: the server is the right one, just not ready.
pub(crate) fn is_demoted(err: &RedisError) -> bool {
    first_failure(err)
        .is_some_and(|(_, code, _)| matches!(code.as_str(), "READONLY" | "MASTERDOWN"))
}

/// Whether the server answered (an error reply), rather than the connection failing.
pub(crate) fn is_reply(err: &RedisError) -> bool {
    first_failure(err).is_some()
}

/// [`may_pass_without_effect`] for the crate's error: a failed connection attempt that
/// certainly sent nothing (refused, a failover reply).
pub(crate) fn may_pass(err: &Error) -> bool {
    matches!(err.kind(), ErrorKind::Transient | ErrorKind::Io) && !err.is_outcome_uncertain()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_refused_configuration_says_it_in_the_crates_words() {
        let err = invalid_config(redis::Client::open("not a url").expect_err("no URL"));
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        let text = err.to_string();
        assert!(text.contains("Redis URL did not parse"), "{text}");
        // With an example of the form.
        assert!(text.contains("redis://[user:password@]host:6379"), "{text}");
        assert_eq!(format!("{err:?}"), text, "its cause is not said twice");
        // A URL that parses, with a setting that does not: the form too.
        let text = invalid_config(
            redis::Client::open("redis://localhost:6379/first").expect_err("no database"),
        )
        .to_string();
        assert!(text.contains("Invalid database number"), "{text}");
        assert!(text.contains("host:6379[/db]"), "{text}");
        // Without the feature the client refuses it, and the hint names the crate's feature;
        // with it, the client takes it.
        if let Err(refused) = redis::Client::open("rediss://cache.internal:6380") {
            let text = invalid_config(refused).to_string();
            assert!(text.contains("leasehold's `tls` feature"), "{text}");
        }
    }

    use std::io;

    use super::*;

    /// The client's error for an error reply `-<text>`, parsed as from the wire.
    fn reply(text: &str) -> RedisError {
        match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()) {
            Ok(redis::Value::ServerError(err)) => err.into(),
            other => panic!("-{text} parsed as {other:?}"),
        }
    }

    fn io(kind: io::ErrorKind) -> RedisError {
        io::Error::from(kind).into()
    }

    fn client(kind: RedisKind) -> RedisError {
        (kind, "test").into()
    }

    /// The cluster client keeps a node's connection error as words: a TLS refusal in them
    /// is still one (refused, never failed open); other I/O words are not.
    #[cfg(feature = "tls")]
    #[test]
    fn a_tls_refusal_in_the_cluster_clients_words_is_one() {
        let initial = |words: &str| -> RedisError {
            (
                RedisKind::Io,
                "Failed to create initial connections",
                words.to_owned(),
            )
                .into()
        };
        // In rustls's own words, so that a rewording there fails here.
        for refusal in [
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
            rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired),
            rustls::Error::NoCertificatesPresented,
            rustls::Error::UnsupportedNameType,
        ] {
            row(initial(&refusal.to_string()), ErrorKind::Tls, false);
            assert_eq!(
                from_handshake(initial(&refusal.to_string())).kind(),
                ErrorKind::Tls
            );
        }
        // A peer that speaks no TLS (a plaintext port, answering the handshake with an
        // error line): a refusal in a handshake; on a connection in use, a broken one.
        for no_tls in [
            rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType),
            rustls::Error::PeerMisbehaved(rustls::PeerMisbehaved::TooManyEmptyFragments),
            rustls::Error::InappropriateMessage {
                expect_types: vec![rustls::ContentType::Handshake],
                got_type: rustls::ContentType::ApplicationData,
            },
            rustls::Error::InappropriateHandshakeMessage {
                expect_types: vec![rustls::HandshakeType::ServerHello],
                got_type: rustls::HandshakeType::Finished,
            },
            rustls::Error::DecryptError,
            rustls::Error::PeerSentOversizedRecord,
            rustls::Error::NoApplicationProtocol,
        ] {
            let words = no_tls.to_string();
            let err = from_handshake(initial(&words));
            assert_eq!(err.kind(), ErrorKind::Tls, "{words}");
            assert!(!err.is_outcome_uncertain(), "{words}");
            row(initial(&words), ErrorKind::Io, true);
        }
        row(
            initial("Connection refused (os error 111)"),
            ErrorKind::Io,
            true,
        );
        assert_eq!(
            from_handshake(initial("Connection refused (os error 111)")).kind(),
            ErrorKind::Io
        );
    }

    #[track_caller]
    fn row(err: RedisError, kind: ErrorKind, may_have_applied: bool) {
        let mapped = from_redis(err);
        assert_eq!(mapped.kind(), kind, "{mapped:?}");
        assert_eq!(
            mapped.is_outcome_uncertain(),
            may_have_applied,
            "{mapped:?}"
        );
    }

    #[test]
    fn connections() {
        row(io(io::ErrorKind::TimedOut), ErrorKind::Timeout, true);
        row(io(io::ErrorKind::WouldBlock), ErrorKind::Timeout, true);
        row(io(io::ErrorKind::ConnectionRefused), ErrorKind::Io, false);
        // A unix socket whose file is missing is a refusal too.
        row(io(io::ErrorKind::NotFound), ErrorKind::Io, false);
        row(io(io::ErrorKind::ConnectionReset), ErrorKind::Io, true);
        row(io(io::ErrorKind::BrokenPipe), ErrorKind::Io, true);
        row(io(io::ErrorKind::UnexpectedEof), ErrorKind::Io, true);
        row(client(RedisKind::Io), ErrorKind::Io, true);
        row(
            client(RedisKind::ClusterConnectionNotFound),
            ErrorKind::Io,
            false,
        );
        row(client(RedisKind::Client), ErrorKind::Io, true);
    }

    #[test]
    fn failover_replies_are_transient() {
        for text in [
            "READONLY You can't write against a read only replica.",
            "READONLY You can't write against a read only replica. script: 1f0e, on @user_script:7.",
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            "CLUSTERDOWN The cluster is down",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "LOADING Redis is loading the dataset in memory",
            "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
            "NOREPLICAS Not enough good replicas to write.",
            "MOVED 3999 127.0.0.1:6381",
            "ASK 3999 127.0.0.1:6381",
        ] {
            let mapped = from_redis(reply(text));
            assert_eq!(mapped.kind(), ErrorKind::Transient, "{text}");
            assert!(mapped.is_unavailable(), "{text}");
            assert!(!mapped.is_outcome_uncertain(), "{text}");
        }
        row(
            client(RedisKind::MasterNameNotFoundBySentinel),
            ErrorKind::Transient,
            false,
        );
        row(
            client(RedisKind::NoValidReplicasFoundBySentinel),
            ErrorKind::Transient,
            false,
        );
    }

    #[test]
    fn refusals() {
        row(
            client(RedisKind::AuthenticationFailed),
            ErrorKind::Authentication,
            false,
        );
        row(
            reply("WRONGPASS invalid username-password pair or user is disabled."),
            ErrorKind::Authentication,
            false,
        );
        row(
            reply("NOAUTH Authentication required."),
            ErrorKind::Authentication,
            false,
        );
        row(
            reply("NOPERM User app has no permissions to run the 'evalsha' command"),
            ErrorKind::Permission,
            false,
        );
        // An ACL that denies a key part way through a script: earlier writes stay.
        row(
            reply("NOPERM No permissions to access a key script: 1f0e, on @user_script:3."),
            ErrorKind::Permission,
            true,
        );
        row(
            reply("OOM command not allowed when used memory > 'maxmemory'."),
            ErrorKind::OutOfMemory,
            false,
        );
        row(
            reply(
                "OOM command not allowed when used memory > 'maxmemory'. script: 1f0e, on @user_script:4.",
            ),
            ErrorKind::OutOfMemory,
            false,
        );
        row(
            reply(
                "ERR user_script:1: Script attempted to access nonexistent global variable 'x' script: 1f0e, on @user_script:1.",
            ),
            ErrorKind::Script,
            true,
        );
        row(
            reply("ERR Error running script (call to f_1f0e): @user_script:1: user_script:1: oops"),
            ErrorKind::Script,
            true,
        );
        row(
            reply("ERR value is not an integer or out of range script: 1f0e, on @user_script:5."),
            ErrorKind::Script,
            true,
        );
        row(
            reply(
                "WRONGTYPE Operation against a key holding the wrong kind of value script: 1f0e, on @user_script:2.",
            ),
            ErrorKind::Server,
            true,
        );
        row(
            reply("ERR unknown command 'INCREX', with args beginning with: "),
            ErrorKind::Server,
            false,
        );
        // Redis 6.2 quotes the inner reply's code inside its own ERR.
        row(
            reply(
                "ERR Error running script (call to f_1f0e): @user_script:1: @user_script: 1: -READONLY You can't write against a read only replica.",
            ),
            ErrorKind::Transient,
            false,
        );
        row(
            reply(
                "ERR Error running script (call to f_1f0e): @user_script:1: @user_script: 1: -OOM command not allowed when used memory > 'maxmemory'.",
            ),
            ErrorKind::OutOfMemory,
            false,
        );
        row(
            reply(
                "ERR Error running script (call to f_1f0e): @user_script:1: @user_script: 1: -NOREPLICAS Not enough good replicas to write.",
            ),
            ErrorKind::Transient,
            false,
        );
        row(
            reply(
                "ERR Error running script (call to f_1f0e): @user_script:44: ERR value is not an integer or out of range",
            ),
            ErrorKind::Script,
            true,
        );
        row(
            reply("WRONGTYPE Operation against a key holding the wrong kind of value"),
            ErrorKind::Server,
            false,
        );
        row(
            reply("EXECABORT Transaction discarded because of previous errors."),
            ErrorKind::Server,
            false,
        );
        row(
            reply(
                "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.",
            ),
            ErrorKind::Server,
            false,
        );
        row(
            reply("NOSCRIPT No matching script. Please use EVAL."),
            ErrorKind::Server,
            false,
        );
        row(
            reply("CROSSSLOT Keys in request don't hash to the same slot"),
            ErrorKind::CrossSlot,
            false,
        );
        row(client(RedisKind::Parse), ErrorKind::UnexpectedReply, false);
        row(
            client(RedisKind::UnexpectedReturnType),
            ErrorKind::UnexpectedReply,
            false,
        );
        row(
            client(RedisKind::InvalidClientConfig),
            ErrorKind::InvalidArgument,
            false,
        );
        row(
            client(RedisKind::EmptySentinelList),
            ErrorKind::InvalidArgument,
            false,
        );
        row(
            client(RedisKind::RESP3NotSupported),
            ErrorKind::Unsupported,
            false,
        );
        for kind in [
            ErrorKind::Authentication,
            ErrorKind::Permission,
            ErrorKind::Script,
            ErrorKind::OutOfMemory,
        ] {
            assert!(Error::new(kind, "x").is_refused());
        }
    }

    #[test]
    fn a_demoted_primary_is_asked_for_again_a_loading_one_is_not() {
        assert!(is_demoted(&reply(
            "READONLY You can't write against a read only replica."
        )));
        assert!(is_demoted(&reply(
            "ERR Error running script (call to f_1f0e): @user_script:1: @user_script: 1: -READONLY You can't write against a read only replica."
        )));
        assert!(is_demoted(&reply("MASTERDOWN Link with MASTER is down")));
        assert!(breaks_connection(&io(io::ErrorKind::ConnectionReset)));
        assert!(!is_demoted(&reply(
            "LOADING Redis is loading the dataset in memory"
        )));
        assert!(!is_demoted(&reply("BUSY Redis is busy running a script.")));
        assert!(!breaks_connection(&reply("NOPERM denied")));
        assert!(!is_demoted(&reply("NOPERM denied")));
        // A timed-out connection still works; a new one would wait as long.
        assert!(!breaks_connection(&io(io::ErrorKind::TimedOut)));
        assert!(breaks_connection(&io(io::ErrorKind::BrokenPipe)));
        assert!(breaks_connection(&client(RedisKind::Parse)));
    }

    #[test]
    fn a_denial_by_the_acl_is_told_from_other_refusals() {
        assert!(denied_by_acl(&reply(
            "NOPERM User app has no permissions to run the 'incr' command"
        )));
        assert!(!denied_by_acl(&reply(
            "WRONGTYPE Operation against a key holding the wrong kind of value"
        )));
        assert!(!denied_by_acl(&reply("OOM command not allowed")));
        assert!(!denied_by_acl(&io(io::ErrorKind::ConnectionReset)));
        // Inside a script: the script's own refusal, not the way the step was sent.
        assert!(!denied_by_acl(&reply(
            "NOPERM No permissions to access a key script: 1f0e, on @user_script:3."
        )));
    }

    #[test]
    fn increx_fallback_recognises_unknown_and_denied() {
        assert!(refuses_command(&reply(
            "ERR unknown command 'INCREX', with args beginning with: "
        )));
        assert!(refuses_command(&reply(
            "NOPERM User app has no permissions to run the 'increx' command"
        )));
        assert!(!refuses_command(&reply(
            "WRONGTYPE Operation against a key holding the wrong kind of value"
        )));
        // Denied inside a script (a key): the command was taken, and ran.
        assert!(!refuses_command(&reply(
            "NOPERM No permissions to access a key script: 1f0e, on @user_script:3."
        )));
        assert!(!refuses_command(&reply(
            "ERR Error running script (call to f_1f0e): @user_script:3: -NOPERM No permissions to access a key"
        )));
    }
}
