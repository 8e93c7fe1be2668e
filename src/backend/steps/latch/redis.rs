//! The countdown latch steps on Redis: one Lua script each over the latch's hash and its
//! completions' sorted set, sharing the helpers of `latch.lua`.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::RedisStep;
use crate::backend::steps::latch::{
    COMPLETIONS_KEPT, COMPLETIONS_KEPT_FOR_MS, LatchCountDownReply, LatchCountDownStep, LatchKeys,
    LatchRead, LatchReadStep, LatchSetReply, LatchSetStep, LatchState,
};
use crate::error::Result;

static SET: LazyLock<Script> = script!(writes, "latch_set", "latch.lua", "latch_set.lua");
static COUNT_DOWN: LazyLock<Script> = script!(
    writes,
    "latch_count_down",
    "latch.lua",
    "latch_count_down.lua"
);
static READ: LazyLock<Script> = script!(read_only, "latch_read", "latch.lua", "latch_read.lua");

/// Starts a generation, unless a latch exists and is not to be replaced.
impl RedisStep for LatchSetStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<LatchSetReply> {
        let replace = if self.replace { "1" } else { "0" };
        let args = (
            self.generation,
            self.count,
            self.expiry_ms.unwrap_or(0),
            replace,
            COMPLETIONS_KEPT_FOR_MS,
            COMPLETIONS_KEPT,
        );
        let outcome = redis.script_outcome(&SET, &keys(self.keys), args).await?;
        if outcome.flag(b"set", b"exists")? {
            Ok(LatchSetReply::Set)
        } else {
            Ok(LatchSetReply::Exists)
        }
    }
}

/// One count-down of the step's generation.
impl RedisStep for LatchCountDownStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<LatchCountDownReply> {
        let args = (
            self.generation,
            self.id,
            COMPLETIONS_KEPT_FOR_MS,
            COMPLETIONS_KEPT,
        );
        let outcome = redis
            .script_outcome(&COUNT_DOWN, &keys(self.keys), args)
            .await?;
        match (outcome.status(), outcome.len()) {
            (b"counted", 1) => Ok(LatchCountDownReply::Counted {
                remaining: outcome.uint(0)?,
            }),
            (b"completed", 0) => Ok(LatchCountDownReply::Completed),
            (b"stale", 0) => Ok(LatchCountDownReply::Stale),
            _ => Err(outcome.unexpected()),
        }
    }
}

/// The latch's current generation, or whether the one asked about completed.
impl RedisStep for LatchReadStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<LatchRead> {
        let asked = self.generation.unwrap_or("");
        let outcome = redis.script_outcome(&READ, &keys(self.keys), asked).await?;
        match (outcome.status(), outcome.len()) {
            (b"latch", 2) => Ok(LatchRead::Current(LatchState {
                generation: String::from_utf8_lossy(outcome.bytes(0)?).into_owned(),
                count: outcome.uint(1)?,
            })),
            (b"completed", 0) => Ok(LatchRead::Completed),
            (b"none", 0) => Ok(LatchRead::None),
            _ => Err(outcome.unexpected()),
        }
    }
}

/// The keys, in the order the scripts take them.
fn keys(keys: LatchKeys<'_>) -> [&[u8]; 2] {
    [keys.latch, keys.completions]
}
