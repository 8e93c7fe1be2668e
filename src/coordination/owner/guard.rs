//! A guard for a request whose future may be dropped after it was sent.

use std::sync::Arc;

use super::{HoldingKeys, ReleaseStage, release_in_background_after};
use crate::backend::Backend;
use crate::backend::delivery::Deadline;
use crate::backend::delivery::Delivery;

/// Releases what a token holds in the background if dropped while armed: for a request whose
/// future may be dropped after it was sent, leaving the holding's fate unknown.
pub(crate) struct ReleaseOnDrop<T: HoldingKeys> {
    keys: Arc<T>,
    token: String,
    why: ReleaseStage,
    armed: bool,
    /// The release waits until the request's deadline has passed on this backend's clock.
    not_before: Option<(Backend, Deadline)>,
}

impl<T: HoldingKeys> ReleaseOnDrop<T> {
    pub(crate) fn arm(keys: &Arc<T>, token: &str, why: ReleaseStage) -> Self {
        ReleaseOnDrop {
            keys: Arc::clone(keys),
            token: token.to_owned(),
            why,
            armed: true,
            not_before: None,
        }
    }

    /// Releases no sooner than `deadline` has passed on `backend`'s clock (see
    /// [`Backend::until_passed`]): from then on the request can no longer take effect.
    pub(crate) fn not_before(mut self, backend: &Backend, deadline: Option<Deadline>) -> Self {
        self.not_before = deadline.map(|deadline| (backend.clone(), deadline));
        self
    }

    /// Waits until the request can no longer take effect (its deadline has passed), then
    /// disarms: what it would release is to stay. Dropped while it waits, it releases as
    /// when dropped armed.
    pub(crate) async fn wait_out(mut self) {
        if let Some((backend, deadline)) = self.not_before.take() {
            let passed = backend.until_passed(deadline);
            // Dropped during the wait: released once the deadline has passed, as armed.
            self.not_before = Some((backend, deadline));
            passed.await;
        }
        self.disarm();
    }

    /// The outcome is settled: nothing to release.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl<T: HoldingKeys> Drop for ReleaseOnDrop<T> {
    fn drop(&mut self) {
        if self.armed {
            release_in_background_after(
                Arc::clone(&self.keys),
                std::mem::take(&mut self.token),
                self.why,
                self.not_before
                    .take()
                    .map(|(backend, deadline)| backend.until_passed(deadline)),
            );
        }
    }
}
