//! Where a permit lives: its sets (one, or a client key's and the global one) on a backend.

use std::fmt;

use crate::backend::Backend;
use crate::backend::steps::semaphore::{
    PermitReleaseStep, PermitRenewStep, PermitStep, PermitVerifyStep, SemaphoreAcquireReply,
    SemaphoreAcquireStep, SemaphoreHeldStep,
};
use crate::coordination::owner::{Acquire, Acquisition, HoldingKeys};
use crate::error::{Error, ErrorKind, Result};

/// The storage keys of a semaphore's sets (one or two, in one slot) on their backend; every
/// step on a permit runs over all of them at once.
pub struct PermitSets {
    backend: Backend,
    keys: Vec<Vec<u8>>,
    /// The capacity of each set, in the order of the keys.
    capacities: Vec<u32>,
}

impl PermitSets {
    pub(super) fn new(backend: Backend, keys: Vec<Vec<u8>>, capacities: Vec<u32>) -> Self {
        PermitSets {
            backend,
            keys,
            capacities,
        }
    }

    /// The user keys of the sets.
    pub(super) fn keys(&self) -> &[Vec<u8>] {
        &self.keys
    }

    /// The live permits of each set, in the order of the keys.
    pub(super) async fn held(&self) -> Result<Vec<u32>> {
        self.backend
            .run_idempotent(SemaphoreHeldStep { keys: &self.keys })
            .await
    }

    fn step<'a>(&'a self, token: &'a str) -> PermitStep<'a> {
        PermitStep {
            keys: &self.keys,
            token,
        }
    }
}

/// The acquisition: a permit in every set, or in none.
impl Acquire for PermitSets {
    /// The permit's expiry, in whole milliseconds; `None`: none.
    type Ask = Option<u64>;
    type Granted = ();

    fn expiry_ms(expiry_ms: &Option<u64>) -> Option<u64> {
        *expiry_ms
    }

    async fn acquire(
        &self,
        token: &str,
        expiry_ms: &Option<u64>,
        not_after_ms: u64,
    ) -> Result<Acquisition<()>> {
        let (capacities, expiry_ms) = (&self.capacities, *expiry_ms);
        let reply = self
            .backend
            .run(SemaphoreAcquireStep {
                keys: &self.keys,
                capacities,
                token,
                expiry_ms,
                not_after_ms,
            })
            .await?;
        Ok(match reply {
            SemaphoreAcquireReply::Granted => Acquisition::Granted(()),
            SemaphoreAcquireReply::Full { retry_after_ms } => Acquisition::Busy { retry_after_ms },
            SemaphoreAcquireReply::Late => Acquisition::Late,
            SemaphoreAcquireReply::CapacityMismatch { key, stored } => {
                let asked = capacities.get(key).copied().unwrap_or_default();
                let name = self
                    .keys
                    .get(key)
                    .map(|key| String::from_utf8_lossy(key).into_owned())
                    .unwrap_or_default();
                Acquisition::Refused(Error::new(
                    ErrorKind::CapacityMismatch,
                    format!(
                        "the semaphore {name:?} has permits held under a capacity of {stored}, \
                         not {asked}; a new capacity applies once every permit is released or expired"
                    ),
                ))
            }
        })
    }
}

/// What the shared holding does with a permit: every step touches all of its sets.
impl HoldingKeys for PermitSets {
    /// Whether the permit was still held.
    type Released = bool;
    const PRIMITIVE: crate::coordination::ownership::Primitive =
        crate::coordination::ownership::Primitive::SemaphorePermit;
    const LEFT_HELD: &'static str = "it stays held until it expires";

    fn backend(&self) -> &Backend {
        &self.backend
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
        self.backend
            .run_idempotent(PermitVerifyStep(self.step(token)))
            .await
    }

    async fn release(&self, token: &str) -> Result<bool> {
        self.backend.run(PermitReleaseStep(self.step(token))).await
    }
}

/// The keys, as text (lossy), for logs and messages.
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
