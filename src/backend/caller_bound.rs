//! A bound that a step's caller keeps itself: a layer or an extractor drops its attempt at
//! its decision timeout, so a backend's own response timeout, when no shorter, could only
//! fire after the attempt is gone. Told so, the backend arms no timer of its own for the
//! attempt's round trips: one timer a decision, not two.
//!
//! The bound holds while the caller polls its attempt, on the polling thread: what a step
//! spawns (a release in the background, a lease's keeper) runs outside it, under the
//! backend's own timeouts.

use std::cell::Cell;
use std::marker::PhantomData;
use std::time::Duration;

thread_local! {
    /// How long after it started the caller being polled drops its attempt.
    static BOUND: Cell<Option<Duration>> = const { Cell::new(None) };
}

/// The bound of an attempt being polled, until dropped (when the one before it, if any,
/// holds again).
pub(crate) struct Polling {
    before: Option<Duration>,
    /// Not `Send`: a `Send` future that holds it across an `.await` does not compile.
    _thread: PhantomData<*const ()>,
}

/// Marks the attempt about to be polled, which its caller drops once `bound` has passed
/// since it started; for as long as the returned guard lives, which must end with the poll
/// (never held across an `.await`, where other tasks run on the thread).
pub(crate) fn polling(bound: Duration) -> Polling {
    Polling {
        before: BOUND.replace(Some(bound)),
        _thread: PhantomData,
    }
}

impl Drop for Polling {
    fn drop(&mut self) {
        BOUND.set(self.before);
    }
}

/// Whether the caller drops what it polls no later than a timer of `timeout` armed now
/// would fire.
pub(crate) fn covers(timeout: Duration) -> bool {
    BOUND.get().is_some_and(|bound| bound <= timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_a_bound_no_longer_covers_and_only_while_polled() {
        let second = Duration::from_secs(1);
        assert!(!covers(second), "no bound outside");
        {
            let _outer = polling(second * 2);
            assert!(!covers(second), "a longer bound");
            {
                let _inner = polling(second / 2);
                assert!(covers(second), "a shorter one");
            }
            assert!(!covers(second), "the outer one again");
        }
        assert!(!covers(Duration::MAX), "none once dropped");
        // A task spawned while an attempt is polled runs later, on its own polls.
        let spawned = {
            let _bound = polling(second);
            tokio::spawn(async move { covers(Duration::MAX) })
        };
        assert_eq!(spawned.await.ok(), Some(false), "a spawned task is outside");
    }
}
