//! The countdown latch steps in process, with the same answers and the same validation as
//! the Lua scripts: one [`Value::Latch`] per latch.

use crate::backend::memory::{MemoryBackend, Value, clock};
use crate::backend::steps::MemoryStep;
use crate::backend::steps::latch::{
    LatchCountDownReply, LatchCountDownStep, LatchReadStep, LatchSetReply, LatchSetStep, LatchState,
};
use crate::error::Result;

/// Starts a generation, unless a latch exists and is not to be replaced.
impl MemoryStep for LatchSetStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<LatchSetReply> {
        let key = memory.physical_key(self.key);
        memory.step(|store, now| {
            let exists = match store.get_mut(&key, now).map(|entry| &entry.value) {
                None => false,
                Some(Value::Latch { .. }) => true,
                Some(_) => return Err(crate::backend::memory::other_state(self.key, "latch")),
            };
            if exists && !self.replace {
                return Ok(LatchSetReply::Exists);
            }
            let expires_at = match self.expiry_ms {
                None => None,
                Some(ms) => Some(clock::after(now, ms, "a latch expiry")?),
            };
            if !exists {
                store.ensure_room_for(1, now)?;
            }
            let latch = Value::Latch {
                generation: self.generation.to_owned(),
                count: self.count,
            };
            store.insert(&key, latch, expires_at, now)?;
            Ok(LatchSetReply::Set)
        })
    }
}

/// One count-down of the step's generation.
impl MemoryStep for LatchCountDownStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<LatchCountDownReply> {
        let key = memory.physical_key(self.key);
        memory.step(
            |store, now| match store.get_mut(&key, now).map(|entry| &mut entry.value) {
                None => Ok(LatchCountDownReply::Stale),
                Some(Value::Latch { generation, count }) => {
                    if generation != self.generation {
                        Ok(LatchCountDownReply::Stale)
                    } else if *count == 0 {
                        Ok(LatchCountDownReply::Completed)
                    } else {
                        *count -= 1;
                        Ok(LatchCountDownReply::Counted { remaining: *count })
                    }
                }
                Some(_) => Err(crate::backend::memory::other_state(self.key, "latch")),
            },
        )
    }
}

/// The latch's generation and count.
impl MemoryStep for LatchReadStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<Option<LatchState>> {
        let key = memory.physical_key(self.key);
        memory.step(
            |store, now| match store.get_mut(&key, now).map(|entry| &entry.value) {
                None => Ok(None),
                Some(Value::Latch { generation, count }) => Ok(Some(LatchState {
                    generation: generation.clone(),
                    count: *count,
                })),
                Some(_) => Err(crate::backend::memory::other_state(self.key, "latch")),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::ErrorKind;

    fn set(generation: &str, count: u64, replace: bool) -> LatchSetStep<'_> {
        LatchSetStep {
            key: b"l",
            generation,
            count,
            expiry_ms: Some(60_000),
            replace,
        }
    }

    fn count_down(generation: &str) -> LatchCountDownStep<'_> {
        LatchCountDownStep {
            key: b"l",
            generation,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_generation_counts_down_to_zero_and_no_further() {
        let backend = MemoryBackend::new();
        assert_eq!(
            backend.run(set("a", 2, false)).expect("set"),
            LatchSetReply::Set
        );
        assert_eq!(
            backend.run(set("b", 5, false)).expect("set"),
            LatchSetReply::Exists
        );
        assert_eq!(
            backend.run(count_down("a")).expect("count down"),
            LatchCountDownReply::Counted { remaining: 1 }
        );
        assert_eq!(
            backend.run(count_down("a")).expect("count down"),
            LatchCountDownReply::Counted { remaining: 0 }
        );
        assert_eq!(
            backend.run(count_down("a")).expect("count down"),
            LatchCountDownReply::Completed
        );
        assert_eq!(
            backend.run(count_down("b")).expect("count down"),
            LatchCountDownReply::Stale
        );
        assert_eq!(
            backend.run(set("b", 1, true)).expect("reset"),
            LatchSetReply::Set
        );
        assert_eq!(
            backend.run(count_down("a")).expect("count down"),
            LatchCountDownReply::Stale,
            "the old generation is refused"
        );
        let state = backend.run(LatchReadStep { key: b"l" }).expect("read");
        assert_eq!(
            state,
            Some(LatchState {
                generation: "b".to_owned(),
                count: 1
            })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_latch_is_gone_and_another_primitives_state_is_refused() {
        let backend = MemoryBackend::new();
        backend.run(set("a", 1, false)).expect("set");
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(
            backend.run(LatchReadStep { key: b"l" }).expect("read"),
            None
        );
        assert_eq!(
            backend.run(count_down("a")).expect("count down"),
            LatchCountDownReply::Stale
        );
        backend
            .step(|store, now| store.insert(&backend.physical_key(b"l"), Value::Int(3), None, now))
            .expect("insert");
        for err in [
            backend.run(set("b", 1, true)).map(drop),
            backend.run(count_down("a")).map(drop),
            backend.run(LatchReadStep { key: b"l" }).map(drop),
        ] {
            assert_eq!(err.expect_err("corrupt").kind(), ErrorKind::CorruptState);
        }
    }
}
