//! The sliding-window step on Redis: one Lua script over one hash of segments.

use std::sync::LazyLock;

use redis::Value;

use crate::backend::redis::{RedisBackend, Script, packed_grant};
use crate::backend::steps::rate_limit_reply::RateLimitReply;
use crate::backend::steps::sliding_window::SlidingWindowStep;
use crate::error::{Error, ErrorKind, Result};

static SLIDING_WINDOW: LazyLock<Script> =
    LazyLock::new(|| Script::new("sliding_window", include_str!("sliding_window.lua")));

impl RedisBackend {
    /// Runs one sliding-window step.
    pub(super) async fn sliding_window(
        &self,
        step: SlidingWindowStep<'_>,
    ) -> Result<RateLimitReply> {
        let reply: Value = self
            .eval(
                &SLIDING_WINDOW,
                &[step.key],
                (step.permits, step.limit, step.window_ms, step.segment_ms),
            )
            .await?;
        let (status, remaining, reset_after_ms, retry_after_ms): (i64, u64, u64, i64) =
            packed_grant::four_values(reply, "sliding_window")?;
        if status < 0 {
            return Err(Error::new(
                ErrorKind::CorruptState,
                format!(
                    "the sliding-window key {:?} is not a hash of segment ends to counts",
                    String::from_utf8_lossy(step.key)
                ),
            ));
        }
        Ok(RateLimitReply {
            granted: status == 1,
            remaining,
            reset_after_ms,
            retry_after_ms: u64::try_from(retry_after_ms).ok(),
        })
    }
}
