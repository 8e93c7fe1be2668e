//! The stacked fixed-window step in process, with the same answers as the Lua script.

use std::time::Duration;

use crate::backend::memory::clock::Moment;
use crate::backend::memory::clock::millis_until;
use crate::backend::memory::{MemoryBackend, Value};
use crate::backend::steps::MemoryStep;
use crate::backend::steps::stacked_window::{StackedWindowReply, StackedWindowStep, WindowReply};
use crate::error::Result;

/// Runs one stacked fixed-window step atomically.
impl MemoryStep for StackedWindowStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<StackedWindowReply> {
        let step = self;
        let key = memory.physical_key(step.key);
        memory.step(|store, now| {
            let stored = match store.get_mut(&key, now) {
                None => None,
                Some(entry) => match &entry.value {
                    Value::Windows(windows) => Some(windows),
                    _ => {
                        return Err(crate::backend::memory::other_state(
                            step.key,
                            "stacked-window",
                        ));
                    }
                },
            };
            // Each policy's window under way, if any: (count, end).
            let live: Vec<(u64, Option<Moment>)> = (0..step.windows.len())
                .map(
                    |index| match stored.and_then(|windows| windows.get(index)) {
                        Some(&(count, end)) if end > now => (count, Some(end)),
                        _ => (0, None),
                    },
                )
                .collect();
            let refuses: Vec<bool> = live
                .iter()
                .zip(step.windows)
                .map(|((count, _), (limit, _))| count.saturating_add(step.permits) > *limit)
                .collect();
            let is_shadow = |index: usize| step.shadows >> index & 1 == 1;
            let fits = !refuses
                .iter()
                .enumerate()
                .any(|(index, &refuses)| refuses && !is_shadow(index));
            let shadow_rejected = refuses
                .iter()
                .enumerate()
                .filter(|&(index, &refuses)| refuses && is_shadow(index))
                .fold(0u32, |bits, (index, _)| bits | 1 << index);

            if !fits || step.permits == 0 {
                return Ok(StackedWindowReply {
                    granted: fits,
                    windows: live
                        .iter()
                        .map(|&(count, end)| WindowReply {
                            count,
                            ttl_ms: end.map(|end| millis_until(end, now)),
                        })
                        .collect(),
                    shadow_rejected,
                });
            }

            // Windows beyond this step's policies are kept, as the script leaves other
            // fields of the hash alone.
            let mut windows = stored.map(|windows| windows.to_vec()).unwrap_or_default();
            if windows.len() < live.len() {
                windows.resize(live.len(), (0, now));
            }
            let mut latest = now;
            let mut counted = false;
            let mut replies = Vec::with_capacity(live.len());
            for (index, ((count, end), (_, window_ms))) in live.iter().zip(step.windows).enumerate()
            {
                // A shadow policy that would reject counts nothing, and keeps its window.
                if refuses[index] {
                    if let Some(end) = end {
                        latest = latest.max(*end);
                    }
                    replies.push(WindowReply {
                        count: *count,
                        ttl_ms: end.map(|end| millis_until(end, now)),
                    });
                    continue;
                }
                let end = end.unwrap_or_else(|| now + Duration::from_millis(*window_ms));
                let count = count + step.permits;
                counted = true;
                windows[index] = (count, end);
                latest = latest.max(end);
                replies.push(WindowReply {
                    count,
                    ttl_ms: Some(millis_until(end, now)),
                });
            }
            // Only shadow policies that would reject: nothing counted, nothing written (as
            // the script does).
            if counted {
                let windows = windows.into_boxed_slice();
                store.insert(&key, Value::Windows(windows), Some(latest), now)?;
            }
            Ok(StackedWindowReply {
                granted: true,
                windows: replies,
                shadow_rejected,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_key_lives_until_its_last_window_ends() {
        let backend = MemoryBackend::new();
        let step = StackedWindowStep {
            key: b"k",
            permits: 1,
            windows: &[(5, 1_000), (50, 60_000)],
            shadows: 0,
        };
        let reply = backend.run(step).expect("step");
        assert!(reply.granted);
        let expires = backend.step(|store, now| {
            store
                .get_mut(&backend.physical_key(b"k"), now)
                .and_then(|e| e.expires_at())
        });
        assert_eq!(
            expires,
            Some(backend.clock().now() + Duration::from_secs(60)),
            "the longest window"
        );
    }
}
