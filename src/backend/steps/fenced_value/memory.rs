//! The fenced value's steps in process, with the scripts' answers: one
//! [`Value::Fenced`] per key, without expiry.

use crate::backend::memory::{MemoryBackend, Value, other_state};
use crate::backend::steps::MemoryStep;
use crate::backend::steps::fenced_value::{FencedReadStep, FencedWriteReply, FencedWriteStep};
use crate::error::Result;

/// Stores the value if the token is not below the highest.
impl MemoryStep for FencedWriteStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<FencedWriteReply> {
        let key = memory.physical_key(self.key);
        memory.step(|store, now| {
            match store.get_mut(&key, now).map(|entry| &mut entry.value) {
                Some(Value::Fenced { token, .. }) if *token > self.token => {
                    return Ok(FencedWriteReply::Stale { highest: *token });
                }
                Some(Value::Fenced { token, value }) => {
                    *token = self.token;
                    value.clear();
                    value.extend_from_slice(self.value);
                    return Ok(FencedWriteReply::Written);
                }
                Some(_) => return Err(other_state(self.key, "fenced value")),
                None => {}
            }
            store.ensure_room_for(1, now)?;
            store.insert(
                &key,
                Value::Fenced {
                    token: self.token,
                    value: Box::new(self.value.to_vec()),
                },
                None,
                now,
            )?;
            Ok(FencedWriteReply::Written)
        })
    }
}

/// The value and its token.
impl MemoryStep for FencedReadStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<Option<(u64, Vec<u8>)>> {
        let key = memory.physical_key(self.key);
        memory.step(
            |store, now| match store.get_mut(&key, now).map(|entry| &entry.value) {
                None => Ok(None),
                Some(Value::Fenced { token, value }) => Ok(Some((*token, value.to_vec()))),
                Some(_) => Err(other_state(self.key, "fenced value")),
            },
        )
    }
}
