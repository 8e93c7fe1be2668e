//! The response future of [`ConcurrencyLimit`](super::ConcurrencyLimit): acquire a permit,
//! then call the inner service or answer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::answer;
use super::config::Config;
use super::guard::StreamGuard;
use crate::coordination::Attempt;
use crate::coordination::circuit_breaker;
use crate::coordination::circuit_breaker::Admission;
use crate::layer::admission::{self, Deciding, Decision, ResponseBody};
use crate::telemetry::{Clock, Decided};

pin_project! {
    /// Response future for [`ConcurrencyLimit`](super::ConcurrencyLimit).
    pub struct ResponseFuture<S, ReqBody>
    where
        S: Service<Request<ReqBody>>,
    {
        #[pin]
        inner: admission::ResponseFuture<S, ReqBody, StreamGuard>,
    }
}

impl<S, ReqBody> ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    pub(crate) fn new(inner: admission::ResponseFuture<S, ReqBody, StreamGuard>) -> Self {
        ResponseFuture { inner }
    }
}

/// A permit for `key` (and the global set), asked of the backend within the layer's
/// timeout.
pub(crate) fn acquire(
    config: Arc<Config>,
    key: Vec<u8>,
    admission: Option<Admission>,
) -> Deciding<StreamGuard> {
    let clock = Clock::start();
    Box::pin(async move {
        // Built here, in the boxed future, and moved once (into the timeout).
        let semaphore = config.semaphore.clone();
        let attempt = semaphore.try_acquire(&key, config.lease);
        let decided = circuit_breaker::within(attempt, config.timeout, admission).await;
        if decided.is_ok() {
            config.outages.decided("concurrency limit");
        }
        match decided {
            Ok(Attempt::Acquired(permit)) => {
                config.metrics.record(Decided::Allowed, clock);
                Decision::Admit(StreamGuard::keep(permit, config.lease, config.max_hold))
            }
            Ok(Attempt::Busy { retry_after }) => {
                config.metrics.record(Decided::Limited, clock);
                answer::Refused::full(config, retry_after)
            }
            Err(failure) => answer::failed(config, &key, failure, clock),
        }
    })
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
