//! The stacked fixed-window step on Redis: one Lua script over one hash of windows.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::RedisStep;
use crate::backend::steps::stacked_window::{StackedWindowReply, StackedWindowStep, WindowReply};
use crate::error::Result;

static STACKED_WINDOW: LazyLock<Script> = script!(writes, "stacked_window", "stacked_window.lua");

/// Runs one stacked fixed-window step.
impl RedisStep for StackedWindowStep<'_> {
    async fn on_redis(&self, redis: &RedisBackend) -> Result<StackedWindowReply> {
        let mut args = Vec::with_capacity(2 + 2 * self.windows.len());
        args.push(self.permits);
        args.push(u64::from(self.shadows));
        for &(limit, window_ms) in self.windows {
            args.extend([limit, window_ms]);
        }
        let outcome = redis
            .script_outcome(&STACKED_WINDOW, &[self.key], args)
            .await?;
        let granted = outcome.granted()?;
        if outcome.len() != 2 * self.windows.len() + 1 {
            return Err(outcome.unexpected());
        }
        let shadow_rejected = u32::try_from(outcome.uint(2 * self.windows.len())?)
            .map_err(|_| outcome.unexpected())?;
        let windows = (0..self.windows.len())
            .map(|i| {
                Ok(WindowReply {
                    count: outcome.uint(2 * i)?,
                    ttl_ms: outcome.optional(2 * i + 1)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(StackedWindowReply {
            granted,
            windows,
            shadow_rejected,
        })
    }
}
