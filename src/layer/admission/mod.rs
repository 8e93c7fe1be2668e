//! What both layers share, in the shape of tower-http's asynchronous authorization: decide
//! whether a request is admitted, then call the inner service or answer.
//!
//! A layer's service turns a request into a [`Decision`] at once (a key error, a rejection
//! the deny cache knows, an open circuit) or into a boxed future that ends in one, built from
//! [`decide::within`] (the layer's timeout, the circuit breaker) and
//! [`Failure::verdict`](decide::Failure::verdict) (the failure policy). The shared
//! [`ResponseFuture`] awaits it, lets the [`Grant`] prepare the request, calls the inner
//! service, and hands its response to the grant; an [`Answer`] (the one builder of 429, 503
//! and key-error responses) becomes the response instead. A refusal decided in a boxed future
//! of a layer with an application hook is a [`Decision::Refuse`] instead, written by
//! [`refuse_later`] once the request is back, so that the hook sees it. Both layers
//! answer with the one [`ResponseBody`].

mod body;
pub(crate) mod decide;
mod future;
#[cfg(test)]
mod tests;

pub(crate) use body::BodyGuard;
pub use body::ResponseBody;
pub(crate) use future::{Deciding, ResponseFuture};

use http::request::Parts;
use http::{Request, Response};

use crate::layer::responses::Answer;

/// What a layer decided for one request.
pub(crate) enum Decision<G> {
    /// Call the inner service; the grant goes with the request and its response.
    Admit(G),
    /// Answer without calling it.
    Answer(Answer),
    /// Answer without calling it, written once the request is at hand (for the
    /// application's hook, which sees it): see [`refuse_later`].
    Refuse(Refusal),
}

/// A refusal to write from the request's parts.
pub(crate) type Refusal = Box<dyn FnOnce(&http::request::Parts) -> Answer + Send>;

/// What an admitted request carries: rate-limit fields to add, a permit to hold until the
/// body ends.
pub(crate) trait Grant: Send + 'static {
    /// Before the inner service is called (for extensions a handler reads).
    fn prepare<B>(&self, request: &mut Request<B>);

    /// The inner service's response, as the layer sends it.
    fn finish<B>(self, response: Response<B>) -> Response<ResponseBody<B>>;
}

/// A refusal decided where the request is not at hand (in a boxed decision): `build`
/// writes it now when the layer has no hook (nothing would look at the request), and once
/// the request is back when it has one (`hooked`), so that the hook sees it. Only the
/// refusals of a layer with a hook pay for the box.
pub(crate) fn refuse_later<G>(
    hooked: bool,
    build: impl FnOnce(Option<&Parts>) -> Answer + Send + 'static,
) -> Decision<G> {
    if hooked {
        Decision::Refuse(Box::new(move |request| build(Some(request))))
    } else {
        Decision::Answer(build(None))
    }
}
