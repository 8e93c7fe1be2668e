//! The held primitives' metrics: what is held, renewed, lost and abandoned. Labelled by the
//! names the ownership types give themselves (`Primitive::label` and the like), so that
//! this module knows none of them.

#[cfg(feature = "metrics")]
use super::{ABANDONED_RELEASES, LEASES_HELD, LEASES_LOST, RENEWALS};

/// A holding of `primitive` began (`+1`) or ended here (`-1`).
#[inline]
pub(crate) fn held(primitive: &'static str, change: i8) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(LEASES_HELD, "primitive" => primitive).increment(f64::from(change));
    #[cfg(not(feature = "metrics"))]
    let _ = (primitive, change);
}

/// How a renewal of a held lease or permit went.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Renewal {
    Renewed,
    Lost,
    Failed,
    Uncertain,
}

/// One renewal of `primitive`.
#[inline]
pub(crate) fn renewed(primitive: &'static str, outcome: Renewal) {
    #[cfg(feature = "metrics")]
    {
        let outcome = match outcome {
            Renewal::Renewed => "renewed",
            Renewal::Lost => "lost",
            Renewal::Failed => "failed",
            Renewal::Uncertain => "uncertain",
        };
        metrics::counter!(RENEWALS, "primitive" => primitive, "outcome" => outcome).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (primitive, outcome);
}

/// A managed holding of `primitive` lost for `reason`.
pub(crate) fn lost(primitive: &'static str, reason: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(LEASES_LOST, "primitive" => primitive, "reason" => reason).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (primitive, reason);
}

/// A background release of `primitive` given up at `stage` for `cause`.
pub(crate) fn abandoned(primitive: &'static str, stage: &'static str, cause: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        ABANDONED_RELEASES,
        "primitive" => primitive,
        "stage" => stage,
        "cause" => cause
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (primitive, stage, cause);
}
