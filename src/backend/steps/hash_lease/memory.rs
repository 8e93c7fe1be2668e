//! The hash-field lease steps in process, with the same answers and the same validation as
//! the Lua scripts: one [`Value::FieldLeases`] per hash, each field with its owner token and
//! its own deadline, the entry expiring with the latest.

use std::collections::HashMap;

use crate::backend::memory::clock::Moment;
use crate::backend::memory::clock::{self, millis_until};
use crate::backend::memory::{MemoryBackend, Value};
use crate::backend::steps::MemoryStep;
use crate::backend::steps::hash_lease::{
    FieldAcquireReply, FieldAcquireStep, FieldReleaseStep, FieldRenewStep, FieldStep,
    FieldVerifyStep, LeaseReleaseReply,
};
use crate::error::Result;

/// The live fields of one hash: each one's owner token and deadline.
type Fields = HashMap<Vec<u8>, (String, Moment)>;

/// Takes the field if no live lease holds it.
impl MemoryStep for FieldAcquireStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<FieldAcquireReply> {
        let FieldStep { key, field, token } = self.lease;
        with_fields(memory, key, |fields, now| {
            let deadline = clock::after(now, self.lease_ms, "a lease")?;
            Ok(match fields.get(field) {
                // This acquisition delivered twice: the field it holds is its grant.
                Some((owner, _)) if owner == token => FieldAcquireReply::Granted,
                Some((_, held_until)) => FieldAcquireReply::Held {
                    retry_after_ms: Some(millis_until(*held_until, now)),
                },
                None => {
                    fields.insert(field.to_vec(), (token.to_owned(), deadline));
                    FieldAcquireReply::Granted
                }
            })
        })
    }
}

/// Gives the field a new expiry if the token holds it.
impl MemoryStep for FieldRenewStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<bool> {
        let FieldStep { key, field, token } = self.lease;
        with_fields(memory, key, |fields, now| {
            let deadline = clock::after(now, self.lease_ms, "a lease")?;
            Ok(match fields.get_mut(field) {
                Some((owner, held_until)) if owner == token => {
                    *held_until = deadline;
                    true
                }
                _ => false,
            })
        })
    }
}

/// Whether the token holds the field.
impl MemoryStep for FieldVerifyStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<bool> {
        let FieldVerifyStep(FieldStep { key, field, token }) = *self;
        with_fields(memory, key, |fields, _| {
            Ok(fields.get(field).is_some_and(|(owner, _)| owner == token))
        })
    }
}

/// Deletes the field if the token holds it.
impl MemoryStep for FieldReleaseStep<'_> {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<LeaseReleaseReply> {
        let FieldReleaseStep(FieldStep { key, field, token }) = *self;
        with_fields(memory, key, |fields, _| {
            Ok(match fields.get(field) {
                None => LeaseReleaseReply::NoLease,
                Some((owner, _)) if owner == token => {
                    fields.remove(field);
                    LeaseReleaseReply::Released
                }
                Some(_) => LeaseReleaseReply::OtherOwner,
            })
        })
    }
}

/// Runs `step` on the live fields of the hash at `user_key` under the store's lock, then
/// stores what it leaves, expiring with the latest deadline (the key goes with its last
/// field), whatever `step` answered: what it took out is never lost. Another primitive's
/// state under the key is corrupt state, and nothing runs.
fn with_fields<R>(
    memory: &MemoryBackend,
    user_key: &[u8],
    step: impl FnOnce(&mut Fields, Moment) -> Result<R>,
) -> Result<R> {
    let key = memory.physical_key(user_key);
    memory.step(|store, now| {
        let mut fields = match store.get_mut(&key, now).map(|entry| &mut entry.value) {
            None => Fields::new(),
            Some(Value::FieldLeases(fields)) => std::mem::take(&mut **fields),
            Some(_) => {
                return Err(crate::backend::memory::other_state(user_key, "lease hash"));
            }
        };
        fields.retain(|_, (_, deadline)| *deadline > now);
        let answer = step(&mut fields, now);
        // Storing back a key that exists cannot fail; a new key is stored only with fields.
        match fields.values().map(|(_, deadline)| *deadline).max() {
            None => store.remove(&key),
            Some(latest) => store.insert(
                &key,
                Value::FieldLeases(Box::new(fields)),
                Some(latest),
                now,
            )?,
        }
        answer
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquire(backend: &MemoryBackend, token: &str) -> FieldAcquireReply {
        backend
            .run(FieldAcquireStep {
                lease: FieldStep {
                    key: b"hash",
                    field: b"field",
                    token,
                },
                lease_ms: 60_000,
                not_after_ms: 0,
            })
            .expect("acquire")
    }

    #[tokio::test(start_paused = true)]
    async fn an_acquisition_delivered_twice_is_granted_not_held() {
        let backend = MemoryBackend::new();
        assert_eq!(acquire(&backend, "a"), FieldAcquireReply::Granted);
        assert_eq!(acquire(&backend, "a"), FieldAcquireReply::Granted);
        assert!(matches!(
            acquire(&backend, "b"),
            FieldAcquireReply::Held { .. }
        ));
    }
}
