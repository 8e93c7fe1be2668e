//! The held primitives' metrics: what is held, renewed, lost and abandoned.

#[cfg(feature = "metrics")]
use super::{ABANDONED_RELEASES, LEASES_HELD, LEASES_LOST, RENEWALS};
use crate::coordination::ownership::{AbandonCause, LossReason, Primitive, ReleaseStage};

/// A held primitive's label.
#[cfg(feature = "metrics")]
fn primitive_label(primitive: Primitive) -> &'static str {
    match primitive {
        Primitive::FencedLease => "fenced_lease",
        Primitive::SemaphorePermit => "semaphore_permit",
        Primitive::ReadWriteLease => "read_write_lease",
        Primitive::FieldLease => "hash_field_lease",
        Primitive::RedlockLease => "redlock_lease",
        Primitive::Session => "session",
    }
}

/// A holding of `primitive` began (`+1`) or ended here (`-1`).
#[inline]
pub(crate) fn held(primitive: Primitive, change: i8) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(LEASES_HELD, "primitive" => primitive_label(primitive))
        .increment(f64::from(change));
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
pub(crate) fn renewed(primitive: Primitive, outcome: Renewal) {
    #[cfg(feature = "metrics")]
    {
        let outcome = match outcome {
            Renewal::Renewed => "renewed",
            Renewal::Lost => "lost",
            Renewal::Failed => "failed",
            Renewal::Uncertain => "uncertain",
        };
        metrics::counter!(RENEWALS, "primitive" => primitive_label(primitive), "outcome" => outcome)
            .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (primitive, outcome);
}

/// A managed holding of `primitive` told its holder `reason`: counted when it is a loss.
pub(crate) fn told(primitive: Primitive, reason: LossReason) {
    let reason = match reason {
        LossReason::NotRenewed => "not_renewed",
        LossReason::Uncertain => "uncertain",
        LossReason::LifetimeLimit => "lifetime_limit",
        LossReason::Released | LossReason::Detached => return,
    };
    #[cfg(feature = "metrics")]
    metrics::counter!(LEASES_LOST, "primitive" => primitive_label(primitive), "reason" => reason)
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (primitive, reason);
}

/// A background release of `primitive` given up.
pub(crate) fn abandoned(primitive: Primitive, stage: ReleaseStage, cause: AbandonCause) {
    #[cfg(feature = "metrics")]
    {
        let stage = match stage {
            ReleaseStage::Dropped => "dropped",
            ReleaseStage::CancelledRelease => "cancelled_release",
            ReleaseStage::UncertainAcquire => "uncertain_acquire",
            ReleaseStage::LateGrant => "late_grant",
        };
        let cause = match cause {
            AbandonCause::NoRuntime => "no_runtime",
            AbandonCause::Unavailable => "unavailable",
            AbandonCause::Refused => "refused",
        };
        metrics::counter!(
            ABANDONED_RELEASES,
            "primitive" => primitive_label(primitive),
            "stage" => stage,
            "cause" => cause
        )
        .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (primitive, stage, cause);
}
