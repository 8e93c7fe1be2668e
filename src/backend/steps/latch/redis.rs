//! The countdown latch steps on Redis: one Lua script each over one hash, sharing the helpers
//! of `latch.lua`.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::RedisStep;
use crate::backend::steps::latch::{
    LatchCountDownReply, LatchCountDownStep, LatchReadStep, LatchSetReply, LatchSetStep, LatchState,
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
        );
        let outcome = redis.script_outcome(&SET, &[self.key], args).await?;
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
        let outcome = redis
            .script_outcome(&COUNT_DOWN, &[self.key], self.generation)
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

/// The latch's generation and count.
impl RedisStep for LatchReadStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<Option<LatchState>> {
        let outcome = redis.script_outcome(&READ, &[self.key], NO_ARGS).await?;
        match (outcome.status(), outcome.len()) {
            (b"latch", 2) => Ok(Some(LatchState {
                generation: String::from_utf8_lossy(outcome.bytes(0)?).into_owned(),
                count: outcome.uint(1)?,
            })),
            (b"none", 0) => Ok(None),
            _ => Err(outcome.unexpected()),
        }
    }
}

/// For a script that takes keys only.
const NO_ARGS: &[u32] = &[];
