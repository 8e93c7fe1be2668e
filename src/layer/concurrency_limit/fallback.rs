//! The permits a concurrency limit hands out in this process while it fails open: the
//! limit's own capacities, kept here for this process alone. A per-key capacity is kept per
//! client key, in a map bounded to [`DEFAULT_FALLBACK_KEYS`] keys (or the layer's
//! [`fallback_keys`](super::RedisConcurrencyLimitLayer::fallback_keys)), so that an outage
//! never lets one client take every other client's slots: a client over its own capacity is
//! answered 429 as it would be with the backend up, and a client that finds the map full
//! (more distinct clients in flight than it tracks) is answered 503, the outage's answer,
//! never 429.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How many client keys a per-key limit tracks in this process while failing open, by
/// default.
pub const DEFAULT_FALLBACK_KEYS: usize = 10_000;

/// The local permits of one layer.
pub(crate) struct Fallback {
    /// The global capacity, in this process, and its permits.
    global: Option<(u32, Arc<Semaphore>)>,
    /// The per-key capacity, in this process.
    per_key: Option<Arc<PerKey>>,
}

struct PerKey {
    capacity: u32,
    max_keys: usize,
    /// Permits held by each client key (no entry: none).
    held: Mutex<HashMap<Box<[u8]>, u32>>,
}

/// Why no local permit was handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shortage {
    /// The key, or the process, holds its capacity: the limit's own answer (429).
    Full,
    /// The map holds as many keys as it tracks: the outage's answer (503).
    TooManyKeys,
}

/// A local permit: given back when dropped.
pub(crate) struct LocalPermit {
    _global: Option<OwnedSemaphorePermit>,
    key: Option<(Arc<PerKey>, Box<[u8]>)>,
}

impl Fallback {
    /// Local permits for `per_key` and `global` capacities (at least one of them), tracking
    /// at most `max_keys` client keys.
    pub(crate) fn new(per_key: Option<u32>, global: Option<u32>, max_keys: usize) -> Self {
        Fallback {
            global: global.map(|capacity| {
                let permits = usize::try_from(capacity)
                    .unwrap_or(Semaphore::MAX_PERMITS)
                    .min(Semaphore::MAX_PERMITS);
                (capacity, Arc::new(Semaphore::new(permits)))
            }),
            per_key: per_key.map(|capacity| {
                Arc::new(PerKey {
                    capacity,
                    max_keys,
                    held: Mutex::new(HashMap::new()),
                })
            }),
        }
    }

    /// The same capacities, tracking at most `max_keys` client keys.
    pub(crate) fn with_max_keys(&self, max_keys: usize) -> Self {
        Fallback::new(
            self.per_key.as_ref().map(|per_key| per_key.capacity),
            self.global.as_ref().map(|(capacity, _)| *capacity),
            max_keys,
        )
    }

    /// A permit for `key`, if its capacity and the global one both have room.
    pub(crate) fn take(&self, key: &[u8]) -> Result<LocalPermit, Shortage> {
        let key = match &self.per_key {
            Some(per_key) => Some((per_key.clone(), per_key.take(key)?)),
            None => None,
        };
        let global = match &self.global {
            Some((_, global)) => match global.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                // The key's permit goes back as the permit is dropped.
                Err(_) => {
                    drop(LocalPermit { _global: None, key });
                    return Err(Shortage::Full);
                }
            },
            None => None,
        };
        Ok(LocalPermit {
            _global: global,
            key,
        })
    }
}

impl PerKey {
    fn take(&self, key: &[u8]) -> Result<Box<[u8]>, Shortage> {
        let mut held = self.lock();
        let tracked = held.len();
        match held.get_mut(key) {
            Some(count) if *count >= self.capacity => Err(Shortage::Full),
            Some(count) => {
                *count += 1;
                Ok(Box::from(key))
            }
            None if tracked >= self.max_keys => Err(Shortage::TooManyKeys),
            None => {
                held.insert(Box::from(key), 1);
                Ok(Box::from(key))
            }
        }
    }

    fn give_back(&self, key: &[u8]) {
        let mut held = self.lock();
        if let Some(count) = held.get_mut(key) {
            *count -= 1;
            if *count == 0 {
                held.remove(key);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Box<[u8]>, u32>> {
        // Counts only: a panic elsewhere cannot leave them half-written.
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for LocalPermit {
    fn drop(&mut self) {
        if let Some((per_key, key)) = &self.key {
            per_key.give_back(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_has_its_own_capacity_and_a_full_map_is_no_429() {
        let fallback = Fallback::new(Some(2), None, 3);
        let a: Vec<_> = (0..2).map(|_| fallback.take(b"a").expect("a's")).collect();
        assert_eq!(fallback.take(b"a").err(), Some(Shortage::Full));
        // Another client is not blamed for the first one's streams.
        let b = fallback.take(b"b").expect("b's");
        let c = fallback.take(b"c").expect("c's");
        assert_eq!(fallback.take(b"d").err(), Some(Shortage::TooManyKeys));
        drop(a);
        // Given back: a key with no permit leaves the map.
        let d = fallback.take(b"d").expect("room again");
        drop((b, c, d));
        assert!(
            fallback
                .per_key
                .as_ref()
                .expect("per key")
                .lock()
                .is_empty()
        );
    }

    #[test]
    fn the_global_capacity_bounds_every_key_and_gives_a_keys_permit_back() {
        let fallback = Fallback::new(Some(5), Some(2), 100);
        let held: Vec<_> = [b"a", b"b"]
            .iter()
            .map(|key| fallback.take(*key).expect("room"))
            .collect();
        assert_eq!(fallback.take(b"c").err(), Some(Shortage::Full));
        let per_key = fallback.per_key.as_ref().expect("per key");
        assert_eq!(per_key.lock().len(), 2, "c's permit went back");
        drop(held);
        assert!(fallback.take(b"c").is_ok());
        let global_only = Fallback::new(None, Some(1), 1);
        let one = global_only.take(b"").expect("room");
        assert_eq!(global_only.take(b"").err(), Some(Shortage::Full));
        drop(one);
    }
}
