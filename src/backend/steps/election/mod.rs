//! The election steps, shared by both backends: candidates in arrival order in a session
//! space, the leader promoted with the next term of a fencing counter when the one before
//! it no longer leads (see `election.lua`).

mod memory;
mod redis;

use super::Step;

/// The keys of one election (user keys: the backend applies its prefix), in its session
/// space's slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ElectionKeys<'a> {
    /// The space's leases.
    pub(crate) leases: &'a [u8],
    /// The candidates, by arrival.
    pub(crate) candidates: &'a [u8],
    /// The candidates' values.
    pub(crate) values: &'a [u8],
    /// The leader record.
    pub(crate) leader: &'a [u8],
    /// The term counter.
    pub(crate) terms: &'a [u8],
}

/// Who leads, as a step answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Leading {
    /// The asking candidate leads.
    This {
        term: u64,
        value: Vec<u8>,
        ttl_ms: u64,
    },
    /// Another candidate leads, for at most `ttl_ms` more.
    Other {
        term: u64,
        value: Vec<u8>,
        ttl_ms: u64,
    },
    /// Nobody.
    Nobody,
}

/// Enters a candidate and answers who leads, promoting the next when nobody does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CampaignStep<'a> {
    pub(crate) keys: ElectionKeys<'a>,
    pub(crate) id: &'a str,
    pub(crate) value: &'a [u8],
    /// The server time (ms since the epoch) after which the step changes nothing; 0: none.
    pub(crate) not_after_ms: u64,
}

/// What a campaign step answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CampaignReply {
    Leading(Leading),
    /// The candidate's lease is not live: nothing changed.
    NoLease,
    /// It reached the server after its deadline: nothing changed.
    Late,
}

/// The leader of `term` gives the election a new value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProclaimStep<'a> {
    pub(crate) keys: ElectionKeys<'a>,
    pub(crate) id: &'a str,
    pub(crate) term: u64,
    pub(crate) value: &'a [u8],
}

/// A candidate leaves; if it led, the next live one leads at once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ResignStep<'a> {
    pub(crate) keys: ElectionKeys<'a>,
    pub(crate) id: &'a str,
}

/// Who leads now; changes nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaderStep<'a> {
    pub(crate) keys: ElectionKeys<'a>,
}

impl Step for CampaignStep<'_> {
    const PRIMITIVE: &'static str = "election";
    const NAME: &'static str = "campaign";
    type Reply = CampaignReply;
}

impl Step for ProclaimStep<'_> {
    const PRIMITIVE: &'static str = "election";
    const NAME: &'static str = "proclaim";
    /// Whether it still led (and the value is set).
    type Reply = bool;
}

impl Step for ResignStep<'_> {
    const PRIMITIVE: &'static str = "election";
    const NAME: &'static str = "resign";
    /// Whether it led.
    type Reply = bool;
}

impl Step for LeaderStep<'_> {
    const PRIMITIVE: &'static str = "election";
    const NAME: &'static str = "leader";
    /// [`Leading::Other`] or [`Leading::Nobody`].
    type Reply = Leading;
}
