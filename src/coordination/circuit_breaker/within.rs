//! Asking the backend for a decision within a timeout, past the circuit breaker: the same
//! rules for every layer and extractor. What a failure then means for a request (the failure
//! policy) is the layer's.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use pin_project_lite::pin_project;

use super::{Admission, Breaker};
use crate::backend::caller_bound;
use crate::error::{Error, Result};

/// Why the backend gave no decision.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The backend failed, or refused.
    Backend(Error),
    /// No answer within the layer's timeout.
    TimedOut(Duration),
    /// The circuit breaker is open: nothing was sent.
    CircuitOpen,
}

impl Failure {
    /// Whether the backend looks unavailable, which is what may fail open. Refusals (a
    /// script error, a capacity mismatch, an authorization failure) are mistakes to surface,
    /// never reasons to lift the limit.
    pub(crate) fn is_unavailable(&self) -> bool {
        match self {
            Failure::Backend(err) => err.is_unavailable(),
            Failure::TimedOut(_) | Failure::CircuitOpen => true,
        }
    }

    /// The backend's error, when it answered.
    pub(crate) fn into_error(self) -> Option<Error> {
        match self {
            Failure::Backend(err) => Some(err),
            Failure::TimedOut(_) | Failure::CircuitOpen => None,
        }
    }

    /// When the backend expects to succeed again, where it says.
    pub(crate) fn retry_hint(&self) -> Option<Duration> {
        match self {
            Failure::Backend(err) => err.retry_after(),
            Failure::TimedOut(_) | Failure::CircuitOpen => None,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Backend(err) => err.fmt(f),
            Failure::TimedOut(timeout) => write!(f, "no decision within {timeout:?}"),
            Failure::CircuitOpen => f.write_str("the circuit breaker is open"),
        }
    }
}

/// Permission from the breaker (if the caller has one) to send an attempt: `Ok(None)` without
/// a breaker, [`Failure::CircuitOpen`] while it is open.
pub(crate) fn admit(breaker: Option<&Arc<Breaker>>) -> Result<Option<Admission>, Failure> {
    match breaker {
        None => Ok(None),
        Some(breaker) => breaker.admit().map(Some).ok_or(Failure::CircuitOpen),
    }
}

pin_project! {
    /// An attempt bounded by its caller's timeout (see [`within`]).
    pub(crate) struct Within<F> {
        #[pin]
        attempt: tokio::time::Timeout<F>,
        timeout: Duration,
        admission: Option<Admission>,
    }
}

/// Runs `attempt` within `timeout`, and tells the breaker (when it admitted the attempt)
/// what the backend said.
///
/// At the timeout the attempt is dropped (which every step allows: see their cancel safety;
/// a permit it may have been granted is released in the background). The timeout is a
/// verdict on the backend only when the server answered nothing on the handle meanwhile
/// (see [`Admission::timed_out`]): the caller's own timeout can also come from a busy
/// runtime or one slow step while the backend is healthy.
///
/// The attempt is polled within a [`caller_bound`] of `timeout`: the backend arms no
/// response timer of its own that could only fire after this one.
///
/// A hand-written future rather than an `async fn`: the attempt is moved once, into the
/// timeout, with no box and no second copy.
#[inline]
pub(crate) fn within<F, T>(attempt: F, timeout: Duration, admission: Option<Admission>) -> Within<F>
where
    F: Future<Output = Result<T>>,
{
    Within {
        attempt: tokio::time::timeout(timeout, attempt),
        timeout,
        admission,
    }
}

impl<F, T> Future for Within<F>
where
    F: Future<Output = Result<T>>,
{
    type Output = Result<T, Failure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let outcome = {
            let _bound = caller_bound::polling(*this.timeout);
            ready!(this.attempt.poll(cx))
        };
        let admission = this.admission.take();
        Poll::Ready(match outcome {
            Ok(outcome) => {
                if let Some(admission) = admission {
                    settle(admission, &outcome);
                }
                outcome.map_err(Failure::Backend)
            }
            Err(_) => {
                if let Some(admission) = admission {
                    admission.timed_out();
                }
                Err(Failure::TimedOut(*this.timeout))
            }
        })
    }
}

/// Tells the circuit breaker what the backend said: an answer, or unavailability. A refusal
/// says nothing about availability and gives no verdict.
fn settle<T>(admission: Admission, outcome: &Result<T>) {
    match outcome {
        Ok(_) => admission.succeeded(),
        Err(err) if err.is_unavailable() => admission.failed(),
        Err(_) => drop(admission),
    }
}
