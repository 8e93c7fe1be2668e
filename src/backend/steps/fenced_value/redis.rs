//! The fenced value's steps on Redis: one script each, sharing `fenced_value.lua` and the
//! fencing counter's digit comparison.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::fenced_value::{FencedReadStep, FencedWriteReply, FencedWriteStep};
use crate::backend::steps::{RedisStep, fencing_counter};
use crate::error::Result;

static WRITE: LazyLock<Script> = script!(
    writes,
    "fenced_value_write",
    "../key_kinds.lua",
    "../fencing_counter.lua",
    "fenced_value.lua",
    "fenced_value_write.lua"
);
static READ: LazyLock<Script> = script!(
    read_only,
    "fenced_value_read",
    "../key_kinds.lua",
    "../fencing_counter.lua",
    "fenced_value.lua",
    "fenced_value_read.lua"
);

/// Stores the value if the token is not below the highest.
impl RedisStep for FencedWriteStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<FencedWriteReply> {
        let outcome = redis
            .script_outcome(
                &WRITE,
                &[self.key],
                (self.token.to_string(), self.value, self.not_after_ms),
            )
            .await?;
        match (outcome.status(), outcome.len()) {
            (b"written", 0) => Ok(FencedWriteReply::Written),
            (b"late", 0) => Ok(FencedWriteReply::Late),
            (b"stale", 1) => Ok(FencedWriteReply::Stale {
                highest: fencing_counter::token_from_digits(outcome.bytes(0)?, WRITE.name())?,
            }),
            _ => Err(outcome.unexpected()),
        }
    }
}

/// The value and its token.
impl RedisStep for FencedReadStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<Option<(u64, Vec<u8>)>> {
        let outcome = redis
            .script_outcome(&READ, &[self.key], &[] as &[&str])
            .await?;
        match (outcome.status(), outcome.len()) {
            (b"none", 0) => Ok(None),
            (b"value", 2) => Ok(Some((
                fencing_counter::token_from_digits(outcome.bytes(0)?, READ.name())?,
                outcome.bytes(1)?.to_vec(),
            ))),
            _ => Err(outcome.unexpected()),
        }
    }
}
