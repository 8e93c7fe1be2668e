//! Which watches wait on which key: what the dispatchers look up when an invalidation arrives.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// The wake-up of one watch: set once, never cleared.
#[derive(Default)]
pub(super) struct Signal {
    fired: AtomicBool,
    notify: Notify,
}

impl Signal {
    /// Marks the watch as changed and wakes whoever waits on it.
    pub(super) fn fire(&self) {
        // The flag first: a waiter that enabled its `Notified` and then finds the flag clear
        // is guaranteed to receive the notification that follows.
        self.fired.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    pub(super) fn is_fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }

    pub(super) fn notify(&self) -> &Notify {
        &self.notify
    }
}

struct Entry {
    id: u64,
    channel: u64,
    signal: Arc<Signal>,
}

/// Live watches by physical key. A woken watch leaves the registry at once (a watch fires
/// once), and a dropped one removes itself, so the registry holds exactly the watches that
/// are alive and still pending: its size is bounded by what the callers keep.
#[derive(Default)]
pub(super) struct Registry {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    keys: HashMap<Vec<u8>, Vec<Entry>>,
    len: usize,
}

impl Registry {
    /// Adds a pending watch of `key`, read through tracking connection `channel`; returns its
    /// id (for [`unregister`](Self::unregister)) and its signal.
    pub(super) fn register(&self, key: &[u8], channel: u64) -> (u64, Arc<Signal>) {
        let signal = Arc::new(Signal::default());
        let mut inner = self.lock();
        inner.next_id += 1;
        let id = inner.next_id;
        let entry = Entry {
            id,
            channel,
            signal: Arc::clone(&signal),
        };
        match inner.keys.get_mut(key) {
            Some(entries) => entries.push(entry),
            None => {
                inner.keys.insert(key.to_vec(), vec![entry]);
            }
        }
        inner.len += 1;
        (id, signal)
    }

    /// Removes watch `id` of `key` if it is still pending.
    pub(super) fn unregister(&self, key: &[u8], id: u64) {
        let mut inner = self.lock();
        let Some(entries) = inner.keys.get_mut(key) else {
            return;
        };
        let Some(index) = entries.iter().position(|e| e.id == id) else {
            return;
        };
        entries.swap_remove(index);
        if entries.is_empty() {
            inner.keys.remove(key);
        }
        inner.len -= 1;
    }

    /// Wakes every watch of `key`; returns how many.
    pub(super) fn wake_key(&self, key: &[u8]) -> usize {
        let entries = {
            let mut inner = self.lock();
            let entries = inner.keys.remove(key).unwrap_or_default();
            inner.len -= entries.len();
            entries
        };
        fire(entries)
    }

    /// Wakes every watch read through tracking connection `channel`; returns how many.
    pub(super) fn wake_channel(&self, channel: u64) -> usize {
        let mut woken = Vec::new();
        {
            let mut inner = self.lock();
            inner.keys.retain(|_, entries| {
                let mut index = 0;
                while index < entries.len() {
                    if entries[index].channel == channel {
                        woken.push(entries.swap_remove(index));
                    } else {
                        index += 1;
                    }
                }
                !entries.is_empty()
            });
            inner.len -= woken.len();
        }
        fire(woken)
    }

    /// Wakes every watch; returns how many.
    pub(super) fn wake_all(&self) -> usize {
        let keys = {
            let mut inner = self.lock();
            inner.len = 0;
            std::mem::take(&mut inner.keys)
        };
        fire(keys.into_values().flatten())
    }

    /// How many watches are pending.
    #[cfg(any(test, feature = "test-util"))]
    pub(super) fn len(&self) -> usize {
        self.lock().len
    }

    /// Whether no watch is pending: then nobody waits on what a tracking connection says.
    pub(super) fn is_empty(&self) -> bool {
        self.lock().len == 0
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every update leaves the map and its count consistent before anything can panic.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Fires the signals outside the registry's lock.
fn fire(entries: impl IntoIterator<Item = Entry>) -> usize {
    let mut count = 0;
    for entry in entries {
        entry.signal.fire();
        count += 1;
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unregistering_every_watch_leaves_nothing() {
        let registry = Registry::default();
        let a = registry.register(b"a", 1);
        let b = registry.register(b"a", 1);
        let c = registry.register(b"c", 2);
        assert_eq!(registry.len(), 3);
        registry.unregister(b"a", a.0);
        registry.unregister(b"a", a.0);
        assert_eq!(registry.len(), 2);
        registry.unregister(b"a", b.0);
        registry.unregister(b"c", c.0);
        assert_eq!(registry.len(), 0);
        assert!(registry.lock().keys.is_empty());
    }

    #[test]
    fn wakes_by_key_by_channel_and_all() {
        let registry = Registry::default();
        let a1 = registry.register(b"a", 1);
        let a2 = registry.register(b"a", 2);
        let b1 = registry.register(b"b", 1);
        let c2 = registry.register(b"c", 2);
        assert_eq!(registry.wake_key(b"missing"), 0);
        assert_eq!(registry.wake_key(b"a"), 2);
        assert!(a1.1.is_fired() && a2.1.is_fired() && !b1.1.is_fired());
        // Woken watches are gone: unregistering them later is a no-op.
        registry.unregister(b"a", a1.0);
        assert_eq!(registry.len(), 2);
        assert_eq!(registry.wake_channel(1), 1);
        assert!(b1.1.is_fired() && !c2.1.is_fired());
        assert_eq!(registry.wake_all(), 1);
        assert!(c2.1.is_fired());
        assert_eq!(registry.len(), 0);
        assert!(registry.lock().keys.is_empty());
    }
}
