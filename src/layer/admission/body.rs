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
use crate::response::Answer;

/// What an admitted response holds until its body ends (a concurrency layer's permit). The
/// shared body knows no layer: it asks its guard whether the stream must be cut, and tells
/// it when the body ended.
pub(crate) trait BodyGuard: fmt::Debug + Send + Sync + 'static {
    /// The error to end the stream with when it must be cut; if none, `cx` is woken when it
    /// must.
    fn poll_cut(&mut self, cx: &mut Context<'_>) -> Option<BoxError>;

    /// The body ended: releases what the guard holds. The receiver completes once it is
    /// released (or the release gave up within its bound); `None` when nothing is to wait.
    fn finish(self: Box<Self>) -> Option<oneshot::Receiver<()>>;
}

pin_project! {
    /// The body of a response that went through a layer of this crate
    /// ([`RateLimit`](crate::layer::rate_limit::RateLimit) or
    /// [`ConcurrencyLimit`](crate::layer::concurrency_limit::ConcurrencyLimit)): the inner
    /// service's body, or a small body the layer wrote itself (a 429, a 503 or a key error).
    ///
    /// Behind the concurrency layer, the inner body holds the request's permit until it
    /// ends, fails or is dropped (a client disconnect drops it), and the permit is renewed
    /// meanwhile. If the permit is lost (a renewal finds it gone, or cannot reach the backend
    /// before it would expire), the body ends with a
    /// [`PermitLost`](crate::layer::concurrency_limit::PermitLost) error instead of streaming
    /// on unaccounted for; if the response reaches the layer's
    /// [longest hold](crate::layer::concurrency_limit::RedisConcurrencyLimitLayer::max_hold),
    /// with a [`HoldLimitReached`](crate::layer::concurrency_limit::HoldLimitReached) error,
    /// and the permit is released.
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
            guard: Option<Box<dyn BodyGuard>>,
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
    pub(crate) fn inner(body: B, guard: Option<Box<dyn BodyGuard>>) -> Self {
        ResponseBody {
            kind: Kind::Inner {
                body,
                guard,
                releasing: None,
                done: false,
            },
        }
    }

    /// The response the layer wrote, as it is sent.
    pub(crate) fn written(answer: Answer) -> http::Response<Self> {
        let (status, headers, body) = answer.into_parts();
        let mut response = http::Response::new(ResponseBody::full(body));
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        response
    }

    /// A body the layer wrote.
    fn full(bytes: Bytes) -> Self {
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
                    // Dropping the guard releases what it holds in the background.
                    *guard = None;
                    *done = true;
                    return Poll::Ready(Some(Err(cut)));
                }
                match ready!(body.poll_frame(cx)) {
                    Some(Ok(frame)) => Poll::Ready(Some(Ok(frame))),
                    Some(Err(err)) => {
                        // Failed: the permit is released in the background at once.
                        *guard = None;
                        *done = true;
                        Poll::Ready(Some(Err(err.into())))
                    }
                    None => match guard.take().and_then(BodyGuard::finish) {
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
