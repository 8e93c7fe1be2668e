//! Telling a connection that stopped answering from a slow one: a host gone without a word
//! (no FIN, no RST: a partition, a VIP or DNS failover, a dead VM) leaves a connection that
//! accepts requests and never answers, and the kernel takes some fifteen minutes to give up
//! on it. [`SILENT_STEPS`] steps in a row that get no answer, with nothing answered on the
//! connection in between, and a successor is dialled, which takes its place once it answers
//! (see [`Link`](super::link::Link)); one slow reply while others are answered is no
//! silence.
//!
//! A step gets no answer when its response timer fires, or when its caller gives up on it at
//! its own timeout (a layer's or an extractor's, which arms no second timer: see
//! [`caller_bound`](crate::backend::caller_bound)) with nothing answered on the handle since
//! it began (the circuit breaker's judgement of a timeout). A step dropped for another
//! reason (a client that went away) says nothing.
//!
//! On a Cluster the count is the whole client's, which is replaced whole: a cluster whose
//! every connection fell silent is caught, but one node that falls silent while the others
//! answer is not (its steps keep timing out until the kernel gives up on its socket), since
//! the cluster client tells no step which node it went to. The watch connections (for
//! waits) are asked a `PING` after a second without a word, and one without an answer within
//! the response timeout is replaced and its watches woken (see
//! [`RedisBackend::watch_key`](super::RedisBackend::watch_key)).

use std::sync::atomic::{AtomicU32, Ordering};

/// How many steps in a row a connection may leave unanswered, with nothing answered on it in
/// between, before it is replaced.
pub(crate) const SILENT_STEPS: u32 = 3;

/// The steps a connection left unanswered since its last answer.
#[derive(Debug, Default)]
pub(crate) struct Silence {
    unanswered: AtomicU32,
}

impl Silence {
    /// Whether the connection is to be replaced.
    pub(crate) fn is_silent(&self) -> bool {
        self.unanswered.load(Ordering::Relaxed) >= SILENT_STEPS
    }

    /// The server answered (a reply or an error reply). A load, and a store only after a
    /// silence, since every step calls it.
    pub(crate) fn answered(&self) {
        if self.unanswered.load(Ordering::Relaxed) != 0 {
            self.unanswered.store(0, Ordering::Relaxed);
        }
    }

    /// A step got no answer; whether the connection is silent now.
    pub(crate) fn missed(&self) -> bool {
        self.unanswered.fetch_add(1, Ordering::Relaxed) + 1 >= SILENT_STEPS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silent_after_the_bound_of_steps_unanswered_in_a_row() {
        let silence = Silence::default();
        for _ in 1..SILENT_STEPS {
            assert!(!silence.missed());
        }
        assert!(!silence.is_silent());
        // An answer in between starts the count again.
        silence.answered();
        for _ in 1..SILENT_STEPS {
            assert!(!silence.missed());
        }
        assert!(silence.missed());
        assert!(silence.is_silent());
    }
}
