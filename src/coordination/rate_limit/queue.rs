//! The local queue of requests waiting for permits, one line per client key.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// Which waiting request is served first when permits free up.
///
/// Order is local to one limiter instance: callers in other processes, and new local callers
/// arriving while a queued request retries, can take permits first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum QueueOrder {
    /// First come, first served; a request that does not fit in a full queue is rejected.
    #[default]
    OldestFirst,
    /// Last come, first served; a new request pushes the oldest ones out of a full queue
    /// (they are rejected), which favours fresh requests under overload.
    NewestFirst,
}

/// Waiting requests, per client key, bounded by the permits they ask for in total.
#[derive(Debug)]
pub(crate) struct WaitQueue {
    limit: u64,
    order: QueueOrder,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Per key, the front is the next to be served.
    lines: HashMap<Vec<u8>, VecDeque<Waiter>>,
    queued_permits: u64,
    next_id: u64,
    closed: bool,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    permits: u64,
    wake: Arc<Notify>,
}

/// Where a queued request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// First in its key's line: it may retry the backend.
    Head,
    /// Behind others in its key's line.
    Behind,
    /// Pushed out of a full queue by newer requests.
    Evicted,
    /// The limiter shut down.
    Closed,
}

impl WaitQueue {
    pub(crate) fn new(limit: u64, order: QueueOrder) -> Self {
        WaitQueue {
            limit,
            order,
            state: Mutex::new(State::default()),
        }
    }

    pub(crate) fn queued_permits(&self) -> u64 {
        self.lock().queued_permits
    }

    /// Joins `key`'s line, or returns `None` when the request cannot fit.
    pub(crate) fn enqueue(&self, key: &[u8], permits: u64) -> Option<Ticket<'_>> {
        let mut state = self.lock();
        if state.closed || permits > self.limit {
            return None;
        }
        if state.queued_permits + permits > self.limit {
            match self.order {
                QueueOrder::OldestFirst => return None,
                QueueOrder::NewestFirst => evict_oldest(&mut state, self.limit - permits),
            }
        }
        state.next_id += 1;
        let id = state.next_id;
        let wake = Arc::new(Notify::new());
        let waiter = Waiter {
            id,
            permits,
            wake: wake.clone(),
        };
        let line = state.lines.entry(key.to_vec()).or_default();
        match self.order {
            QueueOrder::OldestFirst => line.push_back(waiter),
            QueueOrder::NewestFirst => line.push_front(waiter),
        }
        state.queued_permits += permits;
        Some(Ticket {
            queue: self,
            key: key.to_vec(),
            id,
            wake,
        })
    }

    /// Rejects every waiter and every later request.
    pub(crate) fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        for waiter in state.lines.values().flatten() {
            waiter.wake.notify_one();
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update keeps the counts consistent before it can panic.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Removes the longest-waiting requests, across keys, until at most `room` permits are
/// queued; they learn it when woken.
fn evict_oldest(state: &mut State, room: u64) {
    while state.queued_permits > room {
        // The oldest waiter has the smallest id; with newest-first lines it is at the back.
        let Some(key) = state
            .lines
            .iter()
            .filter_map(|(key, line)| line.back().map(|w| (w.id, key)))
            .min()
            .map(|(_, key)| key.clone())
        else {
            return;
        };
        let Some(line) = state.lines.get_mut(&key) else {
            return;
        };
        if let Some(evicted) = line.pop_back() {
            state.queued_permits -= evicted.permits;
            evicted.wake.notify_one();
        }
        if line.is_empty() {
            state.lines.remove(&key);
        }
    }
}

/// A place in a line; leaving it (by drop, on success, error or cancellation) wakes the
/// next request if this one was first.
#[derive(Debug)]
pub(crate) struct Ticket<'a> {
    queue: &'a WaitQueue,
    key: Vec<u8>,
    id: u64,
    wake: Arc<Notify>,
}

impl Ticket<'_> {
    pub(crate) fn role(&self) -> Role {
        let state = self.queue.lock();
        if state.closed {
            return Role::Closed;
        }
        let Some(line) = state.lines.get(&self.key) else {
            return Role::Evicted;
        };
        match line.iter().position(|w| w.id == self.id) {
            Some(0) => Role::Head,
            Some(_) => Role::Behind,
            None => Role::Evicted,
        }
    }

    /// Resolves when something about this ticket may have changed: it became the head, was
    /// evicted, or the queue closed. Spurious wake-ups are possible; check [`Self::role`].
    pub(crate) async fn changed(&self) {
        self.wake.notified().await;
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut state = self.queue.lock();
        let Some(line) = state.lines.get_mut(&self.key) else {
            return;
        };
        let Some(position) = line.iter().position(|w| w.id == self.id) else {
            return;
        };
        let Some(waiter) = line.remove(position) else {
            return;
        };
        if position == 0
            && let Some(next) = line.front()
        {
            next.wake.notify_one();
        }
        if line.is_empty() {
            state.lines.remove(&self.key);
        }
        state.queued_permits -= waiter.permits;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_first_serves_in_arrival_order_and_refuses_overflow() {
        let queue = WaitQueue::new(3, QueueOrder::OldestFirst);
        let first = queue.enqueue(b"k", 1).expect("room");
        let second = queue.enqueue(b"k", 2).expect("room");
        assert!(queue.enqueue(b"k", 1).is_none(), "full");
        assert_eq!((first.role(), second.role()), (Role::Head, Role::Behind));
        drop(first);
        assert_eq!(second.role(), Role::Head);
        assert_eq!(queue.queued_permits(), 2);
        drop(second);
        assert_eq!(queue.queued_permits(), 0);
        assert!(queue.lock().lines.is_empty(), "empty lines are dropped");
    }

    #[test]
    fn newest_first_evicts_the_oldest_across_keys() {
        let queue = WaitQueue::new(2, QueueOrder::NewestFirst);
        let old = queue.enqueue(b"a", 1).expect("room");
        let middle = queue.enqueue(b"b", 1).expect("room");
        let new = queue.enqueue(b"b", 1).expect("room after evicting");
        assert_eq!(old.role(), Role::Evicted);
        assert_eq!((new.role(), middle.role()), (Role::Head, Role::Behind));
        assert_eq!(queue.queued_permits(), 2);
        assert!(
            queue.enqueue(b"c", 3).is_none(),
            "larger than the whole queue"
        );
    }

    #[test]
    fn keys_have_separate_lines_and_close_rejects_everyone() {
        let queue = WaitQueue::new(10, QueueOrder::OldestFirst);
        let a = queue.enqueue(b"a", 1).expect("room");
        let b = queue.enqueue(b"b", 1).expect("room");
        assert_eq!((a.role(), b.role()), (Role::Head, Role::Head));
        queue.close();
        assert_eq!((a.role(), b.role()), (Role::Closed, Role::Closed));
        assert!(queue.enqueue(b"c", 1).is_none());
    }
}
