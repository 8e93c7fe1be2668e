//! A guard for a request whose future may be dropped after it was sent.

use std::sync::Arc;

use super::{OwnerRelease, Why, release_in_background};

/// Releases what a token holds in the background if dropped while armed: for a request whose
/// future may be dropped after it was sent, leaving the holding's fate unknown.
pub(crate) struct ReleaseOnDrop<T: OwnerRelease> {
    keys: Arc<T>,
    token: String,
    why: Why,
    armed: bool,
}

impl<T: OwnerRelease> ReleaseOnDrop<T> {
    pub(crate) fn arm(keys: &Arc<T>, token: &str, why: Why) -> Self {
        ReleaseOnDrop {
            keys: Arc::clone(keys),
            token: token.to_owned(),
            why,
            armed: true,
        }
    }

    /// The outcome is settled: nothing to release.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }

    /// Releases in the background now, for `why`.
    pub(crate) fn release_now(mut self, why: Why) {
        self.why = why;
    }
}

impl<T: OwnerRelease> Drop for ReleaseOnDrop<T> {
    fn drop(&mut self) {
        if self.armed {
            release_in_background(
                Arc::clone(&self.keys),
                std::mem::take(&mut self.token),
                self.why,
            );
        }
    }
}
