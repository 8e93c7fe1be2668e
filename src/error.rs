//! The crate's one error type, [`Error`], with its [`ErrorKind`], and the [`Result`] every
//! fallible call returns. All three are also at the crate's root: `leasehold::Result`.

use std::borrow::Cow;
use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

/// A specialized [`Result`](std::result::Result) for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error from a coordination step, a backend or a configuration.
///
/// The error is opaque: inspect it through [`kind`](Error::kind), its failure class
/// ([`is_unavailable`](Error::is_unavailable) or [`is_refused`](Error::is_refused)),
/// [`is_outcome_uncertain`](Error::is_outcome_uncertain), [`retry_after`](Error::retry_after)
/// and, for [`ErrorKind::Unsupported`], [`unsupported_feature`](Error::unsupported_feature).
///
/// # Failure classes
///
/// Every error is in exactly one of two classes, decided here once and used by every layer,
/// extractor and primitive of the crate:
///
/// - **unavailable**: no answer, no connection, or a reply that says the server cannot take
///   the command *right now* (a failover or a resharding in progress, a dataset still loading).
///   Waiting may help. It is the only class that a fail-open
///   [`FailurePolicy`](crate::layer::FailurePolicy) lets through, and the only one a circuit
///   breaker counts.
/// - **refused**: the server (or the crate, before sending) answered no, and asking again
///   will get the same answer until someone changes something: credentials, ACLs, a script
///   error, corrupt state, a full memory. Never failed open: a limit must not be lifted
///   because an operator revoked a permission.
///
/// Orthogonal to the class, [`is_outcome_uncertain`](Error::is_outcome_uncertain) says whether
/// the step **may have applied** although it failed here. A reply met by a script part way,
/// or by a pipeline's second command or later, may have followed writes that stay.
///
/// | kind | class | may have applied | from |
/// |---|---|---|---|
/// | [`Io`](ErrorKind::Io) | unavailable | when the connection broke after the request was written | refused, reset or dropped connections; the cluster client finding no connection for a slot |
/// | [`Timeout`](ErrorKind::Timeout) | unavailable | yes, but for an acquisition that reached the server after its deadline, or a connection not made in time (nothing was sent) | no reply within the response timeout; an acquisition that arrived too late to take effect; no connection within its bound |
/// | [`Transient`](ErrorKind::Transient) | unavailable | no | `READONLY`, `MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN`, `LOADING`, `BUSY`, `NOREPLICAS`, an unfollowed `MOVED`/`ASK`; Sentinel naming no primary; a durable acquisition too few replicas confirmed (released; uncertain if the release failed) |
/// | [`Authentication`](ErrorKind::Authentication) | refused | no | `WRONGPASS`, `NOAUTH`, a failed `AUTH` on (re)connect |
/// | [`Tls`](ErrorKind::Tls) | refused | no | a server certificate that does not verify; a client certificate refused, or asked for and missing; any other TLS failure of a handshake, such as a `rediss://` URL for a port that speaks plain text |
/// | [`Permission`](ErrorKind::Permission) | refused | no, unless a script met it part way | `NOPERM` (an ACL denies the command or a key) |
/// | [`Script`](ErrorKind::Script) | refused | yes: a script that fails keeps the writes it made before | a Lua error (`ERR … user_script …`, `ERR Error running script`) |
/// | [`OutOfMemory`](ErrorKind::OutOfMemory) | refused | no | `OOM` (`maxmemory` reached under `noeviction`) |
/// | [`Server`](ErrorKind::Server) | refused | no, unless a script met it part way | any other error reply: unknown command, wrong type, syntax, `EXECABORT`, `MISCONF` |
/// | [`Unsupported`](ErrorKind::Unsupported) | refused | no | a server below the floor or without a feature |
/// | [`CorruptState`](ErrorKind::CorruptState) | refused | no | stored state of the wrong shape (checked before any write) |
/// | [`CapacityExceeded`](ErrorKind::CapacityExceeded) | refused | no | the memory backend at its key bound ([`retry_after`](Error::retry_after): when a key expires) |
/// | [`CapacityMismatch`](ErrorKind::CapacityMismatch) | refused | no | a semaphore's capacity differs from its holders' |
/// | [`AlreadyComplete`](ErrorKind::AlreadyComplete) | refused | no | a count-down of a latch generation whose count is zero |
/// | [`NotHeld`](ErrorKind::NotHeld) | refused | no | a step that stands on a lease no longer held: a campaign whose session was lost |
/// | [`UnexpectedReply`](ErrorKind::UnexpectedReply) | refused | the step ran | a reply of the wrong shape |
/// | [`InvalidArgument`](ErrorKind::InvalidArgument), [`CrossSlot`](ErrorKind::CrossSlot), [`Closed`](ErrorKind::Closed) | refused | no: nothing was sent | the caller's arguments or configuration; a primitive shut down |
///
/// Where OOM belongs: a full Redis answers, and answers no to every write until memory is
/// freed or raised. That is not an outage that passes by waiting a moment, and a client that
/// can create keys (one per distinct rate-limit key) could fill the server on purpose: failing
/// open on it would let that client lift every limit. So it is *refused*, like the memory
/// backend at its bound.
///
/// # Example
///
/// ```
/// use leasehold::backend::memory::MemoryBackend;
/// use leasehold::ErrorKind;
///
/// let err = MemoryBackend::builder().max_keys(0).build().unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidArgument);
/// assert!(!err.is_outcome_uncertain());
/// ```
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    kind: ErrorKind,
    message: Cow<'static, str>,
    unsupported: Option<UnsupportedFeature>,
    uncertain: bool,
    retry_after: Option<Duration>,
    /// The stored key a corrupt state was found under: kept out of the message.
    key: Option<Box<[u8]>>,
    source: Option<Box<dyn StdError + Send + Sync>>,
}

/// What went wrong, broadly. New kinds may be added in minor releases. The
/// [failure classes](Error#failure-classes) table says which kinds are *unavailable* and
/// which *refused*.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The connection to the backend failed or was lost. *Unavailable*.
    Io,
    /// The backend did not answer within the configured timeout. *Unavailable*.
    ///
    /// The step may still have run on the server: see
    /// [`Error::is_outcome_uncertain`].
    Timeout,
    /// The server cannot take the command right now and said so: a failover or resharding
    /// in progress (`READONLY`, `MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN`), a dataset still
    /// loading (`LOADING`), a long script running (`BUSY`), too few replicas (`NOREPLICAS`).
    /// Nothing was applied. *Unavailable*: the Redis backend retries these by itself within
    /// its [retry bound](crate::backend::redis::RedisBackendBuilder::transient_retry).
    ///
    /// Also a [durable](crate::coordination::lock::FencedLock::durable) acquisition that too
    /// few replicas confirmed in time: not retried, and its lease released (the lock's
    /// counter has moved; uncertain when the release failed).
    Transient,
    /// The server refused the credentials (`WRONGPASS`, `NOAUTH`, a failed `AUTH` when
    /// reconnecting). *Refused*.
    Authentication,
    /// The TLS handshake failed: the server's certificate does not verify against the
    /// trusted roots (see [`TlsSettings`](crate::backend::redis::TlsSettings)), or the
    /// server refused the client's certificate, or asked for one the client does not have,
    /// or the server speaks no TLS (a `rediss://` URL for a plaintext port). *Refused*:
    /// nothing was sent, and asking again gets the same answer.
    Tls,
    /// An ACL denies the command or a key it touches (`NOPERM`). *Refused*.
    Permission,
    /// A Lua script raised an error. *Refused*; writes the script made before the error
    /// stay, so the outcome is uncertain.
    Script,
    /// The server is out of memory and refuses writes (`OOM`). *Refused*: see the
    /// [failure classes](Error#failure-classes).
    OutOfMemory,
    /// The server answered with another error reply (an unknown command, a wrong type, a
    /// syntax error). *Refused*.
    Server,
    /// The server lacks a feature this step needs; see [`Error::unsupported_feature`].
    Unsupported,
    /// An argument or a configuration value is invalid. Nothing was sent.
    InvalidArgument,
    /// The keys of a multi-key step hash to different cluster slots. Nothing was sent.
    CrossSlot,
    /// Stored state does not have the shape this step expects (for example a counter
    /// that is not a number). Nothing was changed.
    CorruptState,
    /// The in-process backend holds as many keys as it may; nothing was stored.
    CapacityExceeded,
    /// The backend's reply did not have the expected shape.
    UnexpectedReply,
    /// The primitive was shut down locally; nothing was sent.
    Closed,
    /// A semaphore was asked for with a capacity different from the one its active permits
    /// use. Nothing was acquired; once every permit is released or expired, a new capacity
    /// is accepted.
    CapacityMismatch,
    /// A countdown latch's generation was counted down when its count was zero already.
    /// Nothing changed.
    AlreadyComplete,
    /// A step stood on a lease that is not held any more (expired, revoked or lost): an
    /// election campaign whose session ended. Nothing of it is left behind.
    NotHeld,
}

impl ErrorKind {
    fn describe(self) -> &'static str {
        match self {
            ErrorKind::Io => "backend I/O error",
            ErrorKind::Timeout => "backend timed out",
            ErrorKind::Transient => "server temporarily unavailable",
            ErrorKind::Authentication => "authentication failed",
            ErrorKind::Tls => "TLS handshake failed",
            ErrorKind::Permission => "permission denied",
            ErrorKind::Script => "script error",
            ErrorKind::OutOfMemory => "server out of memory",
            ErrorKind::Server => "server error reply",
            ErrorKind::Unsupported => "unsupported server feature",
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::CrossSlot => "keys in different cluster slots",
            ErrorKind::CorruptState => "corrupt state",
            ErrorKind::CapacityExceeded => "capacity exceeded",
            ErrorKind::UnexpectedReply => "unexpected reply",
            ErrorKind::Closed => "closed",
            ErrorKind::CapacityMismatch => "semaphore capacity mismatch",
            ErrorKind::AlreadyComplete => "latch already complete",
            ErrorKind::NotHeld => "lease not held",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// A server feature that a step needs, with the first server versions that have it.
///
/// # Example
///
/// ```
/// use leasehold::UnsupportedFeature;
///
/// let feature = UnsupportedFeature::new("hash field expiry (HPEXPIRE)", "Redis 7.4");
/// assert_eq!(feature.name(), "hash field expiry (HPEXPIRE)");
/// assert_eq!(feature.minimum_version(), "Redis 7.4");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UnsupportedFeature {
    name: &'static str,
    minimum_version: &'static str,
}

impl UnsupportedFeature {
    /// Describes a feature by name and the minimum server versions that support it.
    pub const fn new(name: &'static str, minimum_version: &'static str) -> Self {
        Self {
            name,
            minimum_version,
        }
    }

    /// The feature's name, usually with the command that provides it.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The first server versions that have the feature, for example `"Redis 7.4"`.
    pub fn minimum_version(&self) -> &'static str {
        self.minimum_version
    }
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        Error {
            inner: Box::new(Inner {
                kind,
                message: message.into(),
                unsupported: None,
                uncertain: false,
                retry_after: None,
                key: None,
                source: None,
            }),
        }
    }

    pub(crate) fn invalid_argument(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    /// A step (`what`: "the acquisition", "the write") that reached the server after its
    /// deadline on the server's clock: certainly without effect, and *unavailable* (the
    /// backend did not answer in time for it to count).
    pub(crate) fn arrived_late(what: &str) -> Self {
        Self::new(
            ErrorKind::Timeout,
            format!("{what} reached the server after its deadline; nothing was changed"),
        )
    }

    /// Stored state of the wrong shape under the key `key`, found before anything was
    /// written: `what` says what is wrong with it (and which of the step's keys it is).
    /// The key itself is kept out of the message (see [`key`](Self::key)).
    pub(crate) fn corrupt_state(key: &[u8], what: impl fmt::Display) -> Self {
        let mut err = Error::new(
            ErrorKind::CorruptState,
            format!("{what}; nothing was changed"),
        );
        err.inner.key = Some(key.into());
        err
    }

    /// The same error without its source, for an answer several callers receive (the
    /// source is not `Clone`; its text is in the message).
    pub(crate) fn clone_without_source(&self) -> Self {
        Error {
            inner: Box::new(Inner {
                kind: self.inner.kind,
                message: self.inner.message.clone(),
                unsupported: self.inner.unsupported,
                uncertain: self.inner.uncertain,
                retry_after: self.inner.retry_after,
                key: self.inner.key.clone(),
                source: None,
            }),
        }
    }

    /// The same error, its message prefixed with what was being done (`"connecting to …"`).
    pub(crate) fn context(mut self, context: impl fmt::Display) -> Self {
        self.inner.message = format!("{context}: {}", self.inner.message).into();
        self
    }

    pub(crate) fn unexpected_reply(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::UnexpectedReply, message)
    }

    pub(crate) fn unsupported(feature: UnsupportedFeature) -> Self {
        let mut err = Self::new(
            ErrorKind::Unsupported,
            format!(
                "the server does not support {}; it needs {} or later",
                feature.name, feature.minimum_version
            ),
        );
        err.inner.unsupported = Some(feature);
        err
    }

    /// [`unsupported`](Self::unsupported) for a whole server, naming what was found.
    pub(crate) fn unsupported_found(feature: UnsupportedFeature, found: &str) -> Self {
        let mut err = Self::new(
            ErrorKind::Unsupported,
            format!(
                "the server is {found}; {} need {} or later",
                feature.name, feature.minimum_version
            ),
        );
        err.inner.unsupported = Some(feature);
        err
    }

    pub(crate) fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.inner.source = Some(Box::new(source));
        self
    }

    pub(crate) fn uncertain(mut self, uncertain: bool) -> Self {
        self.inner.uncertain = uncertain;
        self
    }

    pub(crate) fn with_retry_after(mut self, retry_after: Option<Duration>) -> Self {
        self.inner.retry_after = retry_after;
        self
    }

    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// Whether the backend gave no usable answer: no connection, no reply in time, or a reply
    /// saying it cannot take the command right now (see the
    /// [failure classes](Error#failure-classes)). The only errors a fail-open policy lets
    /// through and a circuit breaker counts.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self.inner.kind,
            ErrorKind::Io | ErrorKind::Timeout | ErrorKind::Transient
        )
    }

    /// Whether the server (or the crate, before sending) answered no: the opposite of
    /// [`is_unavailable`](Self::is_unavailable). Asking again gets the same answer until
    /// something changes; such errors never fail open.
    pub fn is_refused(&self) -> bool {
        !self.is_unavailable()
    }

    /// When the step could succeed again, where the backend can tell: for a full memory
    /// backend, when its first key expires. `None` when unknown.
    pub fn retry_after(&self) -> Option<Duration> {
        self.inner.retry_after
    }

    /// The stored key a [`CorruptState`](ErrorKind::CorruptState) error was found under, as
    /// the step names it (without the handle's key prefix); `None` for other errors.
    ///
    /// It is not in the message, which logs carry at `ERROR` (the crate's own among them):
    /// a key can hold a client's key, an address or an API key. Show it where such keys may
    /// go. [`Debug`](fmt::Debug) shows it too.
    ///
    /// ```
    /// # async fn example(lock: leasehold::coordination::lock::FencedLock) {
    /// if let Err(err) = lock.try_acquire(std::time::Duration::from_secs(30)).await {
    ///     if let Some(key) = err.key() {
    ///         tracing::debug!(key = %String::from_utf8_lossy(key), "corrupt state");
    ///     }
    /// }
    /// # }
    /// ```
    pub fn key(&self) -> Option<&[u8]> {
        self.inner.key.as_deref()
    }

    /// Whether the step may have taken effect on the server although it failed here.
    ///
    /// True when the request was (or may have been) sent but no reply arrived (a timeout or
    /// a connection lost mid-flight), or when a script failed part way. A rejected argument,
    /// a refused connection or a refusal by the server is certain: nothing happened. Each
    /// primitive documents how it settles an uncertain outcome.
    pub fn is_outcome_uncertain(&self) -> bool {
        self.inner.uncertain
    }

    /// Whether the failed step may have changed something on the backend: its outcome is
    /// [uncertain](Self::is_outcome_uncertain), or its reply could not be read although the
    /// step ran (the "may have applied" column of the [failure classes](Self#failure-classes)).
    /// Otherwise it certainly changed nothing: refused before it was sent, refused by the
    /// server before it ran, or answered by a step that validates before it writes.
    pub(crate) fn may_have_applied(&self) -> bool {
        self.inner.uncertain || self.inner.kind == ErrorKind::UnexpectedReply
    }

    /// The missing server feature, for [`ErrorKind::Unsupported`] errors.
    pub fn unsupported_feature(&self) -> Option<UnsupportedFeature> {
        self.inner.unsupported
    }
}

/// Readable as `main`'s error: the message, whether it may have applied, and its causes. The
/// alternate form (`{:#?}`) shows every field.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !f.alternate() {
            write!(f, "{self}")?;
            if let Some(key) = &self.inner.key {
                write!(f, " (key {:?})", String::from_utf8_lossy(key))?;
            }
            if self.may_have_applied() {
                f.write_str(" (it may have applied)")?;
            }
            let mut source = StdError::source(self);
            while let Some(cause) = source {
                // A cause whose words the message already carries (a client error passed
                // through) is not said twice.
                let text = cause.to_string();
                let words = without_kind_tag(&text);
                if !self.inner.message.contains(words) {
                    write!(f, "\n  caused by: {words}")?;
                }
                source = cause.source();
            }
            return Ok(());
        }
        let mut s = f.debug_struct("Error");
        s.field("kind", &self.inner.kind)
            .field("message", &self.inner.message);
        if self.inner.uncertain {
            s.field("uncertain", &true);
        }
        if let Some(retry_after) = self.inner.retry_after {
            s.field("retry_after", &retry_after);
        }
        if let Some(key) = &self.inner.key {
            s.field("key", &String::from_utf8_lossy(key));
        }
        if let Some(source) = &self.inner.source {
            s.field("source", source);
        }
        s.finish()
    }
}

/// A cause's words without the ` - Kind` tag a client appends to its own (`Redis URL did not
/// parse - InvalidClientConfig`): the error's kind says it.
pub(crate) fn without_kind_tag(text: &str) -> &str {
    match text.rsplit_once(" - ") {
        Some((words, tag)) if !tag.is_empty() && tag.chars().all(|c| c.is_ascii_alphanumeric()) => {
            words
        }
        _ => text,
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.inner.kind, self.inner.message)
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|source| source as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_step_certainly_took_nothing_and_is_unavailability() {
        let err = Error::arrived_late("the acquisition");
        assert!(!err.may_have_applied());
        assert!(err.is_unavailable());
        assert_eq!(
            err.to_string(),
            "backend timed out: the acquisition reached the server after its deadline; \
             nothing was changed"
        );
    }

    #[test]
    fn unsupported_names_feature_and_version() {
        let err = Error::unsupported(UnsupportedFeature::new("INCREX", "Redis 8.8, Valkey 9.2"));
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        let text = err.to_string();
        assert!(text.contains("INCREX"), "{text}");
        assert!(text.contains("Redis 8.8, Valkey 9.2 or later"), "{text}");
    }

    #[test]
    fn every_kind_is_in_one_class() {
        let unavailable = [ErrorKind::Io, ErrorKind::Timeout, ErrorKind::Transient];
        let refused = [
            ErrorKind::Authentication,
            ErrorKind::Tls,
            ErrorKind::Permission,
            ErrorKind::Script,
            ErrorKind::OutOfMemory,
            ErrorKind::Server,
            ErrorKind::Unsupported,
            ErrorKind::InvalidArgument,
            ErrorKind::CrossSlot,
            ErrorKind::CorruptState,
            ErrorKind::CapacityExceeded,
            ErrorKind::UnexpectedReply,
            ErrorKind::Closed,
            ErrorKind::CapacityMismatch,
            ErrorKind::AlreadyComplete,
            ErrorKind::NotHeld,
        ];
        for kind in unavailable {
            let err = Error::new(kind, "x");
            assert!(err.is_unavailable() && !err.is_refused(), "{kind:?}");
        }
        for kind in refused {
            let err = Error::new(kind, "x");
            assert!(err.is_refused() && !err.is_unavailable(), "{kind:?}");
        }
    }

    #[test]
    fn only_an_uncertain_outcome_or_an_unread_reply_may_have_applied() {
        assert!(!Error::new(ErrorKind::Io, "refused").may_have_applied());
        assert!(!Error::invalid_argument("lease").may_have_applied());
        // No connection within the bound: nothing was sent.
        assert!(!Error::new(ErrorKind::Timeout, "connecting").may_have_applied());
        // An error reply to a command that did not run.
        assert!(!Error::new(ErrorKind::Server, "WRONGTYPE").may_have_applied());
        assert!(
            Error::new(ErrorKind::Io, "dropped")
                .uncertain(true)
                .may_have_applied()
        );
        assert!(
            Error::new(ErrorKind::Timeout, "slow")
                .uncertain(true)
                .may_have_applied()
        );
        assert!(
            Error::new(ErrorKind::Script, "part way")
                .uncertain(true)
                .may_have_applied()
        );
        assert!(Error::unexpected_reply("odd").may_have_applied());
    }

    #[test]
    fn debug_reads_as_a_sentence_with_its_causes() {
        let cause = std::io::Error::other("connection reset");
        let err = Error::new(ErrorKind::Io, "the request was lost")
            .uncertain(true)
            .with_source(cause);
        assert_eq!(
            format!("{err:?}"),
            "backend I/O error: the request was lost (it may have applied)\n  caused by: connection reset"
        );
        assert!(format!("{err:#?}").contains("kind: Io"));
    }

    #[test]
    fn error_is_send_sync_and_small() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Error>();
        assert_eq!(std::mem::size_of::<Error>(), std::mem::size_of::<usize>());
    }
}
