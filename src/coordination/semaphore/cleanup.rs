//! What the shared holding needs from a semaphore: how it renews, verifies and releases a
//! permit, and the words and the counter for the releases it gives up.

use super::abandoned::ABANDONED;
use super::sets::PermitSets;
use crate::coordination::owner::{HoldingKeys, OwnerRelease};
use crate::coordination::ownership::AbandonedCounters;
use crate::error::Result;

impl OwnerRelease for PermitSets {
    /// Whether the permit was still held.
    type Reply = bool;
    const WHAT: &'static str = "semaphore permit";
    const LEFT_HELD: &'static str =
        "it stays held until it expires (or until removed by hand if it has no expiry)";

    fn abandoned(&self) -> &'static AbandonedCounters {
        &ABANDONED
    }

    fn release_owned(&self, token: &str) -> impl Future<Output = Result<bool>> + Send {
        self.release(token)
    }
}

impl HoldingKeys for PermitSets {
    fn renew_owned(
        &self,
        token: &str,
        expiry_ms: Option<u64>,
    ) -> impl Future<Output = Result<bool>> + Send {
        self.renew(token, expiry_ms)
    }

    fn verify_owned(&self, token: &str) -> impl Future<Output = Result<bool>> + Send {
        self.verify(token)
    }
}
