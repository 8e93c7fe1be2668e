//! Where a space's sessions live, and the kit's steps on one of them: a grant is an
//! acquisition, a keep-alive a renewal, a revoke a release, each under the lease id (its
//! owner token).

use std::fmt;

use crate::backend::Backend;
use crate::backend::steps::session::{
    LeaseKeys, SessionGrantReply, SessionGrantStep, SessionKeepAliveStep, SessionRevokeStep,
    SessionVerifyStep, SpaceKeys,
};
use crate::coordination::name;
use crate::coordination::owner::{Acquire, Acquisition, HoldingKeys, lease_expiry};
use crate::coordination::ownership::Primitive;
use crate::error::Result;

/// The user keys of one space (the backend applies its prefix), all under one hash tag.
pub struct SpaceNames {
    backend: Backend,
    /// `session:{<len>:<name>}`: the start of every key of the space.
    tagged: Vec<u8>,
    leases: Vec<u8>,
    expiries: Vec<u8>,
    entries: Vec<u8>,
}

impl SpaceNames {
    pub(crate) fn new(backend: Backend, name: &[u8]) -> Self {
        let tagged = name::hash_tagged(b"session", name);
        let key = |suffix: &[u8]| [tagged.as_slice(), suffix].concat();
        SpaceNames {
            backend,
            leases: key(b":leases"),
            expiries: key(b":expiries"),
            entries: key(b":entries"),
            tagged,
        }
    }

    pub(crate) fn backend(&self) -> &Backend {
        &self.backend
    }

    /// `session:{<len>:<name>}`: the start of every key of the space.
    pub(crate) fn tagged(&self) -> &[u8] {
        &self.tagged
    }

    /// The space's leases key.
    pub(crate) fn leases(&self) -> &[u8] {
        &self.leases
    }

    pub(crate) fn space(&self) -> SpaceKeys<'_> {
        SpaceKeys {
            leases: &self.leases,
            expiries: &self.expiries,
            entries: &self.entries,
        }
    }

    /// The key set of the lease `id`.
    pub(crate) fn names_of(&self, id: &str) -> Vec<u8> {
        [self.tagged.as_slice(), b":lease:", id.as_bytes()].concat()
    }

    /// The keys of the lease `id`, whose key set is `names` (see [`names_of`](Self::names_of)).
    pub(crate) fn lease<'a>(&'a self, id: &'a str, names: &'a [u8]) -> LeaseKeys<'a> {
        LeaseKeys {
            space: self.space(),
            names,
            id,
        }
    }
}

/// The space's leases key, as text (lossy), for logs and messages.
impl fmt::Display for SpaceNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.leases))
    }
}

/// What the shared holding does with a session: the keep-alive renews the lease and every
/// key attached to it in one step; the release revokes it, its keys with it.
impl HoldingKeys for SpaceNames {
    /// Whether the lease was live.
    type Released = bool;
    const PRIMITIVE: Primitive = Primitive::Session;
    const LEFT_HELD: &'static str = "its lease and attached keys stay until it expires";

    fn backend(&self) -> &Backend {
        &self.backend
    }

    async fn renew(&self, token: &str, expiry_ms: Option<u64>) -> Result<bool> {
        let lease_ms = lease_expiry::<Self>(expiry_ms)?;
        let names = self.names_of(token);
        let lease = self.lease(token, &names);
        self.backend
            .run(SessionKeepAliveStep { lease, lease_ms })
            .await
    }

    async fn verify(&self, token: &str) -> Result<bool> {
        let names = self.names_of(token);
        let lease = self.lease(token, &names);
        self.backend.run_idempotent(SessionVerifyStep(lease)).await
    }

    async fn release(&self, token: &str) -> Result<bool> {
        let names = self.names_of(token);
        let lease = self.lease(token, &names);
        self.backend.run(SessionRevokeStep(lease)).await
    }
}

/// The grant: a new lease, which nothing else can hold.
impl Acquire for SpaceNames {
    /// The lease, in whole milliseconds.
    type Ask = u64;
    type Granted = ();

    fn expiry_ms(lease_ms: &u64) -> Option<u64> {
        Some(*lease_ms)
    }

    async fn acquire(
        &self,
        token: &str,
        lease_ms: &u64,
        not_after_ms: u64,
    ) -> Result<Acquisition<()>> {
        let names = self.names_of(token);
        let lease = self.lease(token, &names);
        let reply = self
            .backend
            .run(SessionGrantStep {
                lease,
                lease_ms: *lease_ms,
                not_after_ms,
            })
            .await?;
        Ok(match reply {
            SessionGrantReply::Granted => Acquisition::Granted(()),
            SessionGrantReply::Late => Acquisition::Late,
        })
    }
}
