//! Quotas that follow the business: named plans over one rate limit's keys, a default, and
//! overrides for single clients, one of them chosen per request.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::algorithm::Algorithm;
use super::{
    FixedWindow, Gcra, Quota, RateLimitDecision, RateLimiter, Refill, SlidingWindow, TokenBucket,
};
use crate::Coordination;
use crate::error::{Error, Result};

/// The most plans one [`RateLimitPlans`] holds: their names are the bounded `policy` label of
/// the [metrics](crate::telemetry), and a request's plan is found by its name among them.
pub const MAX_PLANS: usize = 64;

/// The longest plan name, in bytes.
pub const MAX_PLAN_NAME_LEN: usize = 64;

/// The policy name an override is shown under, in the `RateLimit` fields and the metrics.
pub const OVERRIDE_POLICY_NAME: &str = "override";

/// The algorithm every plan of a [`RateLimitPlans`] runs. One for all of them: a client's
/// state is kept once, under the limit's name, whatever plan decides it, so that a client
/// whose plan changes keeps what it has spent.
///
/// # Example
///
/// ```
/// use leasehold::Coordination;
/// use leasehold::coordination::rate_limit::{PlanAlgorithm, Quota, RateLimitPlans};
///
/// # fn main() -> leasehold::Result<()> {
/// let plans = RateLimitPlans::builder(
///     &Coordination::memory(),
///     "search",
///     PlanAlgorithm::SlidingWindow { segments: 6 },
/// )
/// .plan("free", Quota::per_minute(30))
/// .plan("pro", Quota::per_minute(600))
/// .build()?;
/// assert_eq!(plans.quota("pro"), Some(Quota::per_minute(600)));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PlanAlgorithm {
    /// [`FixedWindow`]: `limit` per window, counted from the window's first request.
    FixedWindow,
    /// [`SlidingWindow`] of `segments` segments: `limit` in any window. Its plans share one
    /// window (the segments' length is the limit's), and differ in their limit.
    SlidingWindow {
        /// Segments per window (see [`SlidingWindow::new`]).
        segments: u32,
    },
    /// [`Gcra`]: `limit` per window, evenly spaced, bursts of the quota's burst.
    Gcra,
    /// [`TokenBucket`]: a bucket of the quota's burst, `limit` tokens added per window.
    TokenBucket,
}

/// What a request names for [`RateLimitPlans`]: its plan, and the customer whose override
/// applies if it has one. Copy, and borrowed from the request: choosing costs no allocation.
///
/// # Example
///
/// ```
/// use leasehold::coordination::rate_limit::PlanChoice;
///
/// let anonymous = PlanChoice::default_plan();
/// assert_eq!(anonymous.plan_name(), None);
/// let acme = PlanChoice::plan("pro").customer("acme");
/// assert_eq!(acme.plan_name(), Some("pro"));
/// assert_eq!(acme.customer_id(), Some(&b"acme"[..]));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PlanChoice<'a> {
    plan: Option<&'a str>,
    customer: Option<&'a [u8]>,
}

impl<'a> PlanChoice<'a> {
    /// The default plan, no customer.
    pub const fn default_plan() -> Self {
        PlanChoice {
            plan: None,
            customer: None,
        }
    }

    /// The plan named `name` (the default plan when there is none of that name).
    pub const fn plan(name: &'a str) -> Self {
        PlanChoice {
            plan: Some(name),
            customer: None,
        }
    }

    /// The plan named `name`, if any: the default plan for `None`.
    pub const fn plan_or_default(name: Option<&'a str>) -> Self {
        PlanChoice {
            plan: name,
            customer: None,
        }
    }

    /// The same choice for `customer`, whose override (if it has one) applies instead.
    pub fn customer(mut self, customer: &'a (impl AsRef<[u8]> + ?Sized)) -> Self {
        self.customer = Some(customer.as_ref());
        self
    }

    /// The plan named, if any.
    pub const fn plan_name(&self) -> Option<&'a str> {
        self.plan
    }

    /// The customer named, if any.
    pub const fn customer_id(&self) -> Option<&'a [u8]> {
        self.customer
    }
}

/// Named quotas for one rate limit: plans (free, pro, ...), a default plan, and overrides for
/// single customers. Each request is decided under one of them, by the [`PlanChoice`] it
/// makes (read from it by a layer's
/// [`choose_plan`](crate::layer::rate_limit::RedisRateLimitLayer::choose_plan), or given to
/// [`try_acquire`](Self::try_acquire)): its customer's override if there is one, else the plan
/// it names, else the default.
///
/// Every plan runs one algorithm over one set of keys (the limit's name and the client key,
/// as a limiter of that name keeps them): a client whose plan changes keeps its state, which
/// the new plan's quota then judges. What that state means under a new quota, per algorithm:
///
/// - **fixed window**: the window's count so far, against the new limit; the window ends
///   when it would have (its length is the plan's that started it);
/// - **sliding window**: the counts of the segments so far, weighed as always, against the
///   new limit (plans share the window);
/// - **GCRA**: the theoretical arrival time carries over, and the new plan's spacing and
///   burst apply from it;
/// - **token bucket**: the tokens left carry over (at most the new bucket's size), refilled
///   at the new plan's rate from then on.
///
/// After a change, no more than the new quota is admitted per window; in the window of the
/// change, no more than the larger of the two.
///
/// Cheap to clone: clones share the plans.
///
/// # Example
///
/// ```
/// use leasehold::Coordination;
/// use leasehold::coordination::rate_limit::{PlanAlgorithm, PlanChoice, Quota, RateLimitPlans};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let coordination = Coordination::memory();
/// let plans = RateLimitPlans::builder(&coordination, "api", PlanAlgorithm::FixedWindow)
///     .plan("free", Quota::per_minute(2))
///     .plan("pro", Quota::per_minute(50))
///     .customer_override("acme", Quota::per_minute(20))
///     .build()?;
///
/// // The first plan is the default: a request that names no plan (or an unknown one) gets it.
/// let free = PlanChoice::plan("free");
/// assert!(plans.try_acquire(PlanChoice::default_plan(), b"alice", 1).await?.is_granted());
/// assert!(plans.try_acquire(free, b"alice", 1).await?.is_granted());
/// assert!(!plans.try_acquire(free, b"alice", 1).await?.is_granted());
/// // Upgraded, alice keeps her count: 2 of pro's 50 spent.
/// assert_eq!(plans.try_acquire(PlanChoice::plan("pro"), b"alice", 1).await?.remaining(), 47);
/// // A customer's override wins over the plan a request names.
/// let acme = PlanChoice::plan("free").customer("acme");
/// assert_eq!(plans.try_acquire(acme, b"key-of-acme", 1).await?.remaining(), 19);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RateLimitPlans {
    inner: Arc<Inner>,
}

struct Inner {
    name: Arc<str>,
    table: ArcSwap<Table>,
}

/// The plans in force, replaced whole when they change.
pub(crate) struct Table {
    /// The plans, then the overrides: a request is decided by one of them, by its index.
    plans: Vec<Plan>,
    /// How many of them are named plans; the overrides follow.
    named: usize,
    default: usize,
    /// Each customer's override, by index.
    overrides: HashMap<Box<[u8]>, usize>,
}

/// One quota and the limiter that decides under it.
pub(crate) struct Plan {
    name: Arc<str>,
    quota: Quota,
    limiter: RateLimiter,
}

impl Plan {
    /// The limiter that decides under this plan.
    pub(crate) fn limiter(&self) -> &RateLimiter {
        &self.limiter
    }
}

impl Table {
    /// The index of the plan a request that made `choice` is decided by: its customer's
    /// override, else the plan it names, else the default.
    #[inline]
    pub(crate) fn choose(&self, choice: PlanChoice<'_>) -> usize {
        if !self.overrides.is_empty()
            && let Some(customer) = choice.customer
            && let Some(index) = self.overrides.get(customer)
        {
            return *index;
        }
        // A few plans, found by their name faster than by a hash of it.
        choice
            .plan
            .and_then(|wanted| {
                self.plans[..self.named]
                    .iter()
                    .position(|plan| &*plan.name == wanted)
            })
            .unwrap_or(self.default)
    }

    /// Every plan and override, in index order.
    pub(crate) fn plans(&self) -> &[Plan] {
        &self.plans
    }
}

impl RateLimitPlans {
    /// Starts a set of plans for the limit `name` (which separates its keys from other
    /// limits', as a limiter's name does), each run by `algorithm`.
    pub fn builder(
        coordination: &Coordination,
        name: impl Into<String>,
        algorithm: PlanAlgorithm,
    ) -> RateLimitPlansBuilder {
        RateLimitPlansBuilder {
            coordination: coordination.clone(),
            name: name.into(),
            algorithm,
            plans: Vec::new(),
            default: None,
            overrides: Vec::new(),
        }
    }

    /// The limit's name, which its keys carry.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The default plan's name.
    pub fn default_plan(&self) -> Arc<str> {
        let table = self.inner.table.load();
        table.plans[table.default].name.clone()
    }

    /// The named plans and their quotas, in the order they were given.
    pub fn plans(&self) -> Vec<(Arc<str>, Quota)> {
        let table = self.inner.table.load();
        table.plans[..table.named]
            .iter()
            .map(|plan| (plan.name.clone(), plan.quota))
            .collect()
    }

    /// The quota of the plan named `plan`, if there is one.
    pub fn quota(&self, plan: &str) -> Option<Quota> {
        let table = self.inner.table.load();
        table.plans[..table.named]
            .iter()
            .find(|candidate| &*candidate.name == plan)
            .map(|plan| plan.quota)
    }

    /// The quota that overrides the plans for `customer`, if one does.
    pub fn customer_override(&self, customer: impl AsRef<[u8]>) -> Option<Quota> {
        let table = self.inner.table.load();
        (table.overrides.get(customer.as_ref())).map(|index| table.plans[*index].quota)
    }

    /// The limiter a request that made `choice` is decided by (see the type's docs); its
    /// [`policy`](RateLimiter::policy) has the plan's name (or [`OVERRIDE_POLICY_NAME`])
    /// and quota. For [`RateLimiter::acquire`]'s waits.
    pub fn limiter(&self, choice: PlanChoice<'_>) -> RateLimiter {
        let table = self.inner.table.load();
        table.plans[table.choose(choice)].limiter.clone()
    }

    /// Asks for `permits` permits for the client `key` now, under the plan `choice` gets
    /// (see the type's docs), without waiting.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: once sent, the permits may be consumed even if the future is dropped.
    pub async fn try_acquire(
        &self,
        choice: PlanChoice<'_>,
        key: &[u8],
        permits: u64,
    ) -> Result<RateLimitDecision> {
        self.limiter(choice).try_acquire(key, permits).await
    }

    /// The plans in force now.
    pub(crate) fn table(&self) -> arc_swap::Guard<Arc<Table>> {
        self.inner.table.load()
    }

    /// The default plan's limiter.
    pub(crate) fn default_limiter(&self) -> RateLimiter {
        let table = self.inner.table.load();
        table.plans[table.default].limiter.clone()
    }
}

/// Builds a [`RateLimitPlans`]: see [`RateLimitPlans::builder`].
///
/// # Example
///
/// ```
/// use leasehold::Coordination;
/// use leasehold::coordination::rate_limit::{PlanAlgorithm, Quota, RateLimitPlans};
///
/// # fn main() -> leasehold::Result<()> {
/// let plans = RateLimitPlans::builder(&Coordination::memory(), "api", PlanAlgorithm::Gcra)
///     .plan("free", Quota::per_second(1).with_burst(5))
///     .plan("pro", Quota::per_second(20).with_burst(40))
///     .default_plan("free")
///     .customer_override("acme", Quota::per_second(100))
///     .build()?;
/// assert_eq!(&*plans.default_plan(), "free");
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until built"]
pub struct RateLimitPlansBuilder {
    coordination: Coordination,
    name: String,
    algorithm: PlanAlgorithm,
    plans: Vec<(String, Quota)>,
    default: Option<String>,
    overrides: Vec<(Vec<u8>, Quota)>,
}

impl RateLimitPlansBuilder {
    /// A plan named `name` with `quota`; the first one given is the default unless
    /// [`default_plan`](Self::default_plan) names another. A name given twice keeps the
    /// later quota.
    pub fn plan(mut self, name: impl Into<String>, quota: Quota) -> Self {
        let name = name.into();
        match self.plans.iter_mut().find(|(known, _)| *known == name) {
            Some((_, known)) => *known = quota,
            None => self.plans.push((name, quota)),
        }
        self
    }

    /// The plan a request that names none (or one there is not) is decided by.
    pub fn default_plan(mut self, name: impl Into<String>) -> Self {
        self.default = Some(name.into());
        self
    }

    /// A quota for one customer (as a [`PlanChoice`] names it), whatever plan its requests
    /// name: a customer's own deal. A customer given twice keeps the later quota.
    pub fn customer_override(mut self, customer: impl AsRef<[u8]>, quota: Quota) -> Self {
        let customer = customer.as_ref();
        match self
            .overrides
            .iter_mut()
            .find(|(known, _)| known == customer)
        {
            Some((_, known)) => *known = quota,
            None => self.overrides.push((customer.to_vec(), quota)),
        }
        self
    }

    /// The plans, each quota checked by the algorithm's rules.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument), naming
    /// the plan (or the override's customer) and the value, when: there is no plan; more than
    /// [`MAX_PLANS`]; a name is empty or longer than [`MAX_PLAN_NAME_LEN`] bytes, or is
    /// [`OVERRIDE_POLICY_NAME`]; the default names no plan; a quota is refused by the
    /// algorithm (see its `new`), or sets a burst for a window, or (sliding window) has a
    /// window other than the default plan's; or the limit's name is refused.
    pub fn build(self) -> Result<RateLimitPlans> {
        let which = format!("the rate-limit plans {:?}", self.name);
        self.checked().map_err(|err| err.context(which))
    }

    fn checked(self) -> Result<RateLimitPlans> {
        if self.plans.is_empty() {
            return Err(Error::invalid_argument("at least one plan is needed"));
        }
        if self.plans.len() > MAX_PLANS {
            return Err(Error::invalid_argument(format!(
                "at most {MAX_PLANS} plans, not {}",
                self.plans.len()
            )));
        }
        let default = match &self.default {
            None => 0,
            Some(name) => self
                .plans
                .iter()
                .position(|(known, _)| known == name)
                .ok_or_else(|| {
                    Error::invalid_argument(format!("the default plan {name:?} is not a plan"))
                })?,
        };
        let window = self.plans[default].1.window();
        let mut plans = Vec::with_capacity(self.plans.len() + self.overrides.len());
        for (name, quota) in &self.plans {
            check_name(name)?;
            plans.push(
                self.built(Arc::from(name.as_str()), *quota, window)
                    .map_err(|err| err.context(format_args!("the plan {name:?} ({quota})")))?,
            );
        }
        let named = plans.len();
        let mut overrides = HashMap::with_capacity(self.overrides.len());
        for (key, quota) in &self.overrides {
            plans.push(
                self.built(Arc::from(OVERRIDE_POLICY_NAME), *quota, window)
                    .map_err(|err| {
                        err.context(format_args!(
                            "the override of the customer {:?} ({quota})",
                            String::from_utf8_lossy(key)
                        ))
                    })?,
            );
            overrides.insert(key.clone().into_boxed_slice(), plans.len() - 1);
        }
        Ok(RateLimitPlans {
            inner: Arc::new(Inner {
                name: Arc::from(self.name.as_str()),
                table: ArcSwap::from_pointee(Table {
                    plans,
                    named,
                    default,
                    overrides,
                }),
            }),
        })
    }

    /// The plan `name` with `quota`, its limiter over the limit's keys; `window`: the
    /// default plan's.
    fn built(&self, name: Arc<str>, quota: Quota, window: std::time::Duration) -> Result<Plan> {
        let (c, limit) = (&self.coordination, self.name.as_str());
        let windows_only = || {
            if quota.has_burst() {
                Err(Error::invalid_argument(
                    "a window takes no burst (GCRA and the token bucket do)",
                ))
            } else {
                Ok(())
            }
        };
        let algorithm: Algorithm = match self.algorithm {
            PlanAlgorithm::FixedWindow => {
                windows_only()?;
                let mut window = FixedWindow::new(c, limit, quota.limit(), quota.window())?;
                // A count another plan may judge holds only what was admitted.
                window.admitted_only = true;
                window.into()
            }
            PlanAlgorithm::SlidingWindow { segments } => {
                windows_only()?;
                if quota.window() != window {
                    return Err(Error::invalid_argument(format!(
                        "a sliding window's plans share the default plan's window, {window:?}"
                    )));
                }
                SlidingWindow::new(c, limit, quota.limit(), quota.window(), segments)?.into()
            }
            PlanAlgorithm::Gcra => {
                Gcra::new(c, limit, quota.limit(), quota.window(), quota.burst())?.into()
            }
            PlanAlgorithm::TokenBucket => {
                let refill = Refill::new(quota.limit(), quota.window());
                TokenBucket::new(c, limit, quota.burst(), refill)?.into()
            }
        };
        Ok(Plan {
            limiter: RateLimiter::new(algorithm.shown_as(name.clone())),
            name,
            quota,
        })
    }
}

/// A plan's name: shown to clients and as a metrics label, so short and printable.
fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_PLAN_NAME_LEN {
        return Err(Error::invalid_argument(format!(
            "a plan name must have 1 to {MAX_PLAN_NAME_LEN} bytes, not {} ({name:?})",
            name.len()
        )));
    }
    if name == OVERRIDE_POLICY_NAME {
        return Err(Error::invalid_argument(format!(
            "{OVERRIDE_POLICY_NAME:?} names the overrides, not a plan"
        )));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
    {
        return Err(Error::invalid_argument(format!(
            "a plan name is made of letters, digits and - _ . :, not {name:?}"
        )));
    }
    Ok(())
}

impl fmt::Debug for RateLimitPlans {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let table = self.inner.table.load();
        f.debug_struct("RateLimitPlans")
            .field("name", &self.inner.name)
            .field(
                "plans",
                &table.plans[..table.named]
                    .iter()
                    .map(|plan| (&plan.name, plan.quota.to_string()))
                    .collect::<Vec<_>>(),
            )
            .field("default", &table.plans[table.default].name)
            .field("overrides", &table.overrides.len())
            .finish()
    }
}

impl fmt::Debug for RateLimitPlansBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitPlansBuilder")
            .field("name", &self.name)
            .field("algorithm", &self.algorithm)
            .field("plans", &self.plans.len())
            .field("overrides", &self.overrides.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn builder() -> RateLimitPlansBuilder {
        RateLimitPlans::builder(&Coordination::memory(), "api", PlanAlgorithm::FixedWindow)
    }

    #[test]
    fn an_invalid_plan_is_refused_by_its_name_and_value() {
        let err = builder()
            .plan("free", Quota::per_minute(5))
            .plan("pro", Quota::per_minute(0))
            .build()
            .expect_err("a limit of 0");
        let message = err.to_string();
        assert!(message.contains("\"pro\""), "{message}");
        assert!(message.contains("0/min"), "{message}");
        assert!(message.contains("\"api\""), "{message}");

        let err = builder()
            .plan("free", Quota::per_minute(5).with_burst(10))
            .build()
            .expect_err("a window with a burst");
        assert!(err.to_string().contains("burst"), "{err}");
        assert!(builder().build().is_err(), "no plan");
        assert!(
            builder()
                .plan("free", Quota::per_minute(5))
                .default_plan("gold")
                .build()
                .is_err()
        );
        for name in ["", "override", "a b", &"x".repeat(65)] {
            assert!(
                builder().plan(name, Quota::per_minute(5)).build().is_err(),
                "{name:?}"
            );
        }
        let sliding = RateLimitPlans::builder(
            &Coordination::memory(),
            "api",
            PlanAlgorithm::SlidingWindow { segments: 6 },
        )
        .plan("free", Quota::per_minute(6))
        .plan("pro", Quota::new(60, Duration::from_secs(120)))
        .build()
        .expect_err("another window");
        assert!(sliding.to_string().contains("window"), "{sliding}");
    }

    #[test]
    fn a_request_gets_its_override_else_its_plan_else_the_default() {
        let plans = builder()
            .plan("free", Quota::per_minute(5))
            .plan("pro", Quota::per_minute(50))
            .default_plan("pro")
            .customer_override("acme", Quota::per_minute(20))
            .build()
            .expect("valid");
        let quota = |choice: PlanChoice<'_>| plans.limiter(choice).policy().quota();
        assert_eq!(quota(PlanChoice::plan("free")), 5);
        assert_eq!(quota(PlanChoice::plan("gold")), 50);
        assert_eq!(quota(PlanChoice::default_plan()), 50);
        assert_eq!(quota(PlanChoice::plan("free").customer("acme")), 20);
        assert_eq!(quota(PlanChoice::plan("free").customer("other")), 5);
        assert_eq!(quota(PlanChoice::default_plan().customer("acme")), 20);
        let acme = plans.limiter(PlanChoice::plan("free").customer("acme"));
        assert_eq!(acme.policy().name(), OVERRIDE_POLICY_NAME);
        assert_eq!(plans.limiter(PlanChoice::plan("free")).name(), "free");
        assert_eq!(&*plans.default_plan(), "pro");
        assert_eq!(plans.quota("free"), Some(Quota::per_minute(5)));
        assert_eq!(plans.customer_override("acme"), Some(Quota::per_minute(20)));
    }
}
