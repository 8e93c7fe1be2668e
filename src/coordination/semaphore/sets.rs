//! Where a permit lives: its sets (one, or a client key's and the global one) on a backend.

use std::fmt;

use super::abandoned::ABANDONED;
use crate::backend::Backend;
use crate::backend::steps::semaphore::{
    PermitReleaseStep, PermitRenewStep, PermitStep, PermitVerifyStep, SemaphoreAcquireReply,
    SemaphoreAcquireStep, SemaphoreHeldStep,
};
use crate::coordination::owner::HoldingKeys;
use crate::coordination::ownership::AbandonedCounters;
use crate::error::Result;

/// The storage keys of a semaphore's sets (one or two, in one slot) on their backend; every
/// step on a permit runs over all of them at once.
pub(super) struct PermitSets {
    backend: Backend,
    keys: Vec<Vec<u8>>,
}

impl PermitSets {
    pub(super) fn new(backend: Backend, keys: Vec<Vec<u8>>) -> Self {
        PermitSets { backend, keys }
    }

    pub(super) fn keys(&self) -> &[Vec<u8>] {
        &self.keys
    }

    pub(super) fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Takes a permit for `token` in every set (capacities in the order of the keys), or in
    /// none.
    pub(super) async fn acquire(
        &self,
        token: &str,
        capacities: &[u32],
        expiry_ms: Option<u64>,
        not_after_ms: u64,
    ) -> Result<SemaphoreAcquireReply> {
        self.backend
            .run(SemaphoreAcquireStep {
                keys: &self.keys,
                capacities,
                token,
                expiry_ms,
                not_after_ms,
            })
            .await
    }

    /// The live permits of each set, in the order of the keys.
    pub(super) async fn held(&self) -> Result<Vec<u32>> {
        self.backend
            .run(SemaphoreHeldStep { keys: &self.keys })
            .await
    }

    fn step<'a>(&'a self, token: &'a str) -> PermitStep<'a> {
        PermitStep {
            keys: &self.keys,
            token,
        }
    }
}

/// The keys, as text (lossy), for logs and messages.
/// What the shared holding does with a permit: every step touches all of its sets.
impl HoldingKeys for PermitSets {
    /// Whether the permit was still held.
    type Released = bool;
    const WHAT: &'static str = "semaphore permit";
    const LEFT_HELD: &'static str =
        "it stays held until it expires (or until removed by hand if it has no expiry)";

    fn abandoned(&self) -> &'static AbandonedCounters {
        &ABANDONED
    }

    async fn renew(&self, token: &str, expiry_ms: Option<u64>) -> Result<bool> {
        self.backend
            .run(PermitRenewStep {
                permit: self.step(token),
                expiry_ms,
            })
            .await
    }

    async fn verify(&self, token: &str) -> Result<bool> {
        self.backend.run(PermitVerifyStep(self.step(token))).await
    }

    async fn release(&self, token: &str) -> Result<bool> {
        self.backend.run(PermitReleaseStep(self.step(token))).await
    }
}

impl fmt::Display for PermitSets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, key) in self.keys.iter().enumerate() {
            if i > 0 {
                f.write_str(" + ")?;
            }
            write!(f, "{:?}", String::from_utf8_lossy(key))?;
        }
        Ok(())
    }
}
