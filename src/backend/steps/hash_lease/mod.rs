//! The hash-field lease steps, shared by both backends: one hash per group of named leases,
//! one field per lease, its value the holder's owner token and its expiry the lease's.
//!
//! Every step checks the owner token in the field's value, so a stale handle can change
//! neither a replacement lease of its field nor any other field; every write sets the field's
//! absolute expiry with its value. On Redis the steps need hash field expiry (Redis 7.4+,
//! Valkey 9.0+): each one first asks the backend's cached probe, and a server without it
//! fails with `Unsupported` before anything is sent.

mod memory;
mod redis;

use super::Step;
pub(crate) use super::lease_release::LeaseReleaseReply;

/// One field of a lease hash, and the token that holds (or asks for) it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FieldStep<'a> {
    /// The user key of the hash (the backend applies its prefix).
    pub(crate) key: &'a [u8],
    /// The field: the lease's name, any bytes.
    pub(crate) field: &'a [u8],
    /// The lease's owner token.
    pub(crate) token: &'a str,
}

/// One immediate acquisition of a field.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FieldAcquireStep<'a> {
    /// The field and the new lease's token.
    pub(crate) lease: FieldStep<'a>,
    /// Whole milliseconds until the lease expires, from 1 to 2^40.
    pub(crate) lease_ms: u64,
    /// The server time (ms since the epoch) after which the step is a no-op that answers
    /// [`FieldAcquireReply::Late`]; 0 for none.
    pub(crate) not_after_ms: u64,
}

/// The acquisition's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldAcquireReply {
    /// The field is held under the step's token.
    Granted,
    /// Another lease holds the field; nothing changed. `retry_after_ms`: its time left,
    /// `None` when it has no expiry (set by something else than this crate).
    Held { retry_after_ms: Option<u64> },
    /// The step reached the server after its deadline; nothing changed.
    Late,
}

/// Gives the field a new expiry if the token holds it: `true` when renewed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FieldRenewStep<'a> {
    /// The field and its owner token.
    pub(crate) lease: FieldStep<'a>,
    /// Whole milliseconds until the renewed lease expires, from 1 to 2^40.
    pub(crate) lease_ms: u64,
}

/// Whether the token holds the field; changes nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FieldVerifyStep<'a>(pub(crate) FieldStep<'a>);

/// Deletes the field if the token holds it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FieldReleaseStep<'a>(pub(crate) FieldStep<'a>);

impl Step for FieldAcquireStep<'_> {
    const PRIMITIVE: &'static str = "hash_lease";
    const NAME: &'static str = "field_acquire";
    type Reply = FieldAcquireReply;
}

impl Step for FieldRenewStep<'_> {
    const PRIMITIVE: &'static str = "hash_lease";
    const NAME: &'static str = "field_renew";
    type Reply = bool;
}

impl Step for FieldVerifyStep<'_> {
    const PRIMITIVE: &'static str = "hash_lease";
    const NAME: &'static str = "field_verify";
    type Reply = bool;
}

impl Step for FieldReleaseStep<'_> {
    const PRIMITIVE: &'static str = "hash_lease";
    const NAME: &'static str = "field_release";
    type Reply = LeaseReleaseReply;
}
