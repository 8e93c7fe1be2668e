//! The Redlock group's step on Redis: one script, sharing the fencing counter's helpers.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::RedisStep;
use crate::backend::steps::redlock::RedlockRaiseStep;
use crate::error::Result;

static RAISE: LazyLock<Script> = script!(
    writes,
    "redlock_raise",
    "../key_kinds.lua",
    "../fencing_counter.lua",
    "redlock_raise.lua"
);

/// Raises the node's counter to at least the group's token.
impl RedisStep for RedlockRaiseStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<()> {
        let outcome = redis
            .script_outcome(&RAISE, &[self.counter_key], self.token.to_string())
            .await?;
        match (outcome.status(), outcome.len()) {
            (b"raised", 0) => Ok(()),
            _ => Err(outcome.unexpected()),
        }
    }
}
