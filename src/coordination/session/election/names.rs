//! Where an election lives: its keys beside its session space's, under the space's hash tag.

use std::sync::Arc;

use crate::backend::Backend;
use crate::backend::steps::election::ElectionKeys;
use crate::coordination::name;
use crate::coordination::session::SpaceNames;

/// The user keys of one election (the backend applies its prefix).
pub(super) struct ElectionNames {
    space: Arc<SpaceNames>,
    candidates: Vec<u8>,
    values: Vec<u8>,
    leader: Vec<u8>,
    terms: Vec<u8>,
}

impl ElectionNames {
    pub(super) fn new(space: Arc<SpaceNames>, name: &[u8]) -> Self {
        let start = [
            space.tagged(),
            b":",
            &name::length_prefixed(b"election", name),
        ]
        .concat();
        let key = |suffix: &[u8]| [start.as_slice(), suffix].concat();
        ElectionNames {
            candidates: key(b":candidates"),
            values: key(b":values"),
            leader: key(b":leader"),
            terms: key(b":terms"),
            space,
        }
    }

    pub(super) fn backend(&self) -> &Backend {
        self.space.backend()
    }

    /// Whether `space` is this election's space.
    pub(super) fn in_space(&self, space: &SpaceNames) -> bool {
        self.space.leases() == space.leases()
    }

    pub(super) fn keys(&self) -> ElectionKeys<'_> {
        ElectionKeys {
            leases: self.space.leases(),
            candidates: &self.candidates,
            values: &self.values,
            leader: &self.leader,
            terms: &self.terms,
        }
    }

    /// The keys whose changes tell of a new leader or candidate.
    pub(super) fn watched(&self) -> [&[u8]; 1] {
        [&self.leader]
    }
}

impl std::fmt::Display for ElectionNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.leader))
    }
}
