//! A backend step's trace and, when it fails, its error count.

use super::throttle::Throttle;
use crate::error::{Error, Result};

/// Refusals told at `ERROR`: a misconfiguration (an ACL, a rotated password) refuses every
/// step, and one line every ten seconds says it.
static REFUSALS: Throttle = Throttle::every_secs(10);

/// A failed step's class, as its label and the span's `outcome` say it.
fn class(err: &Error) -> &'static str {
    if err.is_outcome_uncertain() {
        "uncertain"
    } else if err.is_unavailable() {
        "unavailable"
    } else {
        "refused"
    }
}

/// Records what the step `primitive`/`step` answered in `span` (the step's span) and, when
/// it failed, counts its error and tells it.
#[inline]
pub(crate) fn observe_step<T>(
    span: &tracing::Span,
    primitive: &'static str,
    step: &'static str,
    outcome: &Result<T>,
) {
    match outcome {
        Ok(_) => {
            if !span.is_disabled() {
                span.record("outcome", "ok");
            }
        }
        Err(err) => failed(span, primitive, step, err),
    }
}

#[cold]
fn failed(span: &tracing::Span, primitive: &'static str, step: &'static str, err: &Error) {
    let class = class(err);
    span.record("outcome", class);
    #[cfg(feature = "metrics")]
    metrics::counter!(
        super::BACKEND_ERRORS,
        "primitive" => primitive,
        "step" => step,
        "class" => class
    )
    .increment(1);
    let _entered = span.enter();
    if class == "refused" && REFUSALS.due() {
        tracing::error!(primitive, step, error = %err, "the backend refused a step (told at most every 10 s; each one at DEBUG)");
    } else {
        tracing::debug!(primitive, step, class, error = %err, "step failed");
    }
}
