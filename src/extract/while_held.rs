//! A handler's work run only while what its extractor holds is held, the same way for every
//! extractor.

use std::fmt;
use std::future::Future;

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use crate::coordination::ownership::{LossReason, OwnershipLost};

/// The lease or permit a handler's work needed was lost while the work ran, so the work was
/// stopped (see [`Lease::while_held`](super::Lease::while_held)).
///
/// Answers `503 Service Unavailable` with `Retry-After: 1` and a generic body: the request
/// may be tried again, and the reason goes to the log (the loss at `WARN` when the keeper
/// finds it, the stopped work at `DEBUG`), not to the client.
///
/// # Example
///
/// ```
/// use leasehold::coordination::ownership::LossReason;
/// use leasehold::extract::HoldingLost;
///
/// fn alert(lost: &HoldingLost) -> bool {
///     // Anything but a release means another holder may have run meanwhile.
///     lost.reason() != LossReason::Released
/// }
/// # let _ = alert;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldingLost {
    reason: LossReason,
}

impl HoldingLost {
    /// Why the lease or permit was lost.
    pub fn reason(&self) -> LossReason {
        self.reason
    }
}

impl fmt::Display for HoldingLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the lease or permit was lost while the work ran ({}); the work was stopped",
            self.reason
        )
    }
}

impl std::error::Error for HoldingLost {}

impl IntoResponse for HoldingLost {
    fn into_response(self) -> Response {
        // The loss itself is logged where it is found, once per holding (the keeper's
        // warning); an outage that loses many would otherwise log twice per request.
        tracing::debug!(reason = %self.reason, "a handler's lease or permit was lost; its work was stopped");
        let mut response = (
            StatusCode::SERVICE_UNAVAILABLE,
            "The work was stopped: its lease was lost.",
        )
            .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        response
    }
}

/// Runs `work` until it completes, or until `ownership` fires: then `work` is dropped (not
/// polled again) and its loss is the answer. Fails at once, without polling `work`, when
/// ownership is lost already.
pub(super) async fn while_held<F: Future>(
    mut ownership: OwnershipLost,
    work: F,
) -> Result<F::Output, HoldingLost> {
    if let Some(reason) = ownership.reason() {
        return Err(HoldingLost { reason });
    }
    tokio::select! {
        // The loss first: work that would complete in the same poll does not outrun it.
        biased;
        reason = ownership.lost() => Err(HoldingLost { reason }),
        output = work => Ok(output),
    }
}
