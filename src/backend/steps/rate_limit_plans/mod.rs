//! The stored plan set of [`RateLimitPlans`](crate::coordination::rate_limit::RateLimitPlans):
//! one hash per rate limit's plans, read whole and written change by change, each write
//! counting its `version` field up, so that a process tells a new set from the one it has.
//!
//! Its fields are `version`, `default` (the default plan's name) and `plan:<name>` (a quota
//! as configuration writes it); the customers' overrides are a set of the same shape beside
//! it (`version`, and a quota per customer), read one field at a time. The coordination side
//! reads them.

mod memory;
mod redis;

use crate::backend::steps::Step;

/// The field that counts the set's writes.
pub(crate) const VERSION_FIELD: &[u8] = b"version";

/// Reads the whole plan set at `key`.
#[derive(Clone, Copy)]
pub(crate) struct PlanSetReadStep<'a> {
    /// The user key (the backend applies its prefix).
    pub(crate) key: &'a [u8],
}

/// A plan set's fields, `version` among them; `None` when there is no plan set. A version
/// that is no count (digits) is corrupt state, on both backends.
pub(crate) type StoredPlanSet = Option<Vec<(Vec<u8>, Vec<u8>)>>;

impl Step for PlanSetReadStep<'_> {
    const PRIMITIVE: &'static str = "rate_limit_plans";
    const NAME: &'static str = "plan_set_read";
    type Reply = StoredPlanSet;
}

/// Reads one field of the set at `key`: a customer's override, looked up when a request
/// first names the customer.
#[derive(Clone, Copy)]
pub(crate) struct PlanSetFieldReadStep<'a> {
    /// The user key (the backend applies its prefix).
    pub(crate) key: &'a [u8],
    pub(crate) field: &'a [u8],
}

impl Step for PlanSetFieldReadStep<'_> {
    const PRIMITIVE: &'static str = "rate_limit_plans";
    const NAME: &'static str = "plan_set_field_read";
    type Reply = Option<Vec<u8>>;
}

/// One change of a field: its new value, or `None` to remove it.
pub(crate) type FieldChange = (Vec<u8>, Option<Vec<u8>>);

/// Writes `changes` to the plan set at `key` and counts a new version, where there is one;
/// with `seed`, writes them only where there is none (then they are the whole set).
#[derive(Clone, Copy)]
pub(crate) struct PlanSetWriteStep<'a> {
    /// The user key (the backend applies its prefix).
    pub(crate) key: &'a [u8],
    pub(crate) changes: &'a [FieldChange],
    pub(crate) seed: bool,
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlanSetWritten {
    /// The changes are the set's version `n`.
    Written(u64),
    /// A seed found a plan set, of version `n`: nothing was written.
    Exists(u64),
    /// A change found no plan set: nothing was written (a change alone would make a set of
    /// one field); seed it whole.
    Gone,
}

impl Step for PlanSetWriteStep<'_> {
    const PRIMITIVE: &'static str = "rate_limit_plans";
    const NAME: &'static str = "plan_set_write";
    type Reply = PlanSetWritten;
}
