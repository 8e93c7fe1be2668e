//! The stacked fixed-window step on Redis: one Lua script over one hash of windows.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script, script};
use crate::backend::steps::stacked_window::{StackedWindowReply, StackedWindowStep, WindowReply};
use crate::error::Result;

static STACKED_WINDOW: LazyLock<Script> = script!(writes, "stacked_window", "stacked_window.lua");

impl RedisBackend {
    /// Runs one stacked fixed-window step.
    pub(super) async fn stacked_window(
        &self,
        step: StackedWindowStep<'_>,
    ) -> Result<StackedWindowReply> {
        let mut args = Vec::with_capacity(1 + 2 * step.windows.len());
        args.push(step.permits);
        for &(limit, window_ms) in step.windows {
            args.extend([limit, window_ms]);
        }
        let outcome = self
            .eval_value(&STACKED_WINDOW, &[step.key], args)
            .await
            .and_then(|reply| STACKED_WINDOW.decode(reply, &[step.key]))?
            .into_outcome(STACKED_WINDOW.name())?;
        let granted = outcome.granted()?;
        if outcome.len() != 2 * step.windows.len() {
            return Err(outcome.unexpected());
        }
        let windows = (0..step.windows.len())
            .map(|i| {
                Ok(WindowReply {
                    count: outcome.uint(2 * i)?,
                    ttl_ms: outcome.optional(2 * i + 1)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(StackedWindowReply { granted, windows })
    }
}
