//! The crate's one error type.

use std::borrow::Cow;
use std::error::Error as StdError;
use std::fmt;

/// A specialized [`Result`](std::result::Result) for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error from a coordination step, a backend or a configuration.
///
/// The error is opaque: inspect it through [`kind`](Error::kind),
/// [`is_outcome_uncertain`](Error::is_outcome_uncertain) and, for
/// [`ErrorKind::Unsupported`], [`unsupported_feature`](Error::unsupported_feature).
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
    source: Option<Box<dyn StdError + Send + Sync>>,
}

/// What went wrong, broadly. New kinds may be added in minor releases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The connection to the backend failed or was lost.
    Io,
    /// The backend did not answer within the configured timeout.
    ///
    /// The step may still have run on the server: see
    /// [`Error::is_outcome_uncertain`].
    Timeout,
    /// The server answered with an error reply.
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
}

impl ErrorKind {
    fn describe(self) -> &'static str {
        match self {
            ErrorKind::Io => "backend I/O error",
            ErrorKind::Timeout => "backend timed out",
            ErrorKind::Server => "server error reply",
            ErrorKind::Unsupported => "unsupported server feature",
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::CrossSlot => "keys in different cluster slots",
            ErrorKind::CorruptState => "corrupt state",
            ErrorKind::CapacityExceeded => "capacity exceeded",
            ErrorKind::UnexpectedReply => "unexpected reply",
            ErrorKind::Closed => "closed",
            ErrorKind::CapacityMismatch => "semaphore capacity mismatch",
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
                source: None,
            }),
        }
    }

    pub(crate) fn invalid_argument(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
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

    pub(crate) fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.inner.source = Some(Box::new(source));
        self
    }

    pub(crate) fn uncertain(mut self, uncertain: bool) -> Self {
        self.inner.uncertain = uncertain;
        self
    }

    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// Whether the step may have taken effect on the server although it failed here.
    ///
    /// True when the request was (or may have been) sent but no reply arrived: a timeout or
    /// a connection lost mid-flight. A rejected argument or a refused connection is certain:
    /// nothing happened. Each primitive documents how it settles an uncertain outcome.
    pub fn is_outcome_uncertain(&self) -> bool {
        self.inner.uncertain
    }

    /// The missing server feature, for [`ErrorKind::Unsupported`] errors.
    pub fn unsupported_feature(&self) -> Option<UnsupportedFeature> {
        self.inner.unsupported
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Error");
        s.field("kind", &self.inner.kind)
            .field("message", &self.inner.message);
        if self.inner.uncertain {
            s.field("uncertain", &true);
        }
        if let Some(source) = &self.inner.source {
            s.field("source", source);
        }
        s.finish()
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
    fn unsupported_names_feature_and_version() {
        let err = Error::unsupported(UnsupportedFeature::new("INCREX", "Redis 8.8, Valkey 9.2"));
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        let text = err.to_string();
        assert!(text.contains("INCREX"), "{text}");
        assert!(text.contains("Redis 8.8, Valkey 9.2 or later"), "{text}");
    }

    #[test]
    fn error_is_send_sync_and_small() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Error>();
        assert_eq!(std::mem::size_of::<Error>(), std::mem::size_of::<usize>());
    }
}
