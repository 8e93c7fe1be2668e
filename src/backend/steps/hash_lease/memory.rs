//! The hash-field lease steps in process, with the same answers and the same validation as
//! the Lua scripts: one [`Value::FieldLeases`] per hash, each field with its owner token and
//! its own deadline, the entry expiring with the latest.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::memory::clock::millis_until;
use crate::backend::memory::{MemoryBackend, Store, Value};
use crate::backend::steps::MemoryStep;
use crate::backend::steps::hash_lease::{
    FieldAcquireReply, FieldAcquireStep, FieldReleaseStep, FieldRenewStep, FieldStep,
    FieldVerifyStep, LeaseReleaseReply,
};
use crate::error::{Error, Result};

/// The live fields of one hash: each one's owner token and deadline.
type Fields = HashMap<Vec<u8>, (String, Instant)>;

/// Takes the field if no live lease holds it.
impl MemoryStep for FieldAcquireStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<FieldAcquireReply> {
        let FieldStep { key, field, token } = self.lease;
        let physical = memory.physical_key(key);
        memory.step(|store, now| {
            let deadline = after(now, self.lease_ms)?;
            let mut fields = take(store, &physical, now, key)?;
            let reply = match fields.get(field) {
                Some((_, held_until)) => FieldAcquireReply::Held {
                    retry_after_ms: Some(millis_until(*held_until, now)),
                },
                None => {
                    fields.insert(field.to_vec(), (token.to_owned(), deadline));
                    FieldAcquireReply::Granted
                }
            };
            put(store, &physical, fields, now)?;
            Ok(reply)
        })
    }
}

/// Gives the field a new expiry if the token holds it.
impl MemoryStep for FieldRenewStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<bool> {
        let FieldStep { key, field, token } = self.lease;
        let physical = memory.physical_key(key);
        memory.step(|store, now| {
            let deadline = after(now, self.lease_ms)?;
            let mut fields = take(store, &physical, now, key)?;
            let renewed = match fields.get_mut(field) {
                Some((owner, held_until)) if owner == token => {
                    *held_until = deadline;
                    true
                }
                _ => false,
            };
            put(store, &physical, fields, now)?;
            Ok(renewed)
        })
    }
}

/// Whether the token holds the field.
impl MemoryStep for FieldVerifyStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<bool> {
        let FieldVerifyStep(FieldStep { key, field, token }) = *self;
        let physical = memory.physical_key(key);
        memory.step(|store, now| {
            let fields = take(store, &physical, now, key)?;
            let held = fields.get(field).is_some_and(|(owner, _)| owner == token);
            put(store, &physical, fields, now)?;
            Ok(held)
        })
    }
}

/// Deletes the field if the token holds it.
impl MemoryStep for FieldReleaseStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<LeaseReleaseReply> {
        let FieldReleaseStep(FieldStep { key, field, token }) = *self;
        let physical = memory.physical_key(key);
        memory.step(|store, now| {
            let mut fields = take(store, &physical, now, key)?;
            let reply = match fields.get(field) {
                None => LeaseReleaseReply::NoLease,
                Some((owner, _)) if owner == token => {
                    fields.remove(field);
                    LeaseReleaseReply::Released
                }
                Some(_) => LeaseReleaseReply::OtherOwner,
            };
            put(store, &physical, fields, now)?;
            Ok(reply)
        })
    }
}

/// `now` plus `ms`, or an invalid argument beyond the clock's range.
fn after(now: Instant, ms: u64) -> Result<Instant> {
    now.checked_add(Duration::from_millis(ms))
        .ok_or_else(|| Error::invalid_argument(format!("a lease of {ms} ms is too long")))
}

/// The live fields of the hash at `key`, none when it does not exist; corrupt state when the
/// key holds something else. They are taken out of the store: every step puts them back with
/// [`put`], which cannot fail for a key that exists, so nothing taken is lost.
fn take(store: &mut Store, key: &[u8], now: Instant, user_key: &[u8]) -> Result<Fields> {
    let mut fields = match store.get_mut(key, now).map(|entry| &mut entry.value) {
        None => return Ok(Fields::new()),
        Some(Value::FieldLeases(fields)) => std::mem::take(fields),
        Some(_) => {
            return Err(crate::backend::memory::other_state(user_key, "lease hash"));
        }
    };
    fields.retain(|_, (_, deadline)| *deadline > now);
    Ok(fields)
}

/// Stores `fields` at `key`, expiring with the latest deadline; removes the key when there
/// is none.
fn put(store: &mut Store, key: &[u8], fields: Fields, now: Instant) -> Result<()> {
    let Some(latest) = fields.values().map(|(_, deadline)| *deadline).max() else {
        store.remove(key);
        return Ok(());
    };
    store.insert(key, Value::FieldLeases(fields), Some(latest), now)
}
