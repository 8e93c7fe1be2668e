//! The GCRA step on Redis: one Lua script over one string key.

use std::sync::LazyLock;

use redis::Value;

use crate::backend::redis::{RedisBackend, Script, packed_grant};
use crate::backend::steps::gcra::{GcraStep, reply_from_micros};
use crate::backend::steps::rate_limit_reply::RateLimitReply;
use crate::error::{Error, ErrorKind, Result};

static GCRA: LazyLock<Script> = LazyLock::new(|| Script::new("gcra", include_str!("gcra.lua")));

impl RedisBackend {
    /// Runs one GCRA step: the script reads `TIME`, decides, and writes the new TAT only
    /// when it consumes.
    pub(super) async fn gcra(&self, step: GcraStep<'_>) -> Result<RateLimitReply> {
        let reply: Value = self
            .eval(
                &GCRA,
                &[step.key],
                (step.permits, step.interval_us, step.burst),
            )
            .await?;
        let (status, remaining, reset_after_us, retry_after_us): (i64, u64, u64, i64) =
            packed_grant::four_values(reply, "gcra")?;
        if status < 0 {
            return Err(Error::new(
                ErrorKind::CorruptState,
                format!(
                    "the GCRA key {:?} does not hold an integer timestamp",
                    String::from_utf8_lossy(step.key)
                ),
            ));
        }
        Ok(reply_from_micros(
            status == 1,
            remaining,
            reset_after_us,
            u64::try_from(retry_after_us).ok(),
        ))
    }
}
