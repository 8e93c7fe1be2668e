//! The stacked fixed-window step on Redis: one Lua script over one hash of windows.

use std::sync::LazyLock;

use crate::backend::redis::{RedisBackend, Script};
use crate::backend::steps::stacked_window::{StackedWindowReply, StackedWindowStep, WindowReply};
use crate::error::{Error, ErrorKind, Result};

static STACKED_WINDOW: LazyLock<Script> =
    LazyLock::new(|| Script::new("stacked_window", include_str!("stacked_window.lua")));

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
        let reply: Vec<i64> = self.eval(&STACKED_WINDOW, &[step.key], args).await?;
        if reply.first().is_some_and(|&status| status < 0) {
            return Err(Error::new(
                ErrorKind::CorruptState,
                format!(
                    "the stacked-window key {:?} is not a hash of policy indexes to \
                     \"<count>:<window end>\"",
                    String::from_utf8_lossy(step.key)
                ),
            ));
        }
        let (Some(&status), Some(windows)) = (reply.first(), reply.get(1..)) else {
            return Err(Error::unexpected_reply("stacked_window: an empty reply"));
        };
        if windows.len() != 2 * step.windows.len() {
            return Err(Error::unexpected_reply(format!(
                "stacked_window: {} values for {} policies",
                windows.len(),
                step.windows.len()
            )));
        }
        Ok(StackedWindowReply {
            granted: status == 1,
            windows: windows
                .chunks_exact(2)
                .map(|pair| WindowReply {
                    count: u64::try_from(pair[0]).unwrap_or(0),
                    ttl_ms: u64::try_from(pair[1]).ok(),
                })
                .collect(),
        })
    }
}
