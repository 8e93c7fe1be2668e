//! The response future of [`ConcurrencyLimit`](super::ConcurrencyLimit): acquire a permit,
//! then call the inner service or answer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::answer::Answer;
use super::body::GuardedBody;
use super::guard::StreamGuard;
use super::layer::Config;
use crate::coordination::semaphore::Attempt;
use crate::error::{Error, ErrorKind};
use crate::layer::FailurePolicy;
use crate::layer::circuit_breaker::Admission;
use crate::layer::key::KeyError;

type Acquisition = Pin<Box<dyn Future<Output = Result<Attempt, Failure>> + Send>>;

/// Why no permit came.
pub(crate) enum Failure {
    Backend(Error),
    TimedOut,
    /// The circuit breaker is open: nothing was sent.
    CircuitOpen,
}

impl Failure {
    /// Whether the backend looks unreachable, which is what fails open and what the
    /// circuit breaker counts. Other errors (a script error, a capacity mismatch, an
    /// authorization failure) are mistakes to surface, never reasons to lift the limit.
    fn is_availability(&self) -> bool {
        match self {
            Failure::Backend(err) => matches!(err.kind(), ErrorKind::Io | ErrorKind::Timeout),
            Failure::TimedOut | Failure::CircuitOpen => true,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Backend(err) => err.fmt(f),
            Failure::TimedOut => f.write_str("no permit within the layer's timeout"),
            Failure::CircuitOpen => f.write_str("the circuit breaker is open"),
        }
    }
}

pin_project! {
    /// Response future for [`ConcurrencyLimit`](super::ConcurrencyLimit).
    pub struct ResponseFuture<S, ReqBody>
    where
        S: Service<Request<ReqBody>>,
    {
        config: Arc<Config>,
        #[pin]
        state: State<S, ReqBody>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqBody>
    where
        S: Service<Request<ReqBody>>,
    {
        Acquiring {
            acquisition: Acquisition,
            admission: Option<Admission>,
            request: Option<Request<ReqBody>>,
            service: Option<S>,
        },
        Calling {
            #[pin]
            future: S::Future,
            guard: Option<StreamGuard>,
        },
        Answered {
            answer: Option<Answer>,
        },
    }
}

impl<S, ReqBody> ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    pub(crate) fn acquire(
        config: Arc<Config>,
        key: Vec<u8>,
        admission: Option<Admission>,
        request: Request<ReqBody>,
        service: S,
    ) -> Self {
        let semaphore = config.semaphore.clone();
        let (lease, timeout) = (config.lease, config.timeout);
        // A permit granted after the timeout dropped this future is released in the
        // background by the semaphore itself (its acquisition is cancel safe in effect).
        let acquisition = Box::pin(async move {
            match tokio::time::timeout(timeout, semaphore.try_acquire(&key, Some(lease))).await {
                Ok(Ok(attempt)) => Ok(attempt),
                Ok(Err(err)) => Err(Failure::Backend(err)),
                Err(_) => Err(Failure::TimedOut),
            }
        });
        ResponseFuture {
            config,
            state: State::Acquiring {
                acquisition,
                admission,
                request: Some(request),
                service: Some(service),
            },
        }
    }

    /// No acquisition is sent (the circuit is open): the failure policy answers at once.
    pub(crate) fn circuit_open(
        config: Arc<Config>,
        request: Request<ReqBody>,
        mut service: S,
    ) -> Self {
        let state = fail(&config, &Failure::CircuitOpen, request, &mut service);
        ResponseFuture { config, state }
    }

    pub(crate) fn key_error(config: Arc<Config>, err: &KeyError) -> Self {
        ResponseFuture {
            config,
            state: State::Answered {
                answer: Some(Answer::key_error(err)),
            },
        }
    }
}

/// What the failure policy makes of a request that got no permit from the backend.
fn fail<S, ReqBody>(
    config: &Config,
    failure: &Failure,
    request: Request<ReqBody>,
    service: &mut S,
) -> State<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    match config.failure {
        FailurePolicy::FailOpen if failure.is_availability() => {
            match config.local.clone().try_acquire_owned() {
                Ok(local) => {
                    tracing::warn!(reason = %failure, "concurrency limit backend unavailable; failing open with a local permit");
                    State::Calling {
                        future: service.call(request),
                        guard: Some(StreamGuard::local(local)),
                    }
                }
                Err(_) => {
                    tracing::warn!(reason = %failure, "concurrency limit backend unavailable and every local permit is taken");
                    State::Answered {
                        answer: Some(Answer::full(config, None)),
                    }
                }
            }
        }
        FailurePolicy::FailClosed { retry_after } => {
            tracing::warn!(reason = %failure, "concurrency limit backend failed; failing closed");
            State::Answered {
                answer: Some(Answer::unavailable(retry_after)),
            }
        }
        // Failing open, but the failure is not about availability.
        _ => {
            tracing::error!(reason = %failure, "concurrency limit failed; answering 503");
            State::Answered {
                answer: Some(Answer::unavailable(std::time::Duration::from_secs(1))),
            }
        }
    }
}

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Output = Result<Response<GuardedBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Acquiring {
                    acquisition,
                    admission,
                    request,
                    service,
                } => {
                    let outcome = ready!(acquisition.as_mut().poll(cx));
                    let (Some(request), Some(mut service)) = (request.take(), service.take())
                    else {
                        unreachable!("an acquiring future holds its request and service")
                    };
                    let admission = admission.take();
                    let next = match outcome {
                        Ok(attempt) => {
                            if let Some(admission) = admission {
                                admission.succeeded();
                            }
                            match attempt {
                                Attempt::Acquired(permit) => State::Calling {
                                    future: service.call(request),
                                    guard: Some(StreamGuard::keep(permit, this.config.lease)),
                                },
                                Attempt::Full { retry_after } => State::Answered {
                                    answer: Some(Answer::full(this.config, retry_after)),
                                },
                            }
                        }
                        Err(failure) => {
                            if let Some(admission) = admission
                                && failure.is_availability()
                            {
                                admission.failed();
                            }
                            fail(this.config, &failure, request, &mut service)
                        }
                    };
                    this.state.set(next);
                }
                StateProj::Calling { future, guard } => {
                    let response = ready!(future.poll(cx));
                    let guard = guard.take();
                    // On an error the guard drops here, and the permit is released.
                    let (parts, body) = response?.into_parts();
                    let body = GuardedBody::inner(body, guard);
                    return Poll::Ready(Ok(Response::from_parts(parts, body)));
                }
                StateProj::Answered { answer } => {
                    let answer = answer.take().unwrap_or_else(Answer::empty);
                    return Poll::Ready(Ok(answer.into_response()));
                }
            }
        }
    }
}

impl<S, ReqBody> fmt::Debug for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
