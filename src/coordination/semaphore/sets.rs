//! Where a permit lives: its sets (one, or a client key's and the global one) on a backend.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::permit::expiry_ms;
use super::{Attempt, SemaphorePermit};
use crate::backend::Backend;
use crate::backend::steps::semaphore::{
    PermitReleaseStep, PermitRenewStep, PermitStep, PermitVerifyStep, SemaphoreAcquireReply,
    SemaphoreAcquireStep, SemaphoreHeldStep,
};
use crate::coordination::ManagedOptions;
use crate::coordination::owner::{
    Acquisition, HoldingKeys, acquire_waiting, new_token, send_acquisition,
};
use crate::error::{Error, ErrorKind, Result};

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

    /// Takes a permit in every set (with `capacities` in the order of the keys), or in none.
    ///
    /// When the step may have applied (a timeout or a connection lost after sending, a
    /// reply that could not be read, or the future dropped mid-flight), a release of the
    /// token that was sent is spawned before the error is returned, so a lost answer cannot
    /// leave a permit that nobody holds; the permit's expiry is the fallback if that release
    /// fails too. The step carries a deadline on the server's clock (Redis), and the release
    /// waits until it has passed: a request delayed in the network past the release is then
    /// a no-op, so it cannot leave a permit nobody holds either.
    pub(super) async fn try_acquire(
        self: &Arc<Self>,
        capacities: &[u32],
        expiry: Option<Duration>,
    ) -> Result<Attempt> {
        let expiry_ms = expiry_ms(expiry)?;
        let token = new_token()?;
        let sent = send_acquisition(self, &token, |not_after_ms| {
            Box::pin(self.acquire_step(&token, capacities, expiry_ms, not_after_ms))
        })
        .await?;
        sent.settle(self, token, expiry_ms, |holding, ()| {
            SemaphorePermit::new(holding)
        })
    }

    /// Takes a permit as [`try_acquire`](Self::try_acquire) does, waiting for one to free.
    pub(super) async fn acquire(
        self: &Arc<Self>,
        capacities: &[u32],
        expiry: Option<Duration>,
    ) -> Result<SemaphorePermit> {
        let keys: Vec<&[u8]> = self.keys.iter().map(Vec::as_slice).collect();
        let poll = ManagedOptions::new().poll();
        acquire_waiting(&self.backend, &keys, poll, None, || {
            self.try_acquire(capacities, expiry)
        })
        .await?
        // Without a deadline, the wait ends only with a permit.
        .ok_or_else(|| Error::new(ErrorKind::Timeout, "the wait for a permit ended"))
    }

    /// The acquisition step for `token`, its answer in the shared terms.
    async fn acquire_step(
        &self,
        token: &str,
        capacities: &[u32],
        expiry_ms: Option<u64>,
        not_after_ms: u64,
    ) -> Result<Acquisition<()>> {
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
