//! What both layers share, in the shape of tower-http's asynchronous authorization: decide
//! whether a request is admitted, then call the inner service or answer.
//!
//! A layer's service turns a request into a [`Decision`] at once (a key error, a rejection
//! the deny cache knows, an open circuit) or into a boxed future that ends in one, built from
//! [`circuit_breaker::within`](crate::coordination::circuit_breaker::within) (the layer's
//! timeout, the circuit breaker) and
//! [`FailurePolicy::judge`](crate::layer::FailurePolicy::judge) (the failure policy). The shared
//! [`ResponseFuture`] awaits it, lets the [`Grant`] prepare the request, calls the inner
//! service, and hands its response to the grant. A refusal is data (the layer's
//! [`Refusal`]) until the future writes its [`Answer`] (the one builder of 429, 503 and
//! key-error responses) once, from the request's parts, so that the application's hook sees
//! it. Both layers answer with the one [`ResponseBody`].

mod body;
mod future;
#[cfg(test)]
mod tests;

pub(crate) use body::BodyGuard;
pub use body::ResponseBody;
pub(crate) use future::{Deciding, ResponseFuture};

use http::request::Parts;
use http::{Request, Response};

use crate::response::Answer;

/// What a layer decided for one request.
pub(crate) enum Decision<G: Grant> {
    /// Call the inner service; the grant goes with the request and its response.
    Admit(G),
    /// Answer without calling it: the refusal, written once the request is at hand (for
    /// the application's hook, which sees it).
    Refuse(G::Refusal),
}

/// What an admitted request carries: rate-limit fields to add, a permit to hold until the
/// body ends.
pub(crate) trait Grant: Send + 'static {
    /// What a refused request is answered from.
    type Refusal: Refusal;

    /// Before the inner service is called (for extensions a handler reads).
    fn prepare<B>(&self, request: &mut Request<B>);

    /// The inner service's response, as the layer sends it.
    fn finish<B>(self, response: Response<B>) -> Response<ResponseBody<B>>;
}

/// Why a layer refused a request, kept as data until the [`ResponseFuture`] writes the
/// answer, once, from the request's parts.
pub(crate) trait Refusal: Send + 'static {
    /// The answer, written with the request at hand (the application's hook sees it).
    fn answer(self, request: &Parts) -> Answer;
}
