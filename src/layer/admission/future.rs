//! The response future both layers share: await the decision, then call the inner service
//! or answer.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::body::ResponseBody;
use super::{Decision, Grant, Refusal};
use crate::response::Answer;

/// A decision the backend is taking.
pub(crate) type Deciding<G> = Pin<Box<dyn Future<Output = Decision<G>> + Send>>;

pin_project! {
    /// Decides, then calls the inner service with the grant or answers without calling it.
    pub(crate) struct ResponseFuture<S, ReqBody, G>
    where
        S: Service<Request<ReqBody>>,
        G: Grant,
    {
        #[pin]
        state: State<S, ReqBody, G>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqBody, G>
    where
        S: Service<Request<ReqBody>>,
        G: Grant,
    {
        Deciding {
            decision: Deciding<G>,
            request: Option<Request<ReqBody>>,
            service: Option<S>,
        },
        Calling {
            #[pin]
            future: S::Future,
            grant: Option<G>,
        },
        Answered {
            answer: Option<Answer>,
        },
    }
}

impl<S, ReqBody, G> ResponseFuture<S, ReqBody, G>
where
    S: Service<Request<ReqBody>>,
    G: Grant,
{
    /// Awaits `decision`, then calls `service` (the instance `poll_ready` prepared) or
    /// answers.
    pub(crate) fn deciding(decision: Deciding<G>, request: Request<ReqBody>, service: S) -> Self {
        ResponseFuture {
            state: State::Deciding {
                decision,
                request: Some(request),
                service: Some(service),
            },
        }
    }

    /// Decided without the backend: called with `grant` now, or answered.
    pub(crate) fn decided(
        decision: Decision<G>,
        request: Request<ReqBody>,
        service: &mut S,
    ) -> Self {
        ResponseFuture {
            state: State::next(decision, request, service),
        }
    }

    /// [`decided`](Self::decided), for a request still in its parts: a refusal is written
    /// from them, and only an admitted request is put together again.
    // Inlined into the layer's `call`, so that the parts are not copied on the way.
    #[inline(always)]
    pub(crate) fn decided_in_parts(
        decision: Decision<G>,
        parts: http::request::Parts,
        body: ReqBody,
        service: &mut S,
    ) -> Self {
        let state = match decision {
            Decision::Refuse(refusal) => State::Answered {
                answer: Some(refusal.answer(&parts)),
            },
            admit => State::next(admit, Request::from_parts(parts, body), service),
        };
        ResponseFuture { state }
    }

    /// Answered at once, without the inner service.
    pub(crate) fn answer(answer: Answer) -> Self {
        ResponseFuture {
            state: State::Answered {
                answer: Some(answer),
            },
        }
    }
}

impl<S, ReqBody, G> State<S, ReqBody, G>
where
    S: Service<Request<ReqBody>>,
    G: Grant,
{
    fn next(decision: Decision<G>, mut request: Request<ReqBody>, service: &mut S) -> Self {
        match decision {
            Decision::Admit(grant) => {
                grant.prepare(&mut request);
                State::Calling {
                    future: service.call(request),
                    grant: Some(grant),
                }
            }
            Decision::Refuse(refusal) => {
                let (parts, _body) = request.into_parts();
                State::Answered {
                    answer: Some(refusal.answer(&parts)),
                }
            }
        }
    }
}

impl<S, ReqBody, ResBody, G> Future for ResponseFuture<S, ReqBody, G>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    G: Grant,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Deciding {
                    decision,
                    request,
                    service,
                } => {
                    let decision = ready!(decision.as_mut().poll(cx));
                    let (Some(request), Some(mut service)) = (request.take(), service.take())
                    else {
                        unreachable!("a deciding future holds its request and service")
                    };
                    let next = State::next(decision, request, &mut service);
                    this.state.set(next);
                }
                StateProj::Calling { future, grant } => {
                    let response = ready!(future.poll(cx));
                    // On an error the grant drops here (a permit is then released).
                    let grant = grant.take();
                    let response = response?;
                    return Poll::Ready(Ok(match grant {
                        Some(grant) => grant.finish(response),
                        None => response.map(|body| ResponseBody::inner(body, None)),
                    }));
                }
                StateProj::Answered { answer } => {
                    let answer = answer
                        .take()
                        .unwrap_or_else(Answer::polled_after_completion);
                    return Poll::Ready(Ok(ResponseBody::written(answer)));
                }
            }
        }
    }
}
