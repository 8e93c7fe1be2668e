//! The local queue of requests waiting for permits, one line per client key.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// Which waiting request is served first when permits free up.
///
/// Order is local to one limiter instance: callers in other processes, and new local callers
/// arriving while a queued request retries, can take permits first.
///
/// Whatever the order, one client key cannot keep the queue from the others: a key alone
/// may fill it, but a request of another key that does not fit takes its room from a key
/// holding more than half of the queue (that key's last to be served go, down to half), and
/// a key holding half of it pushes out its own waiters, never the others'.
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
    /// Its limiter's name, the label of its gauge.
    policy: Arc<str>,
}

#[derive(Debug, Default)]
struct State {
    /// Per key, the front is the next to be served.
    lines: HashMap<Vec<u8>, Line>,
    queued_permits: u64,
    next_id: u64,
    closed: bool,
}

/// One key's waiters, with the permits they hold in all: kept as they come and go, so that
/// making room never sums a line again.
#[derive(Debug, Default)]
struct Line {
    waiters: VecDeque<Waiter>,
    permits: u64,
}

impl Line {
    fn push(&mut self, waiter: Waiter, order: QueueOrder) {
        self.permits += waiter.permits;
        match order {
            QueueOrder::OldestFirst => self.waiters.push_back(waiter),
            QueueOrder::NewestFirst => self.waiters.push_front(waiter),
        }
    }

    /// Takes its last to be served off.
    fn pop_back(&mut self) -> Option<Waiter> {
        let waiter = self.waiters.pop_back()?;
        self.permits -= waiter.permits;
        Some(waiter)
    }

    fn remove(&mut self, position: usize) -> Option<Waiter> {
        let waiter = self.waiters.remove(position)?;
        self.permits -= waiter.permits;
        Some(waiter)
    }
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
    /// A queue of at most `limit` permits, of the limiter named `policy`.
    pub(crate) fn new(limit: u64, order: QueueOrder, policy: &str) -> Self {
        WaitQueue {
            limit,
            order,
            state: Mutex::new(State::default()),
            policy: policy.into(),
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
        // Room is made first from a key holding more than half the queue (its last to be
        // served go), so that one key's flood can neither fill the queue against the others
        // nor push their waiters out; a key alone may still use all of it.
        let half = self.limit / 2;
        let room = self.limit - permits;
        push_back_the_largest(&mut state, key, half, room);
        if state.queued_permits > room {
            let own = line_permits(&state, key);
            match self.order {
                QueueOrder::OldestFirst => {
                    // Others may have been pushed back to make room.
                    crate::telemetry::queued_permits(&self.policy, state.queued_permits);
                    return None;
                }
                // A key holding half the queue pushes out its own oldest, not the others'.
                QueueOrder::NewestFirst if own + permits > half.max(1) => {
                    evict_from(&mut state, key, room);
                    if state.queued_permits > room {
                        crate::telemetry::queued_permits(&self.policy, state.queued_permits);
                        return None;
                    }
                }
                QueueOrder::NewestFirst => evict_oldest(&mut state, room),
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
        state
            .lines
            .entry(key.to_vec())
            .or_default()
            .push(waiter, self.order);
        state.queued_permits += permits;
        crate::telemetry::queued_permits(&self.policy, state.queued_permits);
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
        for waiter in state.lines.values().flat_map(|line| &line.waiters) {
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

/// The permits `key`'s line holds.
fn line_permits(state: &State, key: &[u8]) -> u64 {
    state.lines.get(key).map_or(0, |line| line.permits)
}

/// Takes waiters off the back of the largest line other than `key`'s (its last to be served:
/// the newest when oldest first, the oldest when newest first) while that line holds more
/// than `half` and more than `room` permits are queued.
fn push_back_the_largest(state: &mut State, key: &[u8], half: u64, room: u64) {
    while state.queued_permits > room {
        let Some(largest) = state
            .lines
            .iter()
            .filter(|(other, _)| other.as_slice() != key)
            .map(|(other, line)| (line.permits, other))
            .filter(|(held, _)| *held > half)
            .max()
            .map(|(_, other)| other.clone())
        else {
            return;
        };
        evict_back(state, &largest);
    }
}

/// Takes waiters off the back of `key`'s line until at most `room` permits are queued.
fn evict_from(state: &mut State, key: &[u8], room: u64) {
    while state.queued_permits > room && state.lines.contains_key(key) {
        evict_back(state, key);
    }
}

/// Takes the waiter at the back of `key`'s line off it; it learns it when woken.
fn evict_back(state: &mut State, key: &[u8]) {
    let Some(line) = state.lines.get_mut(key) else {
        return;
    };
    if let Some(evicted) = line.pop_back() {
        state.queued_permits -= evicted.permits;
        evicted.wake.notify_one();
    }
    if line.waiters.is_empty() {
        state.lines.remove(key);
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
            .filter_map(|(key, line)| line.waiters.back().map(|w| (w.id, key)))
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
        if line.waiters.is_empty() {
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
        match line.waiters.iter().position(|w| w.id == self.id) {
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
        let Some(position) = line.waiters.iter().position(|w| w.id == self.id) else {
            return;
        };
        let Some(waiter) = line.remove(position) else {
            return;
        };
        if position == 0
            && let Some(next) = line.waiters.front()
        {
            next.wake.notify_one();
        }
        if line.waiters.is_empty() {
            state.lines.remove(&self.key);
        }
        state.queued_permits -= waiter.permits;
        crate::telemetry::queued_permits(&self.queue.policy, state.queued_permits);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line's kept sum is its waiters' permits, and the queue's is the lines'.
    fn sums_agree(queue: &WaitQueue) {
        let state = queue.lock();
        let mut all = 0;
        for line in state.lines.values() {
            let summed: u64 = line.waiters.iter().map(|waiter| waiter.permits).sum();
            assert_eq!(line.permits, summed);
            all += summed;
        }
        assert_eq!(state.queued_permits, all);
    }

    #[test]
    fn the_kept_sums_follow_every_arrival_departure_and_eviction() {
        for order in [QueueOrder::OldestFirst, QueueOrder::NewestFirst] {
            let queue = WaitQueue::new(8, order, "q");
            let mut held = Vec::new();
            for (key, permits) in [
                (b"a", 3),
                (b"a", 2),
                (b"b", 1),
                (b"a", 2),
                (b"c", 2),
                (b"b", 3),
            ] {
                if let Some(ticket) = queue.enqueue(key, permits) {
                    held.push(ticket);
                }
                sums_agree(&queue);
            }
            while let Some(ticket) = held.pop() {
                drop(ticket);
                sums_agree(&queue);
            }
            assert!(queue.lock().lines.is_empty());
        }
    }

    #[test]
    fn oldest_first_serves_in_arrival_order_and_refuses_overflow() {
        let queue = WaitQueue::new(3, QueueOrder::OldestFirst, "q");
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
        let queue = WaitQueue::new(4, QueueOrder::NewestFirst, "q");
        let old = queue.enqueue(b"a", 1).expect("room");
        let others: Vec<_> = [b"b", b"c", b"d"]
            .iter()
            .map(|key| queue.enqueue(*key, 1).expect("room"))
            .collect();
        let middle = queue.enqueue(b"e", 1).expect("room after evicting");
        assert_eq!(old.role(), Role::Evicted);
        assert!(others.iter().all(|ticket| ticket.role() == Role::Head));
        // A key's second request within its half: the oldest across keys goes again.
        let new = queue.enqueue(b"e", 1).expect("room after evicting");
        assert_eq!((new.role(), middle.role()), (Role::Head, Role::Behind));
        assert_eq!(others[0].role(), Role::Evicted);
        assert_eq!(queue.queued_permits(), 4);
        assert!(
            queue.enqueue(b"f", 5).is_none(),
            "larger than the whole queue"
        );
    }

    #[test]
    fn keys_have_separate_lines_and_close_rejects_everyone() {
        let queue = WaitQueue::new(10, QueueOrder::OldestFirst, "q");
        let a = queue.enqueue(b"a", 1).expect("room");
        let b = queue.enqueue(b"b", 1).expect("room");
        assert_eq!((a.role(), b.role()), (Role::Head, Role::Head));
        queue.close();
        assert_eq!((a.role(), b.role()), (Role::Closed, Role::Closed));
        assert!(queue.enqueue(b"c", 1).is_none());
    }

    #[test]
    fn one_key_alone_may_use_the_whole_queue() {
        for order in [QueueOrder::OldestFirst, QueueOrder::NewestFirst] {
            let queue = WaitQueue::new(4, order, "q");
            let tickets: Vec<_> = (0..4)
                .map(|_| queue.enqueue(b"k", 1).expect("room"))
                .collect();
            assert_eq!(queue.queued_permits(), 4, "{order:?}");
            drop(tickets);
        }
    }

    #[test]
    fn a_flooding_key_yields_the_half_of_the_queue_it_took_beyond_its_share() {
        // Oldest first: the flood's newest waiters make room for another key's request.
        let queue = WaitQueue::new(4, QueueOrder::OldestFirst, "q");
        let flood: Vec<_> = (0..4)
            .map(|_| queue.enqueue(b"a", 1).expect("room"))
            .collect();
        let other = queue.enqueue(b"b", 1).expect("room made from the flood");
        assert_eq!(flood[3].role(), Role::Evicted, "the flood's newest went");
        assert_eq!(flood[0].role(), Role::Head, "its oldest stays first");
        let more: Vec<_> = (0..2).map(|_| queue.enqueue(b"b", 1)).collect();
        assert!(more[0].is_some(), "down to half");
        assert!(more[1].is_none(), "the flood keeps its half");
        assert!(queue.enqueue(b"a", 1).is_none(), "and takes no more");
        assert_eq!(other.role(), Role::Head);

        // Newest first: the flood pushes out its own oldest, never the other key's waiters.
        let queue = WaitQueue::new(4, QueueOrder::NewestFirst, "q");
        let victim = queue.enqueue(b"b", 1).expect("room");
        let flood: Vec<_> = (0..6).map(|_| queue.enqueue(b"a", 1)).collect();
        assert!(flood.iter().all(Option::is_some));
        assert_ne!(victim.role(), Role::Evicted, "the other key's waiter stays");
        assert_eq!(queue.queued_permits(), 4);
    }
}
