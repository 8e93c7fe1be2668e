//! Redlock: a quorum lease over an odd number (at least three) of independent Redis
//! deployments, with a fencing token of its own.
//!
//! - [`RedlockGroup`]: the nodes (each a [`Coordination`](crate::Coordination) of its own,
//!   shared, not owned) and the node timeout; [`try_acquire`](RedlockGroup::try_acquire)
//!   runs one round, [`acquire`](RedlockGroup::acquire) waits.
//! - [`RedlockLease`]: the lease held on a quorum, with the group's fencing token: every
//!   step of it goes to every node. [`ManagedRedlockLease`] keeps one renewed, with the
//!   ownership signal, and a
//!   [`LeaseRequest::redlock`](crate::extract::LeaseRequest::redlock) has the `Lease`
//!   extractor take one.
//!
//! # The round
//!
//! One random owner token is sent to every node at once, each node's answer bounded by the
//! node timeout (a node slower than that counts as failed; so does one that fails). The
//! lease is granted when a majority granted it and its validity is not spent: the lease
//! asked for, counted from the start of the round. Each node holds it for that lease plus a
//! drift allowance (1% and 2 ms), so the validity is the node's lease minus the time the
//! round took and the allowance. A round that fails removes the token from every node at
//! once (those that did not answer too, so that a reply lost on the way leaves nothing),
//! and again once a late delivery can no longer land on the node (each acquisition carries
//! a deadline on its node's clock, past which it changes nothing).
//!
//! Each node holds the lease under a token of its own, derived from the lease's owner token
//! and the node's place in the group: two entries of a group that reach one server (by
//! address and by name) are then two holders there, and one server never votes twice.
//!
//! A renewal is compare-and-extend on every node: renewed when a quorum renewed. One that
//! misses its quorum ends the lease: its token is removed from every node, the handle is
//! lost, and a managed lease's ownership signal fires. A renewal never takes a
//! lease again. A release removes the token from every node, answered when a quorum
//! answered; a handle whose release missed the quorum stops reporting ownership and keeps
//! its token for another release.
//!
//! # Fencing tokens
//!
//! Each node keeps a fencing counter beside its lease key
//! (`redlock:{<name length>:<name>}:lease` and `:fence`, a
//! [fenced lock's](crate::coordination::lock::FencedLock) pair, under names of their own). An acquisition
//! takes the next token on each node that grants it (above its counter, and at least its
//! clock in microseconds), takes the largest of the majority's, and writes it back to that
//! majority (a counter only moves up) before the lease is returned; a write-back that
//! misses its quorum fails the round. Any two majorities share a node, so a later holder's
//! token is greater than every earlier one, **as long as the nodes keep their counters**.
//! A node keeps its counter as a fenced lock does: an hour past the later of its lease's
//! end and its clock passing the token written back. That is the token the critique of
//! Redlock found missing: send it with every write, and have the resource refuse a lower
//! one.
//!
//! When a node forgets its counter (a restart without persistence, a failover that lost
//! the last writes, an eviction), its next token is its own clock in microseconds. A later
//! majority may share only that node with the majority the last token was written back to,
//! and its token is then greater only if **that node's clock is ahead of the clock that
//! made the last token** (another node's) by the time between the rounds. So the tokens
//! keep increasing across one node's loss only while the nodes' clocks agree to better than
//! the time between a loss and the next round; a node whose clock runs seconds behind the
//! others' may hand out, after losing its counter, a token below one already used, which a
//! fenced resource then refuses (the holder is stale to it, not the other way round). Keep
//! the nodes' clocks synchronised (NTP), and give them persistence (below).
//! `a_node_that_forgets_its_counter_keeps_tokens_rising_only_while_clocks_agree` in
//! `tests/redlock.rs` shows both sides.
//!
//! # What Redlock does not give
//!
//! It is not consensus. The lease holds while the nodes keep their keys and their clocks
//! run at about the same rate: a process paused past its validity (a long GC, a stalled VM)
//! may wake and act while another holds the lease (the fencing token is the defence), and
//! a node whose clock jumps ahead expires its key early. A node restarted **without
//! persistence** comes back empty: if it was part of a holder's majority, another
//! contender can now win a majority that overlaps it only there, and two hold the lease.
//! Delay a node's restart by the longest lease plus the largest clock skew between the
//! nodes (or give the nodes an AOF with `appendfsync always`). A node that is a Sentinel
//! primary loses the same on every failover that drops the last writes (replication is
//! asynchronous), and a failover cannot be delayed: give Redlock nodes without replicas,
//! with an AOF. A node that cannot be reached during a release keeps its key until it
//! expires.
//!
//! # Failures
//!
//! | step | a node unavailable or slower than the node timeout | a node refusing (ACL, corrupt state) | a quorum of nodes failing |
//! |---|---|---|---|
//! | acquire | no vote; the token removed from it later; once a quorum has decided, the nodes still on their way are not waited for | no vote | an error naming each node's failure; the token removed everywhere |
//! | the token's write-back | not counted | not counted | an error naming each node's failure; the grants removed everywhere |
//! | renew | no renewal there | no renewal there | the lease ends: lost, the token removed everywhere |
//! | verify | a no | a no | `false` |
//! | release | not counted | not counted | an error (uncertain): the handle keeps its token for another release |

mod group;
mod lease;
mod nodes;

pub use group::{DEFAULT_NODE_TIMEOUT, RedlockGroup};
pub use lease::{ManagedRedlockLease, RedlockLease};
