//! The plan set steps in process, with the same answers as the Lua scripts: one
//! [`Value::PlanSet`] per set, held (never evicted, no expiry: it is configuration).

use std::collections::BTreeMap;

use crate::backend::memory::{MemoryBackend, Value, other_state};
use crate::backend::steps::MemoryStep;
use crate::backend::steps::rate_limit_plans::{
    PlanSetReadStep, PlanSetWriteStep, PlanSetWritten, StoredPlanSet, VERSION_FIELD,
};
use crate::error::{Error, Result};

/// Every field of the plan set.
impl MemoryStep for PlanSetReadStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<StoredPlanSet> {
        let key = memory.physical_key(self.key);
        memory.step(|store, now| match store.get_mut(&key, now) {
            None => Ok(None),
            Some(entry) => match &entry.value {
                Value::PlanSet(fields) => Ok(Some(
                    fields.iter().map(|(f, v)| (f.clone(), v.clone())).collect(),
                )),
                _ => Err(other_state(self.key, "plan set")),
            },
        })
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
            let version = match fields.get(VERSION_FIELD) {
                None => 0,
                Some(digits) => std::str::from_utf8(digits)
                    .ok()
                    .and_then(|text| text.parse::<u64>().ok())
                    .ok_or_else(|| {
                        Error::corrupt_state(self.key, "the plan set version is not a count")
                    })?,
            };
            if self.seed && exists {
                return Ok(PlanSetWritten::Exists(version));
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
