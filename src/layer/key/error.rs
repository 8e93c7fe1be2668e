//! Why a request has no rate-limit key, and the status a layer answers with.

use std::borrow::Cow;
use std::fmt;

use http::StatusCode;

/// Why a request has no rate-limit key.
///
/// [`status`](Self::status) is the HTTP status a layer answers with.
///
/// # Example
///
/// ```
/// use http::StatusCode;
/// use leasehold::layer::key::{KeyError, KeyErrorKind, KeyExtractor};
///
/// // Key by tenant, from a header that only authenticated requests carry.
/// let by_tenant = KeyExtractor::from_fn(|parts| {
///     parts
///         .headers
///         .get("x-tenant")
///         .map(|tenant| tenant.as_bytes().to_vec())
///         .ok_or_else(|| KeyError::new("no tenant: is the request authenticated?"))
/// });
/// let (parts, ()) = http::Request::new(()).into_parts();
/// let err = by_tenant.extract(&parts).expect_err("no tenant header");
/// assert_eq!(err.kind(), KeyErrorKind::Custom);
/// assert_eq!(err.status(), StatusCode::BAD_REQUEST);
/// ```
#[derive(Debug)]
pub struct KeyError {
    kind: KeyErrorKind,
    reason: Cow<'static, str>,
}

/// The kind of a [`KeyError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyErrorKind {
    /// The request carries no peer address: the server is not set up to record it.
    MissingPeerAddress,
    /// The request lacks the header that holds the key.
    MissingHeader,
    /// The header that holds the key has a value that names no client.
    InvalidHeader,
    /// Raised by a [`KeyExtractor::from_fn`](super::KeyExtractor::from_fn) closure.
    Custom,
}

impl KeyError {
    /// An error of kind [`KeyErrorKind::Custom`], for [`KeyExtractor::from_fn`](super::KeyExtractor::from_fn) closures.
    pub fn new(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::with_kind(KeyErrorKind::Custom, reason)
    }

    pub(crate) fn with_kind(kind: KeyErrorKind, reason: impl Into<Cow<'static, str>>) -> Self {
        Self {
            kind,
            reason: reason.into(),
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> KeyErrorKind {
        self.kind
    }

    /// The response status: `500 Internal Server Error` for a missing peer address, which is
    /// the server's fault, and `400 Bad Request` otherwise.
    pub fn status(&self) -> StatusCode {
        match self.kind {
            KeyErrorKind::MissingPeerAddress => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for KeyError {}
