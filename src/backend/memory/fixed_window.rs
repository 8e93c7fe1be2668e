//! The fixed-window step in process, with the same answers as the Lua script.

use std::time::Duration;

use super::{MemoryBackend, Value};
use crate::backend::fixed_window::{FixedWindowReply, FixedWindowStep};
use crate::error::{Error, ErrorKind, Result};

impl MemoryBackend {
    /// Runs one fixed-window step atomically.
    pub(crate) fn fixed_window(&self, step: FixedWindowStep<'_>) -> Result<FixedWindowReply> {
        let key = self.physical_key(step.key);
        self.step(|store, now| {
            let (count, expires_at) = match store.get_mut(&key, now) {
                None => (0, None),
                Some(entry) => match entry.value {
                    Value::Int(count) => (u64::try_from(count).unwrap_or(0), entry.expires_at()),
                    _ => {
                        return Err(Error::new(
                            ErrorKind::CorruptState,
                            "the fixed-window key holds another primitive's state",
                        ));
                    }
                },
            };
            let ttl_ms = |deadline: tokio::time::Instant| {
                let left = deadline.saturating_duration_since(now);
                // Round up like Redis' PTTL never reports a live key as 0 ms.
                u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1)
            };
            if count.saturating_add(step.permits) > step.limit || step.permits == 0 {
                return Ok(FixedWindowReply {
                    granted: step.permits == 0 && count <= step.limit,
                    count,
                    ttl_ms: expires_at.map(ttl_ms),
                });
            }
            let count = count + step.permits;
            let deadline =
                expires_at.unwrap_or_else(|| now + Duration::from_millis(step.window_ms));
            let value = Value::Int(i64::try_from(count).unwrap_or(i64::MAX));
            store.insert(&key, value, Some(deadline), now)?;
            Ok(FixedWindowReply {
                granted: true,
                count,
                ttl_ms: Some(ttl_ms(deadline)),
            })
        })
    }
}
