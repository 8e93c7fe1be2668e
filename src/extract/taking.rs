//! Taking what a request needs, the same way for every extractor: at once or waiting up to
//! the request's bound, each attempt bounded by its timeout.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::rejection::Reason;
use super::spec::Taking;
use crate::Coordination;
use crate::coordination::Attempt;
use crate::coordination::circuit_breaker::{self, Failure};
use crate::coordination::circuit_breaker::{Admission, Breaker};
use crate::error::{Error, ErrorKind, Result};
use crate::outage_log::Outcome;

/// What the extractors' events call their backend.
const WHAT: &str = "lease";

/// Takes what `attempt` (at once) or `wait` (waiting) take, as `taking` says: `busy` makes
/// the refusal from the time left, capped by the request. Each attempt passes `breaker` (the
/// [`Coordination`]'s, for what lives on its backend), which hears how it went; the
/// handle's outage log hears whether the backend decided, so that an outage is logged once,
/// not once per request.
///
/// Cancel safe as the primitives' own steps are: a dropped acquisition releases what it may
/// have been granted in the background.
pub(super) async fn take<T, A, W>(
    taking: &Taking,
    coordination: &Coordination,
    breaker: Option<&Arc<Breaker>>,
    busy: fn(Duration) -> Reason,
    attempt: impl FnOnce() -> A,
    wait: impl FnOnce() -> W,
) -> std::result::Result<T, Reason>
where
    A: Future<Output = Result<Attempt<T>>>,
    W: Future<Output = Result<T>>,
{
    let taken = take_as_asked(taking, breaker, busy, attempt, wait).await;
    let outages = coordination.outages();
    match &taken {
        Ok(_) | Err(Reason::Held { .. } | Reason::Full { .. }) => outages.decided(WHAT),
        Err(Reason::Unavailable(err)) => {
            outages.failed(WHAT, err, Outcome::answered_503(err.is_unavailable()));
        }
        Err(Reason::InvalidName(_) | Reason::Misconfigured(_)) => {}
    }
    taken
}

async fn take_as_asked<T, A, W>(
    taking: &Taking,
    breaker: Option<&Arc<Breaker>>,
    busy: fn(Duration) -> Reason,
    attempt: impl FnOnce() -> A,
    wait: impl FnOnce() -> W,
) -> std::result::Result<T, Reason>
where
    A: Future<Output = Result<Attempt<T>>>,
    W: Future<Output = Result<T>>,
{
    // Settings that cannot be kept are refused before anything is sent: nothing taken and
    // released (no fencing token spent) on every request.
    taking.options.validate().map_err(Reason::Misconfigured)?;
    if taking.timeout.is_zero() {
        return Err(Reason::Misconfigured(Error::invalid_argument(
            "a lease or permit request's timeout must be longer than zero",
        )));
    }
    if taking.options.renews_forever_once_dropped() {
        return Err(Reason::Misconfigured(Error::invalid_argument(
            "a lease or permit taken for a request must be released with it: with \
             release_on_drop(false) and no max_lifetime, every request would leave one renewed \
             forever; set release_on_drop(true), or a max_lifetime",
        )));
    }
    // While the circuit is open, nothing is sent: not the wait, nor the last try.
    let admission =
        circuit_breaker::admit(breaker).map_err(|_| Reason::Unavailable(circuit_open()))?;
    if taking.max_wait.is_zero() {
        return once(taking, admission, busy, attempt()).await;
    }
    // The wait is many steps over a long time: no verdict on the backend (a probe's slot is
    // given back when the admission drops). Its last try asks the breaker again.
    drop(admission);
    match tokio::time::timeout(taking.max_wait, wait()).await {
        Ok(held) => held.map_err(Reason::failed),
        // Gave up waiting: one last try, which also says how long the holders have left.
        Err(_) => {
            let admission =
                circuit_breaker::admit(breaker).map_err(|_| Reason::Unavailable(circuit_open()))?;
            once(taking, admission, busy, attempt()).await
        }
    }
}

/// The error of an acquisition the circuit breaker stopped: unavailable, nothing sent.
fn circuit_open() -> Error {
    Error::new(
        ErrorKind::Io,
        "the lease backend keeps failing: the circuit breaker is open, nothing was sent",
    )
}

/// What `attempt` takes now, or the refusal with the holders' time left, within the
/// request's timeout, told to the circuit breaker that admitted it.
async fn once<T>(
    taking: &Taking,
    admission: Option<Admission>,
    busy: fn(Duration) -> Reason,
    attempt: impl Future<Output = Result<Attempt<T>>>,
) -> std::result::Result<T, Reason> {
    let timeout = taking.timeout;
    let attempt = circuit_breaker::within(attempt, timeout, admission)
        .await
        .map_err(|failure| match failure {
            Failure::Backend(err) => Reason::failed(err),
            Failure::TimedOut(_) | Failure::CircuitOpen => Reason::Unavailable(
                Error::new(
                    ErrorKind::Timeout,
                    format!("no answer from the lease backend within {timeout:?}"),
                )
                .uncertain(true),
            ),
        })?;
    match attempt {
        Attempt::Acquired(held) => Ok(held),
        Attempt::Busy { retry_after } => Err(busy(retry_after_of(
            retry_after,
            taking.retry_after_at_most,
        ))),
    }
}

/// A refusal's `Retry-After`, before rounding up to whole seconds: the holders' time left
/// (a second when unknown), at most `longest`, and at least a second (`Retry-After: 0`
/// invites an immediate retry).
fn retry_after_of(left: Option<Duration>, longest: Option<Duration>) -> Duration {
    let left = left.unwrap_or(crate::retry_after::SHORTEST);
    crate::retry_after::at_least_a_second(Some(longest.map_or(left, |longest| left.min(longest))))
}

/// The name a request gave, as it is stored: refused when empty, and with its braces
/// escaped as a client key's are (see [`crate::layer::key`]), so that no client picks the
/// cluster slot of what it names.
pub(super) fn request_name(name: Vec<u8>, what: &str) -> std::result::Result<Vec<u8>, Reason> {
    if name.is_empty() {
        return Err(Reason::InvalidName(crate::layer::key::KeyError::new(
            format!("the {what} name is empty"),
        )));
    }
    Ok(crate::layer::key::neutralised(&name).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_left_is_capped_and_never_under_a_second() {
        let s = Duration::from_secs;
        assert_eq!(retry_after_of(Some(s(30)), None), s(30));
        assert_eq!(retry_after_of(Some(s(30)), Some(s(2))), s(2));
        assert_eq!(retry_after_of(Some(s(1)), Some(s(2))), s(1));
        assert_eq!(retry_after_of(None, None), s(1));
        assert_eq!(retry_after_of(Some(Duration::ZERO), None), s(1));
        assert_eq!(retry_after_of(Some(s(30)), Some(Duration::ZERO)), s(1));
    }
}
