//! The plan set steps in process, with the same answers as the Lua scripts: one
//! [`Value::PlanSet`] per set, held (never evicted, no expiry: it is configuration).

use std::collections::BTreeMap;

use crate::backend::memory::{MemoryBackend, Value, other_state};
use crate::backend::steps::MemoryStep;
use crate::backend::steps::rate_limit_plans::{
    PlanSetFieldReadStep, PlanSetReadStep, PlanSetWriteStep, PlanSetWritten, StoredPlanSet,
    VERSION_FIELD,
};
use crate::error::{Error, Result};

/// Every field of the plan set.
impl MemoryStep for PlanSetReadStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<StoredPlanSet> {
        read(memory, self.key, |fields| {
            fields.iter().map(|(f, v)| (f.clone(), v.clone())).collect()
        })
    }
}

/// One field of the set.
impl MemoryStep for PlanSetFieldReadStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<Option<Vec<u8>>> {
        Ok(read(memory, self.key, |fields| fields.get(self.field).cloned())?.flatten())
    }
}

/// The changes, as a new version of the plan set.
impl MemoryStep for PlanSetWriteStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<PlanSetWritten> {
        let key = memory.physical_key(self.key);
        memory.step(|store, now| {
            let mut fields = match store.get_mut(&key, now).map(|entry| &entry.value) {
                None => BTreeMap::new(),
                Some(Value::PlanSet(fields)) => (**fields).clone(),
                Some(_) => return Err(other_state(self.key, "plan set")),
            };
            let exists = !fields.is_empty();
            let version = version(&fields, self.key)?;
            if self.seed && exists {
                return Ok(PlanSetWritten::Exists(version));
            }
            if !self.seed && !exists {
                return Ok(PlanSetWritten::Gone);
            }
            if !exists {
                store.ensure_room_for(1, now)?;
            }
            let version = version + 1;
            fields.insert(VERSION_FIELD.to_vec(), version.to_string().into_bytes());
            for (field, value) in self.changes {
                match value {
                    Some(value) => fields.insert(field.clone(), value.clone()),
                    None => fields.remove(field),
                };
            }
            store.insert(&key, Value::PlanSet(Box::new(fields)), None, now)?;
            Ok(PlanSetWritten::Written(version))
        })
    }
}

/// What `answer` makes of the plan set stored under the user key `key` (`None`: there is
/// none), checked as the scripts check it: a version that is no count, or another
/// primitive's state, is corrupt.
fn read<T>(
    memory: &MemoryBackend,
    key: &[u8],
    answer: impl FnOnce(&BTreeMap<Vec<u8>, Vec<u8>>) -> T,
) -> Result<Option<T>> {
    let physical = memory.physical_key(key);
    memory.step(
        |store, now| match store.get_mut(&physical, now).map(|entry| &entry.value) {
            None => Ok(None),
            Some(Value::PlanSet(fields)) => {
                version(fields, key)?;
                Ok(Some(answer(fields)))
            }
            Some(_) => Err(other_state(key, "plan set")),
        },
    )
}

/// The plan set's version: 0 without the field, corrupt state naming `user_key` unless it is
/// digits (as the script reads it).
fn version(fields: &BTreeMap<Vec<u8>, Vec<u8>>, user_key: &[u8]) -> Result<u64> {
    let Some(digits) = fields.get(VERSION_FIELD) else {
        return Ok(0);
    };
    Some(digits)
        .filter(|digits| !digits.is_empty() && digits.len() <= 15)
        .filter(|digits| digits.iter().all(u8::is_ascii_digit))
        .and_then(|digits| std::str::from_utf8(digits).ok()?.parse().ok())
        .ok_or_else(|| Error::corrupt_state(user_key, "the plan set version is not a count"))
}
