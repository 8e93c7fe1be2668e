//! Where a read-write lease lives: one sorted set on a backend.

use std::fmt;

use crate::backend::Backend;
use crate::backend::steps::rw_lease::{
    RwAcquireReply, RwAcquireStep, RwDowngradeReply, RwDowngradeStep, RwHeld, RwReleaseStep,
    RwRenewStep, RwStep, RwVerifyStep,
};
use crate::coordination::owner::{Acquisition, HoldingKeys};
use crate::error::{Error, Result};

/// The user key of a read-write lease set (the backend applies its prefix) on its backend.
pub(super) struct RwKeys {
    backend: Backend,
    key: Vec<u8>,
}

impl RwKeys {
    pub(super) fn new(backend: Backend, key: Vec<u8>) -> Self {
        RwKeys { backend, key }
    }

    pub(super) fn key(&self) -> &[u8] {
        &self.key
    }

    /// Takes a read or a write lease for `token` if the set lets it in; a refused writer
    /// with `waiting` records that it waits.
    pub(super) async fn acquire(
        &self,
        write: bool,
        token: &str,
        lease_ms: u64,
        not_after_ms: u64,
        waiting: Option<(&str, u64)>,
    ) -> Result<Acquisition<()>> {
        let reply = self
            .backend
            .run(RwAcquireStep {
                key: &self.key,
                write,
                token,
                lease_ms,
                not_after_ms,
                waiting,
            })
            .await?;
        Ok(match reply {
            RwAcquireReply::Granted => Acquisition::Granted(()),
            RwAcquireReply::Busy { retry_after_ms } => Acquisition::Busy {
                retry_after_ms: Some(retry_after_ms),
            },
            RwAcquireReply::Late => Acquisition::Late,
        })
    }

    /// Turns `token`'s write lease into a read lease.
    pub(super) async fn downgrade(&self, token: &str) -> Result<RwDowngradeReply> {
        self.backend.run(RwDowngradeStep(self.step(token))).await
    }

    fn step<'a>(&'a self, token: &'a str) -> RwStep<'a> {
        RwStep {
            key: &self.key,
            token,
        }
    }
}

/// What the shared holding does with a read or a write lease: every step finds the holder's
/// own entry by its token, whichever kind it is, so that a downgrade changes nothing for
/// the holding (nor for its keeper).
impl HoldingKeys for RwKeys {
    /// Whether a lease was removed.
    type Released = bool;
    const WHAT: &'static str = "read-write lease";
    const LEFT_HELD: &'static str =
        "it keeps writers out (and readers, for a write lease) until it expires";

    fn backend(&self) -> &Backend {
        &self.backend
    }

    async fn renew(&self, token: &str, expiry_ms: Option<u64>) -> Result<bool> {
        // A lease always expires: the primitive never asks for a renewal without one.
        let lease_ms = expiry_ms
            .ok_or_else(|| Error::invalid_argument("a read-write lease needs an expiry"))?;
        self.backend
            .run(RwRenewStep {
                lease: self.step(token),
                lease_ms,
            })
            .await
    }

    async fn verify(&self, token: &str) -> Result<bool> {
        let held = self.backend.run(RwVerifyStep(self.step(token))).await?;
        Ok(held != RwHeld::Nothing)
    }

    async fn release(&self, token: &str) -> Result<bool> {
        self.backend.run(RwReleaseStep(self.step(token))).await
    }
}

/// The key, as text (lossy), for logs and messages.
impl fmt::Display for RwKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.key))
    }
}
