//! The Redlock group's step in process, as the script does it.

use crate::backend::memory::MemoryBackend;
use crate::backend::steps::redlock::RedlockRaiseStep;
use crate::backend::steps::{MemoryStep, fencing_counter};
use crate::error::{Error, Result};

/// Raises the node's counter to at least the group's token.
impl MemoryStep for RedlockRaiseStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<()> {
        let key = memory.physical_key(self.counter_key);
        let token = i64::try_from(self.token)
            .map_err(|_| Error::invalid_argument("a fencing token above i64::MAX"))?;
        memory.step(|store, now| {
            let counter = fencing_counter::read(store, &key, now, self.counter_key)?;
            if counter.is_none_or(|counter| counter < token) {
                if counter.is_none() {
                    store.ensure_room_for(1, now)?;
                }
                fencing_counter::store_token(store, &key, token, now, memory.clock(), now)?;
            }
            Ok(())
        })
    }
}
