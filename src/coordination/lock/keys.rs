//! Where a lock lives: its lease key and counter key (one slot) on a backend.

use std::fmt;

use crate::backend::Backend;
use crate::backend::steps::fenced_lock::{
    FencedAcquireReply, FencedAcquireStep, LeaseReleaseReply, LeaseReleaseStep, LeaseRenewStep,
    LeaseStep, LeaseVerifyStep,
};
use crate::coordination::owner::{Acquisition, HoldingKeys};
use crate::error::{Error, Result};

/// The user keys of a lock (the backend applies its prefix) on their backend. Acquisition
/// runs over both keys; every step on a held lease touches the lease key alone.
pub(super) struct LockKeys {
    backend: Backend,
    lease: Vec<u8>,
    counter: Vec<u8>,
}

impl LockKeys {
    pub(super) fn new(backend: Backend, lease: Vec<u8>, counter: Vec<u8>) -> Self {
        LockKeys {
            backend,
            lease,
            counter,
        }
    }

    pub(super) fn lease_key(&self) -> &[u8] {
        &self.lease
    }

    pub(super) fn counter_key(&self) -> &[u8] {
        &self.counter
    }

    /// Takes the lease for `token` and the next fencing token, if no lease exists.
    pub(super) async fn acquire(
        &self,
        token: &str,
        lease_ms: u64,
        not_after_ms: u64,
    ) -> Result<Acquisition<u64>> {
        let reply = self
            .backend
            .run(FencedAcquireStep {
                lease_key: &self.lease,
                counter_key: &self.counter,
                token,
                lease_ms,
                not_after_ms,
            })
            .await?;
        Ok(match reply {
            FencedAcquireReply::Acquired { fencing_token } => Acquisition::Granted(fencing_token),
            FencedAcquireReply::Held { retry_after_ms } => Acquisition::Busy { retry_after_ms },
            FencedAcquireReply::Late => Acquisition::Late,
        })
    }

    fn step<'a>(&'a self, token: &'a str) -> LeaseStep<'a> {
        LeaseStep {
            lease_key: &self.lease,
            token,
        }
    }
}

/// What the shared holding does with a lease: every step on it touches the lease key alone.
impl HoldingKeys for LockKeys {
    type Released = LeaseReleaseReply;
    const PRIMITIVE: crate::coordination::ownership::Primitive =
        crate::coordination::ownership::Primitive::FencedLease;
    const LEFT_HELD: &'static str = "it blocks the lock until it expires";

    fn backend(&self) -> &Backend {
        &self.backend
    }

    async fn renew(&self, token: &str, expiry_ms: Option<u64>) -> Result<bool> {
        // A lease always expires: the lock never asks for a renewal without one.
        let lease_ms =
            expiry_ms.ok_or_else(|| Error::invalid_argument("a fenced lease needs an expiry"))?;
        self.backend
            .run(LeaseRenewStep {
                lease: self.step(token),
                lease_ms,
            })
            .await
    }

    async fn verify(&self, token: &str) -> Result<bool> {
        self.backend
            .run_idempotent(LeaseVerifyStep(self.step(token)))
            .await
    }

    async fn release(&self, token: &str) -> Result<LeaseReleaseReply> {
        self.backend.run(LeaseReleaseStep(self.step(token))).await
    }
}

/// The lease key, as text (lossy), for logs and messages: what a holder contends for.
impl fmt::Display for LockKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.lease))
    }
}
