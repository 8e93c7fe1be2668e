//! The semaphore steps on Redis: one Lua script each over one or two sorted sets, sharing the
//! helpers of `semaphore.lua`.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::semaphore::{PermitStep, SemaphoreAcquireReply, SemaphoreAcquireStep};
use crate::error::Result;

static ACQUIRE: LazyLock<Script> = script!(
    writes,
    "semaphore_acquire",
    "semaphore.lua",
    "semaphore_acquire.lua"
);
static RELEASE: LazyLock<Script> = script!(
    writes,
    "semaphore_release",
    "semaphore.lua",
    "semaphore_release.lua"
);
static RENEW: LazyLock<Script> = script!(
    writes,
    "semaphore_renew",
    "semaphore.lua",
    "semaphore_renew.lua"
);
// Not read-only: it prunes expired permits.
static VERIFY: LazyLock<Script> = script!(
    writes,
    "semaphore_verify",
    "semaphore.lua",
    "semaphore_verify.lua"
);
static HELD: LazyLock<Script> = script!(
    read_only,
    "semaphore_held",
    "semaphore.lua",
    "semaphore_held.lua"
);

/// For a script that takes keys only.
const NO_ARGS: &[u32] = &[];

impl RedisBackend {
    /// Acquires a permit in every set of the step, or in none.
    pub(super) async fn semaphore_acquire(
        &self,
        step: SemaphoreAcquireStep<'_>,
    ) -> Result<SemaphoreAcquireReply> {
        let outcome = self
            .eval_value(
                &ACQUIRE,
                step.keys,
                (
                    step.token,
                    step.expiry_ms.unwrap_or(0),
                    step.capacities,
                    step.not_after_ms,
                ),
            )
            .await
            .and_then(|reply| ACQUIRE.decode(reply, step.keys))?
            .into_outcome(ACQUIRE.name())?;
        match (outcome.status(), outcome.len()) {
            (b"granted", 0) => Ok(SemaphoreAcquireReply::Granted),
            (b"late", 0) => Ok(SemaphoreAcquireReply::Late),
            (b"full", 1) => Ok(SemaphoreAcquireReply::Full {
                retry_after_ms: outcome.optional(0)?,
            }),
            (b"capacity_mismatch", 2) => {
                let key = usize::try_from(outcome.int(0)?)
                    .ok()
                    .and_then(|i| i.checked_sub(1))
                    .filter(|&i| i < step.keys.len())
                    .ok_or_else(|| outcome.unexpected())?;
                let stored = u32::try_from(outcome.int(1)?).map_err(|_| outcome.unexpected())?;
                Ok(SemaphoreAcquireReply::CapacityMismatch { key, stored })
            }
            _ => Err(outcome.unexpected()),
        }
    }

    /// Removes the permit from its sets: `true` when it was still held.
    pub(super) async fn semaphore_release(&self, step: PermitStep<'_>) -> Result<bool> {
        let reply = self
            .eval_value(&RELEASE, step.keys, step.token)
            .await
            .and_then(|reply| RELEASE.decode(reply, step.keys))?;
        reply
            .into_outcome(RELEASE.name())?
            .flag(b"released", b"not_held")
    }

    /// Gives a held permit a new expiry: `true` when renewed, `false` when it was lost.
    pub(super) async fn semaphore_renew(
        &self,
        step: PermitStep<'_>,
        expiry_ms: Option<u64>,
    ) -> Result<bool> {
        let reply = self
            .eval_value(&RENEW, step.keys, (step.token, expiry_ms.unwrap_or(0)))
            .await
            .and_then(|reply| RENEW.decode(reply, step.keys))?;
        reply.into_outcome(RENEW.name())?.flag(b"renewed", b"lost")
    }

    /// Whether the permit is held in every set, after pruning.
    pub(super) async fn semaphore_verify(&self, step: PermitStep<'_>) -> Result<bool> {
        let reply = self
            .eval_value(&VERIFY, step.keys, step.token)
            .await
            .and_then(|reply| VERIFY.decode(reply, step.keys))?;
        reply
            .into_outcome(VERIFY.name())?
            .flag(b"held", b"not_held")
    }

    /// The live permits of each set.
    pub(super) async fn semaphore_held(&self, keys: &[Vec<u8>]) -> Result<Vec<u32>> {
        let outcome = self
            .eval_value(&HELD, keys, NO_ARGS)
            .await
            .and_then(|reply| HELD.decode(reply, keys))?
            .into_outcome(HELD.name())?;
        if outcome.status() != b"live" || outcome.len() != keys.len() {
            return Err(outcome.unexpected());
        }
        (0..keys.len())
            .map(|i| u32::try_from(outcome.int(i)?).map_err(|_| outcome.unexpected()))
            .collect()
    }
}
