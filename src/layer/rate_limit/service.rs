//! The rate-limited service.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use super::answer;
use super::config::Config;
use super::future::{self, ResponseFuture};
use crate::layer::CircuitState;
use crate::layer::admission::decide::{self, Failure};
use crate::layer::admission::{self, ResponseBody};

/// A service that applies a rate limit before calling `S`; built by
/// [`RedisRateLimitLayer`](super::RedisRateLimitLayer).
///
/// `S` must be `Clone`: the decision is awaited before the inner service is called, so the
/// instance that `poll_ready` prepared moves into the response future and a clone stays
/// here, as tower's asynchronous middleware do.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> RateLimit<S> {
    pub(crate) fn new(inner: S, config: Arc<Config>) -> Self {
        RateLimit { inner, config }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes `self`, returning the wrapped service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Only the inner service's readiness: the limit is decided per request in `call`.
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let config = &self.config;
        let (parts, body) = request.into_parts();
        let key = match config.key.extract(&parts) {
            Ok(key) => key,
            Err(err) => {
                let answer =
                    config
                        .responses
                        .key_error(&err, "rate limit key unavailable", Some(&parts));
                return ResponseFuture::new(admission::ResponseFuture::answer(answer));
            }
        };
        let cost = config.cost.as_ref().map_or(1, |cost| cost(&parts));
        // Granted from this instance's hot-key reservation: nothing is awaited, so neither the
        // breaker nor a timer has a say, and the deny cache is not asked: a window full for
        // everyone else still has what this instance holds. The next batch, reserved in the
        // background when this one runs low, waits while the breaker is open.
        let refill = config
            .breaker
            .as_ref()
            .is_none_or(|breaker| breaker.state() == CircuitState::Closed);
        if config.max_wait.is_none()
            && let Some(decision) = config.limiter.granted_locally(&key, cost, refill)
        {
            let request = Request::from_parts(parts, body);
            let kept = config.fallback.is_some().then_some(key);
            let settled = future::settle(config.clone(), Ok(decision), kept, cost);
            return self.answered(settled, request);
        }
        // A key the deny cache knows is answered here: no boxed decision, no timer, no clone
        // of the inner service. A layer that waits lets the limiter queue the request instead.
        if config.max_wait.is_none()
            && let Some(decision) = config.limiter.cached_rejection(&key, cost)
        {
            let answer = answer::rejected(config, &decision, Some(&parts));
            return ResponseFuture::new(admission::ResponseFuture::answer(answer));
        }
        // Decided in process (the memory backend): answered in this call, with no boxed
        // decision and no timer, since nothing can keep it waiting. A breaker or a queue
        // takes the usual way.
        if config.max_wait.is_none()
            && config.breaker.is_none()
            && let Some(decided) = config.limiter.try_acquire_now(&key, cost)
        {
            let request = Request::from_parts(parts, body);
            let kept = config.fallback.is_some().then_some(key);
            let decided = decided.map_err(Failure::Backend);
            let settled = future::settle(config.clone(), decided, kept, cost);
            return self.answered(settled, request);
        }
        let request = Request::from_parts(parts, body);
        let admission = match decide::admit(config.breaker.as_ref()) {
            Ok(admission) => admission,
            // The circuit is open: nothing is sent, the failure policy answers (failing open,
            // from the fallback in this process).
            Err(failure) => {
                let key = config.fallback.is_some().then_some(key);
                let settled = answer::failed(config.clone(), failure, key, cost);
                return self.answered(settled, request);
            }
        };
        let decision = future::decide(config.clone(), key, cost, admission);
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::new(admission::ResponseFuture::deciding(
            decision, request, ready,
        ))
    }
}

impl<S> RateLimit<S> {
    /// The response future of a request settled in `call`: the inner service called now,
    /// or answered; the fail-open fallback's decision awaited first.
    fn answered<ReqBody, ResBody>(
        &mut self,
        settled: answer::Settled,
        request: Request<ReqBody>,
    ) -> ResponseFuture<S, ReqBody>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    {
        ResponseFuture::new(match settled {
            answer::Settled::Now(decision) => {
                admission::ResponseFuture::decided(decision, request, &mut self.inner)
            }
            answer::Settled::Fallback(fallback) => {
                let clone = self.inner.clone();
                let ready = std::mem::replace(&mut self.inner, clone);
                admission::ResponseFuture::deciding(fallback, request, ready)
            }
        })
    }
}

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("limiter", &self.config.limiter)
            .finish_non_exhaustive()
    }
}
