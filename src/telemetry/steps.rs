//! A backend step's trace and, when it fails, its error count.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};

/// The least time between two refusals told at `ERROR`: a misconfiguration (an ACL, a
/// rotated password) refuses every step, and one line every ten seconds says it.
const REFUSAL_TOLD_EVERY: Duration = Duration::from_secs(10);

/// When a refusal was last told at `ERROR`, in milliseconds since the epoch.
static REFUSAL_TOLD_AT: AtomicU64 = AtomicU64::new(0);

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
    if class == "refused" && refusal_due() {
        tracing::error!(primitive, step, error = %err, "the backend refused a step (told at most every 10 s; each one at DEBUG)");
    } else {
        tracing::debug!(primitive, step, class, error = %err, "step failed");
    }
}

/// Whether a refusal is to be told at `ERROR` now (none was within the interval), claiming
/// the turn if so.
fn refusal_due() -> bool {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        });
    let last = REFUSAL_TOLD_AT.load(Ordering::Relaxed);
    let every = u64::try_from(REFUSAL_TOLD_EVERY.as_millis()).unwrap_or(u64::MAX);
    now.saturating_sub(last) >= every
        && REFUSAL_TOLD_AT
            .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
}
