//! The response future of [`RateLimit`](super::RateLimit): decide, then call or answer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::answer::Answer;
use super::body::ResponseBody;
use super::info::RateLimitInfo;
use super::layer::Config;
use crate::coordination::rate_limit::RateLimitDecision;
use crate::error::Result;
use crate::layer::failure::Verdict;
use crate::layer::key::KeyError;

type Decision = Pin<Box<dyn Future<Output = Result<RateLimitDecision, DecisionFailure>> + Send>>;

/// Why no decision came.
enum DecisionFailure {
    Backend(crate::Error),
    TimedOut,
}

pin_project! {
    /// Response future for [`RateLimit`](super::RateLimit).
    pub struct ResponseFuture<S, ReqBody>
    where
        S: Service<Request<ReqBody>>,
    {
        config: Option<Arc<Config>>,
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
        Deciding {
            decision: Decision,
            request: Option<Request<ReqBody>>,
            service: Option<S>,
        },
        Calling {
            #[pin]
            future: S::Future,
            info: Option<RateLimitInfo>,
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
    pub(crate) fn decide(
        config: Arc<Config>,
        key: Vec<u8>,
        cost: u64,
        request: Request<ReqBody>,
        service: S,
    ) -> Self {
        let limiter = config.limiter.clone();
        let max_wait = config.max_wait;
        let timeout = config.timeout + max_wait.unwrap_or_default();
        let decision = Box::pin(async move {
            let decide = async {
                match max_wait {
                    Some(max_wait) => limiter.acquire_wait(&key, cost, max_wait).await,
                    None => limiter.acquire(&key, cost).await,
                }
            };
            match tokio::time::timeout(timeout, decide).await {
                Ok(Ok(decision)) => Ok(decision),
                Ok(Err(err)) => Err(DecisionFailure::Backend(err)),
                Err(_) => Err(DecisionFailure::TimedOut),
            }
        });
        ResponseFuture {
            config: Some(config),
            state: State::Deciding {
                decision,
                request: Some(request),
                service: Some(service),
            },
        }
    }

    /// A rejection known before anything is sent (the deny cache's).
    pub(crate) fn rejected(config: &Config, decision: &RateLimitDecision) -> Self {
        ResponseFuture {
            config: None,
            state: State::Answered {
                answer: Some(Answer::rejected(config, decision)),
            },
        }
    }

    pub(crate) fn key_error(config: &Config, err: &KeyError) -> Self {
        ResponseFuture {
            config: None,
            state: State::Answered {
                answer: Some(Answer::key_error(config, err)),
            },
        }
    }
}

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
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
                    let outcome = ready!(decision.as_mut().poll(cx));
                    let (Some(config), Some(mut request), Some(mut service)) =
                        (this.config.as_ref(), request.take(), service.take())
                    else {
                        unreachable!("a deciding future holds its request and service")
                    };
                    let next = match outcome {
                        Ok(decision) if decision.is_granted() => {
                            let info =
                                RateLimitInfo::new(config.limiter.shared_policies(), decision);
                            request.extensions_mut().insert(info.clone());
                            State::Calling {
                                future: service.call(request),
                                info: Some(info),
                            }
                        }
                        Ok(decision) => State::Answered {
                            answer: Some(Answer::rejected(config, &decision)),
                        },
                        Err(failure) => {
                            let (unavailable, hint) = match &failure {
                                DecisionFailure::Backend(err) => {
                                    (err.is_unavailable(), err.retry_after())
                                }
                                DecisionFailure::TimedOut => (true, None),
                            };
                            let reason = match &failure {
                                DecisionFailure::Backend(err) => err.to_string(),
                                DecisionFailure::TimedOut => {
                                    format!("no decision within {:?}", config.timeout)
                                }
                            };
                            match config.failure.verdict(unavailable, hint) {
                                Verdict::Pass => {
                                    tracing::warn!(%reason, "rate limit backend unavailable; failing open");
                                    State::Calling {
                                        future: service.call(request),
                                        info: None,
                                    }
                                }
                                Verdict::Unavailable(retry_after) => {
                                    if unavailable {
                                        tracing::warn!(%reason, "rate limit backend unavailable; failing closed");
                                    } else {
                                        tracing::error!(%reason, "the rate limit backend refused the decision; answering 503");
                                    }
                                    State::Answered {
                                        answer: Some(Answer::unavailable(config, retry_after)),
                                    }
                                }
                            }
                        }
                    };
                    this.state.set(next);
                }
                StateProj::Calling { future, info } => {
                    let response = ready!(future.poll(cx))?;
                    let (mut parts, body) = response.into_parts();
                    if let (Some(config), Some(info)) = (this.config.as_ref(), info.take()) {
                        Answer::decorate(config, &info, &mut parts.headers);
                    }
                    return Poll::Ready(Ok(Response::from_parts(parts, ResponseBody::inner(body))));
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
