//! The rate-limited service.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::request::Parts;
use http::{Request, Response};
use tower_service::Service;

use super::answer;
use super::check::Check;
use super::config::Config;
use super::future::{self, ResponseFuture};
use super::plan::Chosen;
use crate::coordination::circuit_breaker::{self, Failure};
use crate::coordination::rate_limit::Now;
use crate::layer::admission::{self, ResponseBody};
use crate::telemetry::Clock;

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
        let clock = Clock::start();
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
        // With plans, the configuration of the request's plan (its limiter, fields, metrics
        // and fallback); the key extractor and the rest are the layer's under every plan.
        let chosen;
        let config = match &config.plans {
            None => config,
            Some(plans) => match plans.config_for(config, &parts) {
                Chosen::Ready(plan) => {
                    chosen = plan;
                    &chosen
                }
                // A customer of stored plans this process does not hold yet: looked up, then
                // decided, in the decision's future (no shortcut: its plan is not known).
                Chosen::LookUp { customer, plan } => {
                    let looked_up = future::LookUp {
                        plans: plans.clone(),
                        customer,
                        plan,
                    };
                    let settled = self.after_lookup(looked_up, key, &parts, clock);
                    return self.answer(settled, parts, body);
                }
            },
        };
        let cost = config.cost.as_ref().map_or(1, |cost| cost(&parts));
        let check = Check {
            clock,
            partition: config.partition.as_ref().map(|keys| keys.tag(&key)),
        };
        // The key is kept for the fail-open fallback only: a layer failing closed pays nothing
        // for it.
        let settled = match config.limiter.decide_now(&key, cost, config.shortcuts()) {
            // Decided without a round trip (see `Shortcuts`): no boxed decision, no timer.
            Now::Decided(decided) => {
                let kept = config.fallback.is_some().then_some(key);
                future::settle(
                    config.clone(),
                    decided.map_err(Failure::Backend),
                    kept,
                    cost,
                    check,
                )
            }
            Now::Stepped(decided) => {
                let decided = future::heard(&config.outages, decided.map_err(Failure::Backend));
                let kept = config.fallback.is_some().then_some(key);
                future::settle(config.clone(), decided, kept, cost, check)
            }
            Now::Backend => match circuit_breaker::admit(config.breaker.as_ref()) {
                Ok(admission) => answer::Settled::Later(future::decide(
                    config.clone(),
                    key,
                    cost,
                    admission,
                    check,
                )),
                // The circuit is open: nothing is sent, the failure policy answers (failing
                // open, from the fallback in this process).
                Err(failure) => {
                    let kept = config.fallback.is_some().then_some(key);
                    answer::failed(config.clone(), failure, kept, cost, check)
                }
            },
        };
        self.answer(settled, parts, body)
    }
}

impl<S> RateLimit<S> {
    /// The decision of a request whose customer must be looked up first: admitted by the
    /// breaker as any other (the layer's configuration is every plan's there), then looked
    /// up and decided in one future.
    fn after_lookup(
        &self,
        lookup: future::LookUp,
        key: Vec<u8>,
        parts: &Parts,
        clock: Clock,
    ) -> answer::Settled {
        let config = &self.config;
        let cost = config.cost.as_ref().map_or(1, |cost| cost(parts));
        let check = Check {
            clock,
            partition: config.partition.as_ref().map(|keys| keys.tag(&key)),
        };
        match circuit_breaker::admit(config.breaker.as_ref()) {
            Ok(admission) => answer::Settled::Later(future::decide_after_lookup(
                config.clone(),
                lookup,
                key,
                cost,
                admission,
                check,
            )),
            // The circuit is open: no lookup either; the failure policy answers under the
            // plan the request names (or the override this process was configured with).
            Err(failure) => {
                let config =
                    (lookup.plans).config_unknown(config, &lookup.customer, lookup.plan.as_deref());
                let kept = config.fallback.is_some().then_some(key);
                answer::failed(config, failure, kept, cost, check)
            }
        }
    }

    /// The response future of a request: the inner service called now, or answered, or a
    /// decision (the backend's, the fail-open fallback's) awaited first.
    // Inlined into `call`, so that the request's parts are not copied on the way to a refusal.
    #[inline(always)]
    fn answer<ReqBody, ResBody>(
        &mut self,
        settled: answer::Settled,
        parts: Parts,
        body: ReqBody,
    ) -> ResponseFuture<S, ReqBody>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    {
        ResponseFuture::new(match settled {
            answer::Settled::Now(decision) => {
                admission::ResponseFuture::decided_in_parts(decision, parts, body, &mut self.inner)
            }
            answer::Settled::Later(decision) => {
                let clone = self.inner.clone();
                let ready = std::mem::replace(&mut self.inner, clone);
                let request = Request::from_parts(parts, body);
                admission::ResponseFuture::deciding(decision, request, ready)
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
