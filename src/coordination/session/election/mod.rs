//! Leader election among sessions, in the shape of etcd's `concurrency.Election`: a
//! candidate campaigns with a [`ManagedSession`](crate::coordination::session::ManagedSession)
//! and waits until it leads; the leader proclaims a value, which observers follow; a term
//! per leadership fences the leader's writes; losing the session ends the campaign and the
//! leadership, told through the session's ownership signal.
//!
//! # Storage
//!
//! An election named `name` in the space `session:{<len>:<space>}` keeps, under the same
//! hash tag (`…` is `session:{<len>:<space>}:election:<len>:<name>`):
//!
//! | key | type | holds |
//! |---|---|---|
//! | `…:candidates` | sorted set | each candidate (its session's lease id and its campaign's own 32 characters), scored by when it began to campaign (server ms) |
//! | `…:values` | hash | each candidate's value; under the empty field, the sweep's cursor while a pass is under way |
//! | `…:leader` | hash | the leader's candidate, term and value; it leads while that lease is live |
//! | `…:terms` | string | the term counter, a fencing counter |
//!
//! None of the first three expires: a leader leads as long as its session lives, which the
//! election's own steps do not see kept alive, so its record may not go sooner. The steps
//! that meet a dead candidate remove it, and each campaign step sweeps the next 64
//! candidates (from a cursor kept in the values hash, under the empty field, never in the
//! leader key that waiters watch) for dead ones: one that died behind a live leader,
//! without withdrawing, is gone within a pass of `ceil(candidates / 64)` campaigns (or the
//! next pass, as ranks shift), so the candidates and their values stay bounded by the live
//! ones. The counter makes terms never go back (a lost
//! counter starts again from the server's clock, above every earlier term, as a fenced
//! lock's does); it is kept as a fenced lock's is, an hour past the later of its leader's
//! lease end when elected and the clock passing its term.
//!
//! # Failures
//!
//! | step | unavailable | refused | uncertain |
//! |---|---|---|---|
//! | campaign | fails; the candidate is withdrawn in the background | as unavailable | fails; withdrawn once the step's deadline has passed, so a late copy cannot enter it again |
//! | proclaim | fails, nothing set | fails | may or may not be set; proclaim again |
//! | resign | fails; resigned in the background, retried for a minute | as unavailable | as unavailable |
//!
//! Dropping a [`Leadership`] resigns it in the background; a campaign of the same session
//! after it is another candidate, which that resign never touches.
//!
//! Out of memory (`maxmemory` under `noeviction`), a new candidate's campaign and a
//! `proclaim` fail with [`ErrorKind::OutOfMemory`](crate::ErrorKind::OutOfMemory),
//! certainly without effect; a resign, and the promotion of a candidate already entered,
//! still pass, so an election moves on while the server is full. They grow memory by a
//! bounded amount at most: the promoted value copied into the leader key, a term counter
//! written again, the sweep's cursor.
//!
//! A leader whose process stops (killed, paused) leads until its session's lease runs out
//! on the server; the next candidate's campaign wakes then and leads with a greater term.
//! A paused leader that wakes finds its ownership signal fired (its local estimate ran out
//! before the server's lease did), and a write it makes anyway carries the old term.

mod campaign;
mod deposition;
mod leader;
mod leadership;
mod names;
mod observer;
mod withdraw;

pub use campaign::Election;
pub use deposition::DEPOSITION_POLL;
pub use leader::Leader;
pub use leadership::Leadership;
pub use observer::Observer;
