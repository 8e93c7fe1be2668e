//! What the shared release of owner tokens needs from a semaphore: how it releases a permit,
//! and the words and the counter for the releases it gives up.

use std::sync::atomic::AtomicU64;

use super::abandoned::ABANDONED;
use super::sets::PermitSets;
use crate::coordination::owner::OwnerRelease;
use crate::error::Result;

impl OwnerRelease for PermitSets {
    /// Whether the permit was still held.
    type Reply = bool;
    const WHAT: &'static str = "semaphore permit";
    const LEFT_HELD: &'static str =
        "it stays held until it expires (or until removed by hand if it has no expiry)";

    fn abandoned(&self) -> &'static AtomicU64 {
        &ABANDONED
    }

    fn release_owned(&self, token: &str) -> impl Future<Output = Result<bool>> + Send {
        self.release(token)
    }
}
