//! Quotas that follow the business: named plans over one rate limit's keys, a default, and
//! overrides for single clients, one of them chosen per request.

#[cfg(feature = "serde")]
mod config;
mod overrides;
mod stored;
mod table;

use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;

pub use self::overrides::DEFAULT_OVERRIDE_CACHE;
pub use self::table::MAX_CUSTOMER_LEN;
pub(crate) use self::table::Plan;
pub(crate) use self::table::Table;
use self::table::{Kit, Spec};
use super::{Quotas, RateLimitDecision, RateLimiter};
use crate::Coordination;
use crate::backend::steps::rate_limit_plans::FieldChange;
use crate::error::{Error, Result};
#[cfg(feature = "serde")]
pub use config::{DEFAULT_SLIDING_SEGMENTS, RateLimitPlansConfig};

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
/// assert_eq!(plans.quota("pro"), Some(Quota::per_minute(600).into()));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PlanAlgorithm {
    /// [`FixedWindow`](super::FixedWindow): `limit` per window, counted from the window's first request.
    FixedWindow,
    /// [`SlidingWindow`](super::SlidingWindow) of `segments` segments: `limit` in any window. Its plans share one
    /// window (the segments' length is the limit's), and differ in their limit.
    SlidingWindow {
        /// Segments per window (see [`SlidingWindow::new`](super::SlidingWindow::new)).
        segments: u32,
    },
    /// [`Gcra`](super::Gcra): `limit` per window, evenly spaced, bursts of the quota's burst.
    Gcra,
    /// [`TokenBucket`](super::TokenBucket): a bucket of the quota's burst, `limit` tokens added per window.
    TokenBucket,
    /// [`Stacked`](super::Stacked) fixed windows: a plan is several quotas ([`Quotas`]), one
    /// per window, all checked at once. Every plan has the default plan's windows, in its
    /// order (the state is one count per window, by position), and differs in its limits:
    /// the windows change only with every plan's (one plan left, changed), and then a window's
    /// count is read as the new window's until the old one ends.
    Stacked,
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
///   at the new plan's rate from then on;
/// - **stacked windows**: each window's count so far, against the new plan's limit for that
///   window (plans share the windows).
///
/// After a change, no more than the new quota is admitted per window; in the window of the
/// change, no more than the larger of the two.
///
/// Plans built with [`build`](RateLimitPlansBuilder::build) live in this process;
/// [`build_stored`](RateLimitPlansBuilder::build_stored) keeps them in the backend, where
/// every process follows them and a change made in one reaches the others. Stored plans keep
/// the customers' overrides in the backend too, and each process only the customers its
/// requests met ([`override_cache`](RateLimitPlansBuilder::override_cache)): a million
/// overrides cost each process at most its bound, and a customer's first request there one
/// read.
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

pub(crate) struct Inner {
    kit: Kit,
    table: ArcSwap<Table>,
    /// Where the plans are stored, when they are (see [`build_stored`](RateLimitPlansBuilder::build_stored)).
    store: Option<stored::Store>,
    /// Held while a change made in this process is checked and applied: two at once on
    /// the plans in force would lose one.
    editing: tokio::sync::Mutex<()>,
    /// Held while the stored plans are read and taken: an older read never replaces a
    /// newer one.
    reloading: tokio::sync::Mutex<()>,
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
            spec: Spec::default(),
            override_cache: DEFAULT_OVERRIDE_CACHE,
        }
    }

    /// The limit's name, which its keys carry.
    pub fn name(&self) -> &str {
        &self.inner.kit.name
    }

    /// The default plan's name.
    pub fn default_plan(&self) -> Arc<str> {
        self.inner.table.load().default_plan().name.clone()
    }

    /// The named plans and their quotas, in order (the stored ones by name).
    pub fn plans(&self) -> Vec<(Arc<str>, Quotas)> {
        let table = self.inner.table.load();
        (table.named().iter())
            .map(|plan| (plan.name.clone(), plan.quota.clone()))
            .collect()
    }

    /// The quota of the plan named `plan`, if there is one.
    pub fn quota(&self, plan: &str) -> Option<Quotas> {
        let table = self.inner.table.load();
        (table.named().iter())
            .find(|candidate| &*candidate.name == plan)
            .map(|plan| plan.quota.clone())
    }

    /// The quota that overrides the plans for `customer`, if one does. For stored plans,
    /// read from the store unless this process holds it (see
    /// [`override_cache`](RateLimitPlansBuilder::override_cache)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn customer_override(&self, customer: impl AsRef<[u8]>) -> Result<Option<Quotas>> {
        let customer = customer.as_ref();
        match &self.inner.store {
            None => {
                let table = self.inner.table.load();
                Ok(table.override_of(customer).map(|plan| plan.quota.clone()))
            }
            Some(store) => match store.overrides.get(customer) {
                Some(found) => Ok(found),
                None => self.look_up(store, customer).await,
            },
        }
    }

    /// The version of the stored plan set in force: a count of its writes, the same in
    /// every process once they have read it; 0 for plans never stored.
    pub fn version(&self) -> u64 {
        self.inner.table.load().version
    }

    /// The limiter a request that made `choice` is decided by (see the type's docs); its
    /// [`policies`](RateLimiter::policies) have the plan's name (or
    /// [`OVERRIDE_POLICY_NAME`]) and quota, a stacked plan's one per window as
    /// `<plan>/<window>`. For [`RateLimiter::acquire`]'s waits.
    ///
    /// Fails only for stored plans, when a customer this process does not hold cannot be
    /// looked up (the backend's error).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn limiter(&self, choice: PlanChoice<'_>) -> Result<RateLimiter> {
        let resolved = match self.resolve_now(choice) {
            Resolved::LookUp(customer) => {
                let store = self.store()?;
                let found = match self.look_up(store, customer).await {
                    Ok(found) => found,
                    Err(err) if err.is_unavailable() => self.configured_override(customer),
                    Err(err) => return Err(err),
                };
                self.resolved_with(choice, found)
            }
            resolved => resolved,
        };
        Ok(match resolved {
            Resolved::Plan(table, index) => table.plans()[index].limiter.clone(),
            Resolved::Override(plan) => plan.limiter.clone(),
            Resolved::LookUp(_) => self.default_limiter(),
        })
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
        self.limiter(choice).await?.try_acquire(key, permits).await
    }

    /// What decides a request that made `choice`, from what this process holds:
    /// [`Resolved::LookUp`] when the choice names a customer of stored plans that it does
    /// not hold.
    #[inline]
    pub(crate) fn resolve_now<'a>(&self, choice: PlanChoice<'a>) -> Resolved<'a> {
        let table = self.inner.table.load_full();
        // A customer's name the store cannot hold is no customer: its plan decides, with no
        // read (a request that names random customers cannot churn the cache).
        let customer = choice
            .customer_id()
            .filter(|customer| table::check_customer(customer).is_ok());
        match (&self.inner.store, customer) {
            (Some(store), Some(customer)) => match store.overrides.get(customer) {
                Some(found) => self.resolved_in(table, choice, found),
                None => Resolved::LookUp(customer),
            },
            _ => {
                let index = table.choose(choice);
                Resolved::Plan(table, index)
            }
        }
    }

    /// What decides a request that made `choice`, once its customer's override is known.
    pub(crate) fn resolved_with<'a>(
        &self,
        choice: PlanChoice<'a>,
        found: Option<Quotas>,
    ) -> Resolved<'a> {
        self.resolved_in(self.inner.table.load_full(), choice, found)
    }

    fn resolved_in<'a>(
        &self,
        table: Arc<Table>,
        choice: PlanChoice<'a>,
        found: Option<Quotas>,
    ) -> Resolved<'a> {
        let plan = |table: Arc<Table>| {
            let index = table.choose(PlanChoice::plan_or_default(choice.plan_name()));
            Resolved::Plan(table, index)
        };
        let (Some(quota), Some(store)) = (found, &self.inner.store) else {
            return plan(table);
        };
        let windows = (table.default_plan().quota.as_slice().iter())
            .map(|quota| quota.window())
            .collect();
        match (store.overrides).plan(&quota, windows, || {
            table::override_plan(&self.inner.kit, &quota, &table)
        }) {
            Ok(plan) => Resolved::Override(plan),
            // Stored, then refused by this process's plans (a sliding window's other window):
            // the plan the request names decides.
            Err(_) => plan(table),
        }
    }

    /// Reads `customer`'s override from the store, and keeps the answer (see
    /// [`override_cache`](RateLimitPlansBuilder::override_cache)). Fails with the backend's
    /// error; [`configured_override`](Self::configured_override) then stands in.
    pub(crate) async fn look_up(
        &self,
        store: &stored::Store,
        customer: &[u8],
    ) -> Result<Option<Quotas>> {
        let generation = store.overrides.generation();
        let found = stored::read_override(&self.inner.kit, &store.overrides_key, customer).await?;
        store.overrides.insert(customer, generation, found.clone());
        Ok(found)
    }

    /// `customer`'s override as this process was configured, which stands in while the
    /// store cannot be read.
    pub(crate) fn configured_override(&self, customer: &[u8]) -> Option<Quotas> {
        let store = self.inner.store.as_ref()?;
        store.configured.get(customer).cloned()
    }

    /// The store of stored plans.
    pub(crate) fn store(&self) -> Result<&stored::Store> {
        (self.inner.store.as_ref())
            .ok_or_else(|| Error::invalid_argument("these plans are not stored"))
    }

    /// Sets the plan `name`'s quota, adding the plan if it is new: in this process at once,
    /// and for stored plans in the store, from which every process following it takes the
    /// change (see [`build_stored`](RateLimitPlansBuilder::build_stored)). The clients of the
    /// plan keep their state, which the new quota judges (see the type's docs).
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument), naming
    /// the plan and the quota, when the algorithm refuses the quota (nothing is changed);
    /// with the backend's error when the change could not be stored: an
    /// [unavailable](crate::Error::is_unavailable) backend changes nothing, in this process
    /// or any other, and an [uncertain](crate::Error::is_outcome_uncertain) one may have
    /// stored it (the processes then take it as any change).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped once sent, the change may be stored without this process
    /// taking it until its next read of the store.
    pub async fn set_plan(&self, name: &str, quota: impl Into<Quotas>) -> Result<()> {
        let quota = quota.into();
        let what = format!("setting the plan {name:?} to {quota}");
        let value = Some(quota.to_string().into_bytes());
        self.change(
            |spec| {
                spec.set_plan(name, quota);
                Ok(vec![(stored::plan_field(name), value)])
            },
            what,
        )
        .await
    }

    /// Removes the plan `name`: its requests get the default plan. The default plan cannot
    /// be removed (name another first); a plan there is not is no error. Stored and failing
    /// as [`set_plan`](Self::set_plan).
    ///
    /// # Cancel safety
    ///
    /// As [`set_plan`](Self::set_plan)'s.
    pub async fn remove_plan(&self, name: &str) -> Result<()> {
        self.change(
            |spec| {
                if spec.default_name() == Some(name) {
                    return Err(Error::invalid_argument(
                        "the default plan cannot be removed: name another default first",
                    ));
                }
                spec.plans.retain(|(known, _)| known != name);
                Ok(vec![(stored::plan_field(name), None)])
            },
            format!("removing the plan {name:?}"),
        )
        .await
    }

    /// Makes the plan `name` the default. Stored and failing as
    /// [`set_plan`](Self::set_plan).
    ///
    /// # Cancel safety
    ///
    /// As [`set_plan`](Self::set_plan)'s.
    pub async fn set_default_plan(&self, name: &str) -> Result<()> {
        self.change(
            |spec| {
                spec.default = Some(name.to_owned());
                Ok(vec![stored::default_field(name)])
            },
            format!("making {name:?} the default plan"),
        )
        .await
    }

    /// Sets `customer`'s override (see [`PlanChoice::customer`]). Stored and failing as
    /// [`set_plan`](Self::set_plan).
    ///
    /// # Cancel safety
    ///
    /// As [`set_plan`](Self::set_plan)'s.
    pub async fn set_customer_override(
        &self,
        customer: impl AsRef<[u8]>,
        quota: impl Into<Quotas>,
    ) -> Result<()> {
        let customer = customer.as_ref();
        let quota = quota.into();
        let what = format!(
            "setting the override of {:?} to {quota}",
            String::from_utf8_lossy(customer)
        );
        if let Some(store) = &self.inner.store {
            let context = format!("{what} of the rate-limit plans {:?}", self.name());
            let check = || {
                table::check_customer(customer)?;
                table::override_plan(&self.inner.kit, &quota, &self.inner.table.load())
            };
            check().map_err(|err| err.context(&context))?;
            return stored::write_override(&self.inner.kit, store, customer, Some(quota))
                .await
                .map_err(|err| err.context(&context));
        }
        self.change(
            |spec| {
                spec.overrides.insert(customer.to_vec(), quota);
                Ok(Vec::new())
            },
            what,
        )
        .await
    }

    /// Removes `customer`'s override: its requests get the plan they name again. Stored
    /// and failing as [`set_plan`](Self::set_plan).
    ///
    /// # Cancel safety
    ///
    /// As [`set_plan`](Self::set_plan)'s.
    pub async fn remove_customer_override(&self, customer: impl AsRef<[u8]>) -> Result<()> {
        let customer = customer.as_ref();
        let what = format!(
            "removing the override of {:?}",
            String::from_utf8_lossy(customer)
        );
        if let Some(store) = &self.inner.store {
            let context = format!("{what} of the rate-limit plans {:?}", self.name());
            return stored::write_override(&self.inner.kit, store, customer, None)
                .await
                .map_err(|err| err.context(&context));
        }
        self.change(
            |spec| {
                spec.overrides.remove(customer);
                Ok(Vec::new())
            },
            what,
        )
        .await
    }

    /// One change of the plans in force: `edit` applied to them and checked (every plan
    /// built), then stored, or for plans not stored, put in force here.
    async fn change(
        &self,
        edit: impl FnOnce(&mut Spec) -> Result<Vec<FieldChange>>,
        what: String,
    ) -> Result<()> {
        let context = format!("{what} of the rate-limit plans {:?}", self.name());
        let _editing = self.inner.editing.lock().await;
        let current = self.inner.table.load_full();
        let mut spec = current.spec.clone();
        let changes = edit(&mut spec).map_err(|err| err.context(&context))?;
        let table = Table::build(&self.inner.kit, spec.clone(), current.version)
            .map_err(|err| err.context(&context))?;
        match &self.inner.store {
            None => {
                self.inner.table.store(Arc::new(table));
                Ok(())
            }
            Some(store) => self
                .write(&store.key, &changes, spec)
                .await
                .map_err(|err| err.context(&context)),
        }
    }

    /// The plans in force now.
    pub(crate) fn table(&self) -> arc_swap::Guard<Arc<Table>> {
        self.inner.table.load()
    }

    /// The default plan's limiter.
    pub(crate) fn default_limiter(&self) -> RateLimiter {
        self.inner.table.load().default_plan().limiter.clone()
    }
}

/// What decides a request (see [`RateLimitPlans::resolve_now`]).
pub(crate) enum Resolved<'a> {
    /// The plan at this index of the plans in force (a named plan, or an override kept in
    /// the table).
    Plan(Arc<Table>, usize),
    /// A stored customer's override.
    Override(Arc<Plan>),
    /// A customer of stored plans this process does not hold: to look up.
    LookUp(&'a [u8]),
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
    spec: Spec,
    override_cache: usize,
}

impl RateLimitPlansBuilder {
    /// A plan named `name` with `quota`; the first one given is the default unless
    /// [`default_plan`](Self::default_plan) names another. A name given twice keeps the
    /// later quota.
    pub fn plan(mut self, name: impl Into<String>, quota: impl Into<Quotas>) -> Self {
        self.spec.set_plan(&name.into(), quota.into());
        self
    }

    /// The plan a request that names none (or one there is not) is decided by.
    pub fn default_plan(mut self, name: impl Into<String>) -> Self {
        self.spec.default = Some(name.into());
        self
    }

    /// A quota for one customer (as a [`PlanChoice`] names it), whatever plan its requests
    /// name: a customer's own deal. A customer given twice keeps the later quota. Stored
    /// plans keep the overrides beside the plan set, and each process only those its requests
    /// met (see [`override_cache`](Self::override_cache)).
    pub fn customer_override(
        mut self,
        customer: impl AsRef<[u8]>,
        quota: impl Into<Quotas>,
    ) -> Self {
        self.spec
            .overrides
            .insert(customer.as_ref().to_vec(), quota.into());
        self
    }

    /// How many customers stored plans keep in this process, with their override or the
    /// fact that they have none: [`DEFAULT_OVERRIDE_CACHE`] by default. The first request of
    /// a customer it does not hold reads its override from the store (one read, before the
    /// decision); a full cache gives up an entry for it. Any change to the overrides, made in
    /// any process, empties it in every process. Plans not stored keep every override.
    pub fn override_cache(mut self, customers: usize) -> Self {
        self.override_cache = customers.max(1);
        self
    }

    /// The plans, each quota checked by the algorithm's rules, kept in this process: the
    /// changes made through them ([`RateLimitPlans::set_plan`], ...) are this process's
    /// alone. See [`build_stored`](Self::build_stored) for plans every process shares.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument), naming
    /// the plan (or the override's customer) and the value, when: there is no plan; more
    /// than [`MAX_PLANS`]; a plan name is empty, longer than [`MAX_PLAN_NAME_LEN`] bytes,
    /// made of other than letters, digits, `-`, `_` and `.`, or is [`OVERRIDE_POLICY_NAME`];
    /// a customer's name is empty or longer than [`MAX_CUSTOMER_LEN`] bytes; the default
    /// names no plan; a quota is refused by the algorithm (see its `new`), sets a burst for
    /// a window, or (sliding window) has a window other than the default plan's; or the
    /// limit's name is refused.
    pub fn build(self) -> Result<RateLimitPlans> {
        let (kit, spec) = self.parts();
        let table = built(&kit, spec)?;
        Ok(RateLimitPlans {
            inner: Arc::new(Inner {
                kit,
                table: ArcSwap::from_pointee(table),
                store: None,
                editing: tokio::sync::Mutex::new(()),
                reloading: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// The plans, checked as by [`build`](Self::build), stored in the backend and followed
    /// by every process that builds them so: a change made in one process
    /// ([`RateLimitPlans::set_plan`], ...) is stored, and the others take it within
    /// milliseconds (on Redis, the server pushes an invalidation of the stored set to every
    /// process at each write; the memory backend is read every 50 ms). A check costs no
    /// more than with [`build`](Self::build): the plans are read at each change, not per
    /// request.
    ///
    /// **The stored plans win**: where the backend holds plans for this limit already, they
    /// are taken, and this configuration is only what stands in while the backend cannot
    /// be reached; where it holds none, this configuration is stored. The algorithm and the
    /// limit's name are the configuration's. While the backend is away, the last plans read
    /// stay in force (the fail-open fallback follows them too); once it answers again, the
    /// plans are read again. Plans the backend lost (a server restarted without
    /// persistence) are stored again from the plans in force.
    ///
    /// The stored plan set is one hash with no expiry, `<prefix>rl:plans:<name length>:<name>`,
    /// and the customers' overrides another, `<prefix>rl:plan-overrides:<name length>:<name>`
    /// (held entries on the memory backend): configuration, as a fenced value is data. The
    /// configured overrides are stored where none are (also once the backend answers, for a
    /// process started while it did not, and after the set was lost); while the store cannot
    /// be read, they stand in for a customer this process does not hold.
    ///
    /// Fails as [`build`](Self::build), or with the backend's refusal (an ACL, a script
    /// error; `CorruptState` for a key of another type). A backend that cannot be reached is
    /// no error: the configured plans are in force until it answers. Spawns the follower on
    /// the current runtime, which ends once every clone of the plans is dropped.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it answers, nothing is followed; a seed it sent may have
    /// stored this configuration, which the next build then takes.
    pub async fn build_stored(self) -> Result<RateLimitPlans> {
        let customers = self.override_cache;
        let (kit, spec) = self.parts();
        let which = format!("the rate-limit plans {:?}", &*kit.name);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Err(Error::invalid_argument(
                "stored plans are followed by a task: build them on a Tokio runtime",
            )
            .context(which));
        };
        // Checked with the overrides, which are stored beside the plans rather than in them.
        built(&kit, spec.clone())?;
        let mut plans_only = spec.clone();
        plans_only.overrides.clear();
        let table = built(&kit, plans_only)?;
        let (store, stopped) = stored::store(&kit, customers, spec.overrides.clone());
        let key = store.key.clone();
        let plans = RateLimitPlans {
            inner: Arc::new(Inner {
                kit,
                table: ArcSwap::from_pointee(table),
                store: Some(store),
                editing: tokio::sync::Mutex::new(()),
                reloading: tokio::sync::Mutex::new(()),
            }),
        };
        let seeded = match plans.seed_or_adopt(&key).await {
            Ok(()) => {
                let store = plans.store()?;
                stored::seed_overrides(&plans.inner.kit, store).await
            }
            failed => failed,
        };
        match seeded {
            Ok(()) => {}
            // Redis away, or full: the configured plans stand in until the follower reads
            // the stored ones (or stores these).
            Err(err) if err.is_unavailable() || err.kind() == crate::ErrorKind::OutOfMemory => {
                tracing::warn!(limit = %plans.name(), error = %err, "the stored rate-limit plans cannot be read; the configured plans are in force until they can");
            }
            Err(err) => return Err(err.context(which)),
        }
        runtime.spawn(stored::follow(Arc::downgrade(&plans.inner), stopped));
        Ok(plans)
    }

    fn parts(self) -> (Kit, Spec) {
        let kit = Kit {
            coordination: self.coordination,
            name: Arc::from(self.name.as_str()),
            algorithm: self.algorithm,
        };
        (kit, self.spec)
    }
}

/// The table `spec` says, its errors naming the plans.
fn built(kit: &Kit, spec: Spec) -> Result<Table> {
    Table::build(kit, spec, 0)
        .map_err(|err| err.context(format_args!("the rate-limit plans {:?}", &*kit.name)))
}

impl fmt::Debug for RateLimitPlans {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let table = self.inner.table.load();
        f.debug_struct("RateLimitPlans")
            .field("name", &self.inner.kit.name)
            .field(
                "plans",
                &(table.named().iter())
                    .map(|plan| (&plan.name, plan.quota.to_string()))
                    .collect::<Vec<_>>(),
            )
            .field("default", &table.default_plan().name)
            .field(
                "overrides",
                &match &self.inner.store {
                    None => table.override_count(),
                    Some(store) => store.overrides.held(),
                },
            )
            .field("version", &table.version)
            .field("stored", &self.inner.store.is_some())
            .finish()
    }
}

impl fmt::Debug for RateLimitPlansBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitPlansBuilder")
            .field("name", &self.name)
            .field("algorithm", &self.algorithm)
            .field("plans", &self.spec.plans.len())
            .field("overrides", &self.spec.overrides.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::coordination::rate_limit::Quota;

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
        // Stored as text of whole milliseconds: a window with a part of one would come back
        // another.
        let gcra = RateLimitPlans::builder(&Coordination::memory(), "api", PlanAlgorithm::Gcra)
            .plan("free", Quota::new(1, Duration::from_micros(1500)))
            .build()
            .expect_err("1.5 ms");
        assert!(gcra.to_string().contains("milliseconds"), "{gcra}");
    }

    #[tokio::test]
    async fn a_request_gets_its_override_else_its_plan_else_the_default() {
        let plans = builder()
            .plan("free", Quota::per_minute(5))
            .plan("pro", Quota::per_minute(50))
            .default_plan("pro")
            .customer_override("acme", Quota::per_minute(20))
            .build()
            .expect("valid");
        let limiter =
            async |choice: PlanChoice<'_>| plans.limiter(choice).await.expect("in process");
        let quota = async |choice: PlanChoice<'_>| limiter(choice).await.policy().quota();
        assert_eq!(quota(PlanChoice::plan("free")).await, 5);
        assert_eq!(quota(PlanChoice::plan("gold")).await, 50);
        assert_eq!(quota(PlanChoice::default_plan()).await, 50);
        assert_eq!(quota(PlanChoice::plan("free").customer("acme")).await, 20);
        assert_eq!(quota(PlanChoice::plan("free").customer("other")).await, 5);
        assert_eq!(quota(PlanChoice::default_plan().customer("acme")).await, 20);
        let acme = limiter(PlanChoice::plan("free").customer("acme")).await;
        assert_eq!(acme.policy().name(), OVERRIDE_POLICY_NAME);
        assert_eq!(limiter(PlanChoice::plan("free")).await.name(), "free");
        assert_eq!(&*plans.default_plan(), "pro");
        assert_eq!(plans.quota("free"), Some(Quota::per_minute(5).into()));
        let acme = plans.customer_override("acme").await.expect("in process");
        assert_eq!(acme, Some(Quota::per_minute(20).into()));
    }
}
