//! The fixed-window step on Redis: `INCREX` where the server has it, Lua otherwise.

use std::sync::LazyLock;

use redis::Value;

use crate::backend::redis::{RedisBackend, Script, error_map, packed_grant};
use crate::backend::steps::fixed_window::{FixedWindowReply, FixedWindowStep};
use crate::error::{Error, ErrorKind, Result};

static FIXED_WINDOW: LazyLock<Script> =
    LazyLock::new(|| Script::new("fixed_window", include_str!("fixed_window.lua")));

impl RedisBackend {
    /// Runs one fixed-window step.
    ///
    /// Redis 8.8+ and Valkey 9.2+ take it as one `INCREX` pipelined with `PTTL` (one round
    /// trip). A server that answers "unknown command", or an ACL that denies `INCREX`
    /// (`NOPERM`: an allow-list written before the command existed), makes every user of this
    /// handle take the Lua path for [`INCREX_REPROBE_AFTER`](crate::backend::redis::INCREX_REPROBE_AFTER); the
    /// rejected command changed nothing, so the same request goes on through Lua at once. Probes
    /// (0 permits) always use Lua, since `INCREX` would create the key.
    pub(super) async fn fixed_window(&self, step: FixedWindowStep<'_>) -> Result<FixedWindowReply> {
        if step.permits > 0 && self.capabilities().should_try_increx() {
            match self.fixed_window_increx(step).await {
                Ok(reply) => {
                    self.capabilities().record_increx_accepted();
                    return Ok(reply);
                }
                Err(err) if error_map::refuses_command(&err) => {
                    tracing::info!(
                        error = %err,
                        "the server does not take INCREX; using the Lua fixed window for the next {:?}",
                        crate::backend::redis::INCREX_REPROBE_AFTER
                    );
                    self.capabilities().record_increx_rejected();
                }
                Err(err) => return Err(increx_error(err)),
            }
        }
        self.fixed_window_lua(step).await
    }

    async fn fixed_window_lua(&self, step: FixedWindowStep<'_>) -> Result<FixedWindowReply> {
        let reply: Value = self
            .eval(
                &FIXED_WINDOW,
                &[step.key],
                (step.permits, step.limit, step.window_ms),
            )
            .await
            .map_err(|err| counting_error(err, step.key))?;
        let (status, count, ttl): (i64, u64, i64) = match packed_grant::unpack(&reply) {
            // count * 2^32 + ms until the window ends.
            Some((count, ttl)) => (1, count, ttl.cast_signed()),
            None => {
                redis::from_redis_value(reply).map_err(|err| error_map::from_redis(err.into()))?
            }
        };
        if status < 0 {
            return Err(corrupt(step.key));
        }
        Ok(FixedWindowReply {
            granted: status == 1,
            count,
            ttl_ms: u64::try_from(ttl).ok(),
            free_in_ms: u64::try_from(ttl).ok().map(|ttl| ttl + 1),
        })
    }

    async fn fixed_window_increx(
        &self,
        step: FixedWindowStep<'_>,
    ) -> Result<FixedWindowReply, redis::RedisError> {
        let key = self.physical_key(step.key);
        let mut pipe = redis::pipe();
        pipe.cmd("INCREX")
            .arg(&key)
            .arg("BYINT")
            .arg(step.permits)
            .arg("UBOUND")
            .arg(step.limit)
            .arg("PX")
            .arg(step.window_ms)
            .arg("ENX")
            .cmd("PTTL")
            .arg(&key);
        let reply = self.query_pipeline(&pipe).await?;
        let ((count, applied), mut ttl): ((i64, i64), i64) =
            redis::from_redis_value(Value::Array(reply))?;
        if ttl == -1 {
            // A counter without expiry would never reset: give it the window it lost.
            let mut pexpire = redis::cmd("PEXPIRE");
            pexpire.arg(&key).arg(step.window_ms);
            self.query_raw(&pexpire).await?;
            ttl = i64::try_from(step.window_ms).unwrap_or(i64::MAX);
        }
        Ok(FixedWindowReply {
            granted: applied != 0,
            count: u64::try_from(count).unwrap_or(0),
            ttl_ms: u64::try_from(ttl).ok(),
            free_in_ms: u64::try_from(ttl).ok().map(|ttl| ttl + 1),
        })
    }
}

fn corrupt(key: &[u8]) -> Error {
    Error::new(
        ErrorKind::CorruptState,
        format!(
            "the fixed-window counter {:?} is not an integer",
            String::from_utf8_lossy(key)
        ),
    )
}

/// The script lets INCRBY's own error end a step on a counter that is not an integer (see
/// the script): that is corrupt state, not a server failure.
fn counting_error(err: Error, key: &[u8]) -> Error {
    if matches!(err.kind(), ErrorKind::Server | ErrorKind::Script)
        && refuses_counter(&err.to_string())
    {
        corrupt(key)
    } else {
        err
    }
}

fn refuses_counter(text: &str) -> bool {
    text.contains("not an integer") || text.contains("WRONGTYPE") || text.contains("overflow")
}

fn increx_error(err: redis::RedisError) -> Error {
    // INCREX refuses a non-integer or wrongly typed counter without changing it. Inside a
    // pipeline the reply's text is wrapped, so look at the whole message.
    let corrupt_value = refuses_counter(&err.to_string());
    let mapped = error_map::from_redis(err);
    if corrupt_value {
        Error::new(ErrorKind::CorruptState, mapped.to_string())
    } else {
        mapped
    }
}
