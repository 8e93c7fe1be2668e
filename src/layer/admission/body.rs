//! The response body of both layers: the inner body (holding a concurrency permit until it
//! ends), or a small one the layer wrote.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::sync::oneshot;

use crate::BoxError;
use crate::layer::concurrency_limit::{Cut, StreamGuard};

pin_project! {
    /// The body of a response that went through a layer of this crate
    /// ([`RateLimit`](crate::layer::rate_limit::RateLimit) or
    /// [`ConcurrencyLimit`](crate::layer::concurrency_limit::ConcurrencyLimit)): the inner
    /// service's body, or a small body the layer wrote itself (a 429, a 503 or a key error).
    ///
    /// Behind the concurrency layer, the inner body holds the request's permit until it
    /// ends, fails or is dropped (a client disconnect drops it), and the permit is renewed
    /// meanwhile. If the permit is lost (a renewal finds it gone, or cannot reach the backend
    /// before it would expire), the body ends with a [`PermitLost`] error instead of streaming
    /// on unaccounted for; if the response reaches the layer's
    /// [longest hold](crate::layer::concurrency_limit::RedisConcurrencyLimitLayer::max_hold),
    /// with a [`HoldLimitReached`] error, and the permit is released.
    #[derive(Debug)]
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<B> {
        Inner {
            #[pin]
            body: B,
            guard: Option<StreamGuard>,
            // The inner body ended; its end is held back until the permit is released.
            releasing: Option<oneshot::Receiver<()>>,
            // Nothing more to send: the body ended, failed or was cut.
            done: bool,
        },
        Full { bytes: Option<Bytes> },
    }
}

impl<B> ResponseBody<B> {
    /// The inner service's body, holding `guard` (if any) until it ends.
    pub(crate) fn inner(body: B, guard: Option<StreamGuard>) -> Self {
        ResponseBody {
            kind: Kind::Inner {
                body,
                guard,
                releasing: None,
                done: false,
            },
        }
    }

    /// A body the layer wrote.
    pub(crate) fn full(bytes: Bytes) -> Self {
        ResponseBody {
            kind: Kind::Full {
                bytes: (!bytes.is_empty()).then_some(bytes),
            },
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner {
                body,
                guard,
                releasing,
                done,
            } => {
                if *done {
                    return Poll::Ready(None);
                }
                if releasing.is_some() {
                    return poll_release(releasing, done, cx);
                }
                if let Some(cut) = guard.as_mut().and_then(|guard| guard.poll_cut(cx)) {
                    // Dropping the guard releases the permit in the background.
                    *guard = None;
                    *done = true;
                    return Poll::Ready(Some(Err(match cut {
                        Cut::Lost => Box::new(PermitLost),
                        Cut::HoldLimit => Box::new(HoldLimitReached),
                    })));
                }
                match ready!(body.poll_frame(cx)) {
                    Some(Ok(frame)) => Poll::Ready(Some(Ok(frame))),
                    Some(Err(err)) => {
                        // Failed: the permit is released in the background at once.
                        *guard = None;
                        *done = true;
                        Poll::Ready(Some(Err(err.into())))
                    }
                    None => match guard.take().and_then(StreamGuard::finish) {
                        Some(released) => {
                            *releasing = Some(released);
                            poll_release(releasing, done, cx)
                        }
                        None => {
                            *done = true;
                            Poll::Ready(None)
                        }
                    },
                }
            }
            KindProj::Full { bytes } => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            // While a permit is held, the end is reported by `poll_frame` only, after its
            // release: a connection that trusted the inner body's hint would finish the
            // response first.
            Kind::Inner {
                body,
                guard,
                releasing,
                done,
            } => *done || (guard.is_none() && releasing.is_none() && body.is_end_stream()),
            Kind::Full { bytes } => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body, .. } => body.size_hint(),
            Kind::Full { bytes } => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}

/// Holds the body's end back until the keeper has released the permit (or given up,
/// within its bound): a client that sees the end can take the slot again at once.
fn poll_release<T>(
    releasing: &mut Option<oneshot::Receiver<()>>,
    done: &mut bool,
    cx: &mut Context<'_>,
) -> Poll<Option<T>> {
    if let Some(released) = releasing {
        _ = ready!(Pin::new(released).poll(cx));
    }
    *releasing = None;
    *done = true;
    Poll::Ready(None)
}

/// A streaming response was cut because its concurrency permit was lost: renewing it found
/// it gone (it expired, for example after a long pause, or Redis lost it), or the backend
/// could not be reached before it would have expired.
///
/// # Example
///
/// ```
/// use leasehold::layer::concurrency_limit::{BoxError, PermitLost};
///
/// // Tell a cut stream from other body errors, for example when logging.
/// fn was_cut(error: &BoxError) -> bool {
///     error.is::<PermitLost>()
/// }
/// assert!(!was_cut(&BoxError::from("some other failure")));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitLost;

impl fmt::Display for PermitLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the response's concurrency permit was lost; the stream was cut")
    }
}

impl std::error::Error for PermitLost {}

/// A streaming response was cut because it held its concurrency slot for the layer's
/// [longest hold](crate::layer::concurrency_limit::RedisConcurrencyLimitLayer::max_hold): its
/// body had not ended (a stalled upstream, a client reading slowly), and its permit was
/// released.
///
/// # Example
///
/// ```
/// use leasehold::layer::concurrency_limit::{BoxError, HoldLimitReached, PermitLost};
///
/// // Tell why a stream was cut, for example when logging.
/// fn why_cut(error: &BoxError) -> Option<&'static str> {
///     if error.is::<HoldLimitReached>() {
///         Some("held its slot too long")
///     } else if error.is::<PermitLost>() {
///         Some("lost its permit")
///     } else {
///         None
///     }
/// }
/// assert_eq!(why_cut(&BoxError::from("some other failure")), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HoldLimitReached;

impl fmt::Display for HoldLimitReached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the response held its concurrency slot for the longest hold; the stream was cut",
        )
    }
}

impl std::error::Error for HoldLimitReached {}
