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
//! On a Cluster the count is the whole client's, which is replaced whole, and it catches a
//! cluster whose every connection fell silent; the cluster client tells no step which node
//! it went to, so one node that falls silent while the others answer is caught by a census
//! instead: a step that times out (at its response timer, or its caller's timeout while
//! other steps were answered) sends `PING` to every primary, one census at a time, and a
//! primary that leaves two such rounds in a row unanswered, each within twice the response
//! timeout, makes the client silent (three unanswered requests to one node, the step's and
//! the census's, while the steps to the other nodes are answered). A replica's silence is
//! not the crate's: it reads from none. A server that stalls every client (a long script) is
//! so also silent; its successor then stalls too, and takes nothing from the old client
//! until it answers (see [`Link`](super::link::Link)). The watch connections (for
//! waits) are asked a `PING` after a second without a word, and one without an answer within
//! the response timeout is replaced and its watches woken (see
//! [`RedisBackend::watch_key`](super::RedisBackend::watch_key)).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// How many steps in a row a connection may leave unanswered, with nothing answered on it in
/// between, before it is replaced.
pub(crate) const SILENT_STEPS: u32 = 3;

/// The steps a connection left unanswered since its last answer.
#[derive(Debug, Default)]
pub(crate) struct Silence {
    unanswered: AtomicU32,
    /// Whether a census of a cluster's nodes is under way on this connection.
    census: AtomicBool,
    /// Whether a census found a node that does not answer: for good, since the other nodes'
    /// answers say nothing of it.
    node_silent: AtomicBool,
}

impl Silence {
    /// Whether the connection is to be replaced.
    pub(crate) fn is_silent(&self) -> bool {
        self.unanswered.load(Ordering::Relaxed) >= SILENT_STEPS
            || self.node_silent.load(Ordering::Relaxed)
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
            || self.node_silent.load(Ordering::Relaxed)
    }

    /// A census of a cluster's nodes found one that does not answer: the connection is
    /// silent, whatever the other nodes answer.
    pub(crate) fn node_fell_silent(&self) {
        self.node_silent.store(true, Ordering::Relaxed);
    }

    /// Starts a census, unless one is under way: whether this caller runs it.
    pub(crate) fn begin_census(&self) -> bool {
        !self.census.swap(true, Ordering::AcqRel)
    }

    /// The census under way ended.
    pub(crate) fn end_census(&self) {
        self.census.store(false, Ordering::Release);
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

    #[test]
    fn a_silent_node_is_silence_whatever_the_others_answer() {
        let silence = Silence::default();
        assert!(silence.begin_census());
        assert!(!silence.begin_census(), "one census at a time");
        silence.node_fell_silent();
        silence.end_census();
        silence.answered();
        assert!(silence.is_silent());
        assert!(silence.begin_census());
    }
}
