//! The response future of [`ConcurrencyLimit`](super::ConcurrencyLimit): acquire a permit,
//! then call the inner service or answer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::answer::Answer;
use super::body::GuardedBody;
use super::guard::StreamGuard;
use super::layer::Config;
use crate::coordination::semaphore::Attempt;
use crate::error::Error;
use crate::layer::circuit_breaker::Admission;
use crate::layer::failure::Verdict;
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
    /// Whether the backend looks unavailable, which is what may fail open. Refusals (a
    /// script error, a capacity mismatch, an authorization failure) are mistakes to surface,
    /// never reasons to lift the limit.
    fn is_availability(&self) -> bool {
        match self {
            Failure::Backend(err) => err.is_unavailable(),
            Failure::TimedOut | Failure::CircuitOpen => true,
        }
    }

    /// When the backend expects to succeed again, where it says.
    fn retry_hint(&self) -> Option<Duration> {
        match self {
            Failure::Backend(err) => err.retry_after(),
            Failure::TimedOut | Failure::CircuitOpen => None,
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
        let acquisition = Box::pin(async move {
            let mut attempt =
                Box::pin(async move { semaphore.try_acquire(&key, Some(lease)).await });
            let answered = tokio::select! {
                outcome = &mut attempt => Some(outcome),
                () = tokio::time::sleep(timeout) => None,
            };
            if let Some(outcome) = answered {
                settle(admission, &outcome);
                return outcome.map_err(Failure::Backend);
            }
            // The layer's own timeout (a busy runtime can cause it while the backend is
            // healthy) is no verdict on the backend: the attempt goes on in the background,
            // and the breaker hears what the backend then says; silence past a further grace
            // is the backend's failure. A permit it gets is released at once, in the
            // background, by the permit's drop.
            let grace = timeout.max(LATE_VERDICT_GRACE);
            tokio::spawn(async move {
                match tokio::time::timeout(grace, attempt).await {
                    Ok(outcome) => settle(admission, &outcome),
                    Err(_) => {
                        if let Some(admission) = admission {
                            admission.failed();
                        }
                    }
                }
            });
            Err(Failure::TimedOut)
        });
        ResponseFuture {
            config,
            state: State::Acquiring {
                acquisition,
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

/// How long an acquisition that outlived the layer's timeout may still take before its
/// silence counts as the backend's failure (at least the layer's timeout).
const LATE_VERDICT_GRACE: Duration = Duration::from_secs(1);

/// Tells the circuit breaker what the backend said: an answer, or unavailability. A refusal
/// says nothing about availability and gives no verdict.
fn settle(admission: Option<Admission>, outcome: &crate::Result<Attempt>) {
    let Some(admission) = admission else { return };
    match outcome {
        Ok(_) => admission.succeeded(),
        Err(err) if err.is_unavailable() => admission.failed(),
        Err(_) => drop(admission),
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
    match config
        .failure
        .verdict(failure.is_availability(), failure.retry_hint())
    {
        Verdict::Pass => match config.local.clone().try_acquire_owned() {
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
        },
        Verdict::Unavailable(retry_after) => {
            if failure.is_availability() {
                tracing::warn!(reason = %failure, "concurrency limit backend unavailable; failing closed");
            } else {
                tracing::error!(reason = %failure, "the concurrency limit backend refused the permit; answering 503");
            }
            State::Answered {
                answer: Some(Answer::unavailable(retry_after)),
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
                    request,
                    service,
                } => {
                    let outcome = ready!(acquisition.as_mut().poll(cx));
                    let (Some(request), Some(mut service)) = (request.take(), service.take())
                    else {
                        unreachable!("an acquiring future holds its request and service")
                    };
                    let next = match outcome {
                        Ok(Attempt::Acquired(permit)) => State::Calling {
                            future: service.call(request),
                            guard: Some(StreamGuard::keep(permit, this.config.lease)),
                        },
                        Ok(Attempt::Full { retry_after }) => State::Answered {
                            answer: Some(Answer::full(this.config, retry_after)),
                        },
                        Err(failure) => fail(this.config, &failure, request, &mut service),
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
