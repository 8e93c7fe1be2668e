//! The concurrency-limited service.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use super::answer;
use super::config::Config;
use super::future::{self, ResponseFuture};
use crate::coordination::circuit_breaker;
use crate::layer::ResponseBody;
use crate::layer::admission;

/// A service that holds a permit of a shared semaphore for each request, from before `S`
/// is called to the end of the response body; built by
/// [`RedisConcurrencyLimitLayer`](super::RedisConcurrencyLimitLayer).
///
/// `S` must be `Clone`: the permit is awaited before the inner service is called, so the
/// instance that `poll_ready` prepared moves into the response future and a clone stays
/// here, as tower's asynchronous middleware do.
///
/// # Example
///
/// ```
/// use std::convert::Infallible;
/// use http::{Request, Response};
/// use tower::{Service, ServiceBuilder, ServiceExt, service_fn};
/// use leasehold::Coordination;
/// use leasehold::layer::concurrency_limit::{Capacity, RedisConcurrencyLimitLayer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let layer = RedisConcurrencyLimitLayer::new(&Coordination::memory(), "plain", Capacity::global(1))?;
/// let mut service = ServiceBuilder::new().layer(layer).service(service_fn(|_: Request<()>| async {
///     Ok::<_, Infallible>(Response::new(http_body_util::Full::new(bytes::Bytes::from("hi"))))
/// }));
/// let response = service.ready().await.unwrap().call(Request::new(())).await.unwrap();
/// assert_eq!(response.status(), 200);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ConcurrencyLimit<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> ConcurrencyLimit<S> {
    pub(crate) fn new(inner: S, config: Arc<Config>) -> Self {
        ConcurrencyLimit { inner, config }
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

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for ConcurrencyLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Only the inner service's readiness: the permit is taken per request in `call`.
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let key = match &self.config.key {
            None => Vec::new(),
            Some(extractor) => {
                let (parts, body) = request.into_parts();
                match extractor.extract(&parts) {
                    Ok(key) => {
                        let request = Request::from_parts(parts, body);
                        return self.acquire(key, request);
                    }
                    Err(err) => {
                        let answer = self.config.responses.key_error(
                            &err,
                            "concurrency limit key unavailable",
                            Some(&parts),
                        );
                        return ResponseFuture::new(admission::ResponseFuture::answer(answer));
                    }
                }
            }
        };
        self.acquire(key, request)
    }
}

impl<S> ConcurrencyLimit<S> {
    fn acquire<ReqBody, ResBody>(
        &mut self,
        key: Vec<u8>,
        request: Request<ReqBody>,
    ) -> ResponseFuture<S, ReqBody>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    {
        let config = &self.config;
        let admission = match circuit_breaker::admit(config.breaker.as_ref()) {
            Ok(admission) => admission,
            // The circuit is open: nothing is sent, the failure policy answers at once.
            Err(failure) => {
                let decision = answer::failed(
                    config.clone(),
                    &key,
                    failure,
                    crate::telemetry::Clock::start(),
                );
                return ResponseFuture::new(admission::ResponseFuture::decided(
                    decision,
                    request,
                    &mut self.inner,
                ));
            }
        };
        let acquisition = future::acquire(config.clone(), key, admission);
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::new(admission::ResponseFuture::deciding(
            acquisition,
            request,
            ready,
        ))
    }
}

impl<S: fmt::Debug> fmt::Debug for ConcurrencyLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimit")
            .field("inner", &self.inner)
            .field("name", &self.config.name)
            .finish_non_exhaustive()
    }
}
