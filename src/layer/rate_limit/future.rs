//! The response future of [`RateLimit`](super::RateLimit): decide, then call or answer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use pin_project_lite::pin_project;
use tokio::time::Instant;
use tower_service::Service;

use super::answer::{self, Admitted, Granted};
use super::check::Check;
use super::config::Config;
use crate::coordination::circuit_breaker::Admission;
use crate::coordination::circuit_breaker::{self, Failure};
use crate::coordination::rate_limit::RateLimitDecision;
use crate::layer::admission::{self, Deciding, Decision, ResponseBody};
use crate::outage_log::OutageLog;
use crate::telemetry::Decided;

pin_project! {
    /// Response future for [`RateLimit`](super::RateLimit).
    pub struct ResponseFuture<S, ReqBody>
    where
        S: Service<Request<ReqBody>>,
    {
        #[pin]
        inner: admission::ResponseFuture<S, ReqBody, Admitted>,
    }
}

impl<S, ReqBody> ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    pub(crate) fn new(inner: admission::ResponseFuture<S, ReqBody, Admitted>) -> Self {
        ResponseFuture { inner }
    }
}

/// The decision for `key`, asked of the backend within the layer's timeout (plus the
/// longest wait in the queue, when the layer waits).
pub(crate) fn decide(
    config: Arc<Config>,
    key: Vec<u8>,
    cost: u64,
    admission: Option<Admission>,
    check: Check,
) -> Deciding<Admitted> {
    Box::pin(decision(config, key, cost, admission, check))
}

/// A customer of stored plans to look up before its request is decided.
pub(crate) struct LookUp {
    pub(crate) plans: Arc<super::plan::Plans>,
    pub(crate) customer: Vec<u8>,
    pub(crate) plan: Option<String>,
}

/// The decision for `key`, once `lookup` found the customer's plan: the lookup within the
/// layer's timeout, judged by the circuit breaker's `admission` (it is the request's first
/// step on the backend), then the decision within its own. A lookup that fails is the
/// request's failure, which the failure policy answers under the plan the request names (or
/// the override this process was configured with).
pub(crate) fn decide_after_lookup(
    layer: Arc<Config>,
    lookup: LookUp,
    key: Vec<u8>,
    cost: u64,
    admission: Option<Admission>,
    check: Check,
) -> Deciding<Admitted> {
    Box::pin(async move {
        let LookUp {
            plans,
            customer,
            plan,
        } = lookup;
        let looked_up =
            circuit_breaker::within(plans.look_up(&customer), layer.timeout, admission).await;
        match looked_up {
            Ok(found) => {
                let config = plans.config_known(&layer, &customer, plan.as_deref(), found);
                decision(config, key, cost, None, check).await
            }
            Err(failure) => {
                let config = plans.config_unknown(&layer, &customer, plan.as_deref());
                let kept = config.fallback.is_some().then_some(key);
                match answer::failed(config, failure, kept, cost, check) {
                    answer::Settled::Now(decision) => decision,
                    answer::Settled::Later(fallback) => fallback.await,
                }
            }
        }
    })
}

/// [`decide`]'s future, before it is boxed.
async fn decision(
    config: Arc<Config>,
    key: Vec<u8>,
    cost: u64,
    admission: Option<Admission>,
    check: Check,
) -> Decision<Admitted> {
    // Kept for the fail-open fallback only: a layer failing closed pays nothing for it.
    let kept = config.fallback.is_some().then(|| key.clone());
    let decided = match config.max_wait {
        // Boxed: a wait in the queue is long next to an allocation, and inline its future
        // would make every decision's as large, past the size that the allocator serves
        // from its fast per-thread cache.
        Some(max_wait) => Box::pin(waiting(&config, &key, cost, max_wait, admission)).await,
        None => {
            // Built here, in the boxed future, and moved once (into the timeout). Every
            // shortcut was asked in `call`, before this was boxed.
            let limiter = config.limiter.clone();
            let attempt = async move { limiter.decide_remotely(&key, cost).await };
            circuit_breaker::within(attempt, config.timeout, admission).await
        }
    };
    let decided = heard(&config.outages, decided);
    match settle(config, decided, kept, cost, check) {
        answer::Settled::Now(decision) => decision,
        answer::Settled::Later(fallback) => fallback.await,
    }
}

/// A decision that may wait in the queue (`.wait(max_wait, …)`): the first answer within the
/// layer's timeout, settling the circuit breaker's admission as any decision does; then, for
/// a rejection, the wait, outside it. A half-open breaker's one probe is so settled by the
/// backend's first answer, and never held for the wait while every other request on the
/// handle fails fast. The retries of the wait are bounded as the whole always was: the
/// timeout and `max_wait`.
async fn waiting(
    config: &Config,
    key: &[u8],
    cost: u64,
    max_wait: Duration,
    admission: Option<Admission>,
) -> Result<RateLimitDecision, Failure> {
    let limiter = &config.limiter;
    let deadline = crate::time::after(Instant::now(), max_wait);
    let bound = config.timeout.saturating_add(max_wait);
    let ends = crate::time::after(Instant::now(), bound);
    let first = match limiter.first_of_a_wait_locally(key, cost) {
        // A shortcut's answer (the deny cache, the hot-key tier) says nothing of the
        // backend: the admission goes unsettled, freeing a probe's slot.
        Some(decided) => {
            drop(admission);
            decided.map_err(Failure::Backend)?
        }
        None => {
            circuit_breaker::within(
                limiter.first_from_the_backend(key, cost),
                config.timeout,
                admission,
            )
            .await?
        }
    };
    match tokio::time::timeout_at(ends, limiter.wait_after(key, cost, first, deadline)).await {
        Ok(decided) => decided.map_err(Failure::Backend),
        Err(_) => Err(Failure::TimedOut(bound)),
    }
}

/// The backend's answer, told to the outage log: a decision ends an outage.
#[inline]
pub(crate) fn heard(
    outages: &OutageLog,
    decided: Result<RateLimitDecision, Failure>,
) -> Result<RateLimitDecision, Failure> {
    if decided.is_ok() {
        outages.decided("rate limit");
    }
    decided
}

/// What a decision (or the backend's failure to give one) means for the request: admitted,
/// refused, or what the failure policy makes of a failure; counted once, as begun at
/// `check`. `kept`: the key, for the fail-open fallback.
#[inline]
pub(crate) fn settle(
    config: Arc<Config>,
    decided: Result<RateLimitDecision, Failure>,
    kept: Option<Vec<u8>>,
    cost: u64,
    check: Check,
) -> answer::Settled {
    match decided {
        Ok(decision) if decision.is_granted() => {
            // A shadow policy's rejection, let through by the limiter itself.
            let decided = if decision.is_shadow_rejection() {
                Decided::ShadowLimited
            } else {
                Decided::Allowed
            };
            config.metrics.record(decided, check.clock);
            answer::Settled::Now(Decision::Admit(Admitted::Decided(Granted::new(
                config,
                decision,
                check.partition,
            ))))
        }
        Ok(decision) => answer::Settled::Now(answer::limited(config, decision, check)),
        Err(failure) => answer::failed(config, failure, kept, cost, check),
    }
}

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx)
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Coordination;
    use crate::backend::steps::FAST_ALLOCATION;
    use crate::layer::rate_limit::RedisRateLimitLayer;
    use crate::telemetry::Clock;

    /// The decision boxed for every request that goes to Redis fits the allocator's fast
    /// cache (see [`FAST_ALLOCATION`]), with or without a queue to wait in.
    #[tokio::test]
    async fn a_decisions_future_fits_the_allocators_fast_cache() {
        let redis = crate::backend::steps::tests::unreachable_redis().await;
        let coordination = Coordination::from(redis);
        let second = Duration::from_secs(1);
        let layers = [
            RedisRateLimitLayer::fixed_window(&coordination, "f", 10, second).expect("valid"),
            RedisRateLimitLayer::fixed_window(&coordination, "q", 10, second)
                .expect("valid")
                .wait(second, 10),
            RedisRateLimitLayer::gcra(&coordination, "g", 10, second, 10).expect("valid"),
        ];
        for layer in layers {
            let future = decision(
                layer.config.clone(),
                b"k".to_vec(),
                1,
                None,
                Check {
                    clock: Clock::start(),
                    partition: None,
                },
            );
            let size = std::mem::size_of_val(&future);
            assert!(
                size <= FAST_ALLOCATION,
                "a decision's future is {size} bytes"
            );
        }
    }
}
