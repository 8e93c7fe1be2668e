//! The GCRA step on Redis: one Lua script over one string key.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::gcra::{GcraStep, reply_from_micros};
use crate::backend::steps::rate_limit_reply::{RateLimitReply, reply_parts};
use crate::error::Result;

static GCRA: LazyLock<Script> = script!(writes, "gcra", "gcra.lua");

impl RedisBackend {
    /// Runs one GCRA step: the script reads `TIME`, decides, and writes the new TAT only
    /// when it consumes.
    pub(super) async fn gcra(&self, step: GcraStep<'_>) -> Result<RateLimitReply> {
        let reply = self
            .eval_value(
                &GCRA,
                &[step.key],
                (step.permits, step.interval_us, step.burst),
            )
            .await
            .and_then(|reply| GCRA.decode(reply, &[step.key]))?;
        let (granted, remaining, reset_after_us, retry_after_us) = reply_parts(reply)?;
        Ok(reply_from_micros(
            granted,
            remaining,
            reset_after_us,
            retry_after_us,
        ))
    }
}
