//! The semaphore steps on Redis: one Lua script each over one or two sorted sets, sharing the
//! helpers of `semaphore.lua`.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script};
use crate::backend::steps::semaphore::{PermitStep, SemaphoreAcquireReply, SemaphoreAcquireStep};
use crate::error::{Error, ErrorKind, Result};

macro_rules! semaphore_script {
    ($name:literal, $file:literal) => {
        LazyLock::new(|| {
            Script::new(
                $name,
                concat!(include_str!("semaphore.lua"), include_str!($file)),
            )
        })
    };
}

static ACQUIRE: LazyLock<Script> = semaphore_script!("semaphore_acquire", "semaphore_acquire.lua");
static RELEASE: LazyLock<Script> = semaphore_script!("semaphore_release", "semaphore_release.lua");
static RENEW: LazyLock<Script> = semaphore_script!("semaphore_renew", "semaphore_renew.lua");
static VERIFY: LazyLock<Script> = semaphore_script!("semaphore_verify", "semaphore_verify.lua");
static HELD: LazyLock<Script> = semaphore_script!("semaphore_held", "semaphore_held.lua");

/// The first element of every reply that reports a key which is not a semaphore set.
const CORRUPT: i64 = -2;

/// For a script that takes keys only.
const NO_ARGS: &[u32] = &[];

impl RedisBackend {
    /// Acquires a permit in every set of the step, or in none.
    pub(super) async fn semaphore_acquire(
        &self,
        step: SemaphoreAcquireStep<'_>,
    ) -> Result<SemaphoreAcquireReply> {
        let reply: Vec<i64> = self
            .eval(
                &ACQUIRE,
                step.keys,
                (
                    step.token,
                    step.expiry_ms.unwrap_or(0),
                    step.capacities,
                    step.not_after_ms,
                ),
            )
            .await?;
        match reply.as_slice() {
            [1] => Ok(SemaphoreAcquireReply::Granted),
            [-3] => Ok(SemaphoreAcquireReply::Late),
            [0, wait] => Ok(SemaphoreAcquireReply::Full {
                retry_after_ms: u64::try_from(*wait).ok(),
            }),
            [-1, index, stored] => {
                let key = key_index(step.keys, *index)?;
                let stored =
                    u32::try_from(*stored).map_err(|_| unexpected("semaphore_acquire", &reply))?;
                Ok(SemaphoreAcquireReply::CapacityMismatch { key, stored })
            }
            _ => Err(failure("semaphore_acquire", step.keys, &reply)),
        }
    }

    /// Removes the permit from its sets: `true` when it was still held.
    pub(super) async fn semaphore_release(&self, step: PermitStep<'_>) -> Result<bool> {
        let reply: Vec<i64> = self.eval(&RELEASE, step.keys, step.token).await?;
        flag("semaphore_release", step.keys, &reply)
    }

    /// Gives a held permit a new expiry: `true` when renewed, `false` when it was lost.
    pub(super) async fn semaphore_renew(
        &self,
        step: PermitStep<'_>,
        expiry_ms: Option<u64>,
    ) -> Result<bool> {
        let reply: Vec<i64> = self
            .eval(&RENEW, step.keys, (step.token, expiry_ms.unwrap_or(0)))
            .await?;
        flag("semaphore_renew", step.keys, &reply)
    }

    /// Whether the permit is held in every set, after pruning.
    pub(super) async fn semaphore_verify(&self, step: PermitStep<'_>) -> Result<bool> {
        let reply: Vec<i64> = self.eval(&VERIFY, step.keys, step.token).await?;
        flag("semaphore_verify", step.keys, &reply)
    }

    /// The live permits of each set.
    pub(super) async fn semaphore_held(&self, keys: &[Vec<u8>]) -> Result<Vec<u32>> {
        let reply: Vec<i64> = self.eval(&HELD, keys, NO_ARGS).await?;
        match reply.split_first() {
            Some((1, counts)) if counts.len() == keys.len() => counts
                .iter()
                .map(|&count| {
                    u32::try_from(count).map_err(|_| unexpected("semaphore_held", &reply))
                })
                .collect(),
            _ => Err(failure("semaphore_held", keys, &reply)),
        }
    }
}

/// Reads a `{1}` / `{0}` reply.
fn flag(script: &str, keys: &[Vec<u8>], reply: &[i64]) -> Result<bool> {
    match reply {
        [1] => Ok(true),
        [0] => Ok(false),
        _ => Err(failure(script, keys, reply)),
    }
}

/// The error for a reply that is not a success: corrupt state, or an unexpected reply.
fn failure(script: &str, keys: &[Vec<u8>], reply: &[i64]) -> Error {
    match reply {
        [CORRUPT, index] => match key_index(keys, *index) {
            Ok(key) => corrupt(&keys[key]),
            Err(err) => err,
        },
        _ => unexpected(script, reply),
    }
}

/// The 0-based position of the 1-based Lua key index `index`.
fn key_index(keys: &[Vec<u8>], index: i64) -> Result<usize> {
    usize::try_from(index)
        .ok()
        .and_then(|i| i.checked_sub(1))
        .filter(|&i| i < keys.len())
        .ok_or_else(|| Error::unexpected_reply(format!("a semaphore script named key {index}")))
}

fn corrupt(key: &[u8]) -> Error {
    Error::new(
        ErrorKind::CorruptState,
        format!(
            "the semaphore key {:?} does not hold a semaphore's sorted set",
            String::from_utf8_lossy(key)
        ),
    )
}

fn unexpected(script: &str, reply: &[i64]) -> Error {
    Error::unexpected_reply(format!("{script} answered {reply:?}"))
}
