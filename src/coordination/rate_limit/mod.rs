//! Rate limiters: how many permits a client key may take per unit of time.
//!
//! Each limiter decides in one atomic step on the backend, with the backend's clock, and
//! answers a [`RateLimitDecision`]. Permits are consumptive: nothing is given back (except
//! the unspent permits a [`FixedWindow`]'s hot-key tier reserved, see [`HotKeys`]).
//! [`Stacked`] checks several fixed-window policies on one client key at once (for example
//! 10 per second and 1000 per day), all or nothing. [`RateLimitPlans`] gives one limit
//! several quotas (plans, a default, overrides for single clients), one chosen per request.

mod algorithm;
mod decision;
mod deny_cache;
mod fixed_window;
mod gcra;
mod hot_keys;
mod key;
mod limiter;
mod plans;
mod policy;
mod queue;
mod quota;
mod sliding_window;
pub(crate) mod stacked;
mod statistics;
mod token_bucket;

pub use decision::{PolicyState, RateLimitDecision};
pub use fixed_window::FixedWindow;
pub use gcra::Gcra;
pub use hot_keys::{HotKeyStatistics, HotKeys};
pub use limiter::RateLimiter;
pub(crate) use limiter::{Now, Shortcuts};
pub(crate) use plans::Table as PlanTable;
pub use plans::{
    DEFAULT_OVERRIDE_CACHE, MAX_CUSTOMER_LEN, MAX_PLAN_NAME_LEN, MAX_PLANS, OVERRIDE_POLICY_NAME,
    PlanAlgorithm, PlanChoice, RateLimitPlans, RateLimitPlansBuilder,
};
#[cfg(feature = "serde")]
pub use plans::{DEFAULT_SLIDING_SEGMENTS, RateLimitPlansConfig};
pub(crate) use plans::{Plan, Resolved};
pub(crate) use policy::Policies;
pub use policy::{QuotaUnit, RateLimitPolicy};
pub use queue::QueueOrder;
pub use quota::{Quota, Quotas};
pub use sliding_window::SlidingWindow;
pub use stacked::{MAX_STACKED_POLICIES, Stacked};
pub use statistics::RateLimitStatistics;
pub use token_bucket::{Refill, TokenBucket};

/// Builds a limiter of `kind` named `name` with `checked`, whose error then names the limit:
/// a service has several.
fn named<T>(
    kind: &str,
    name: String,
    checked: impl FnOnce(String) -> crate::error::Result<T>,
) -> crate::error::Result<T> {
    let which = format!("the {kind} {name:?}");
    checked(name).map_err(|err| err.context(which))
}
