//! The response future of [`RateLimit`](super::RateLimit): decide, then call or answer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::answer::{self, Admitted, Granted};
use super::check::Check;
use super::config::Config;
use crate::coordination::circuit_breaker::Admission;
use crate::coordination::rate_limit::RateLimitDecision;
use crate::layer::admission::decide::{self, Failure};
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

/// [`decide`]'s future, before it is boxed.
async fn decision(
    config: Arc<Config>,
    key: Vec<u8>,
    cost: u64,
    admission: Option<Admission>,
    check: Check,
) -> Decision<Admitted> {
    // Built here, in the boxed future, and moved once (into the timeout).
    let limiter = config.limiter.clone();
    let max_wait = config.max_wait;
    let timeout = config.timeout.saturating_add(max_wait.unwrap_or_default());
    // Kept for the fail-open fallback only: a layer failing closed pays nothing for it.
    let kept = config.fallback.is_some().then(|| key.clone());
    let attempt = async move {
        match max_wait {
            // Boxed: a wait in the queue is long next to an allocation, and inline its
            // future would make every decision's as large, past the size that the
            // allocator serves from its fast per-thread cache.
            Some(max_wait) => Box::pin(limiter.acquire(&key, cost, max_wait)).await,
            // Every shortcut was asked in `call`, before this was boxed.
            None => limiter.decide_remotely(&key, cost).await,
        }
    };
    let decided = heard(
        &config.outages,
        decide::within(attempt, timeout, admission).await,
    );
    match settle(config, decided, kept, cost, check) {
        answer::Settled::Now(decision) => decision,
        answer::Settled::Later(fallback) => fallback.await,
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
