//! A quota chosen per request: which plan a request names, and the layer's configuration for
//! each plan.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwapOption;
use http::request::Parts;

use super::config::Config;
use crate::coordination::rate_limit::{
    OVERRIDE_POLICY_NAME, PlanChoice, PlanTable, Quotas, RateLimitPlans,
};
use crate::coordination::rate_limit::{Plan, Resolved};

/// Reads the [`PlanChoice`] of a request (its plan, and its customer), for a layer built with
/// [`RedisRateLimitLayer::plans`](super::RedisRateLimitLayer::plans): from an extension an
/// authentication layer set, a header, or a function of the request. A request that names no
/// plan, or one the plans do not have, gets the default plan; a customer with an override
/// gets its override whatever plan it names.
///
/// Cheap to clone.
///
/// # Example
///
/// ```
/// use leasehold::coordination::rate_limit::PlanChoice;
/// use leasehold::layer::rate_limit::PlanChooser;
///
/// /// What the authentication layer found out about the caller.
/// #[derive(Clone)]
/// struct Account {
///     id: String,
///     plan: String,
/// }
///
/// let by_account = PlanChooser::from_fn(|parts| match parts.extensions.get::<Account>() {
///     Some(account) => PlanChoice::plan(&account.plan).customer(&account.id),
///     None => PlanChoice::default_plan(),
/// });
/// let by_header = PlanChooser::header("x-plan");
///
/// let request = http::Request::builder().header("x-plan", "pro").body(()).unwrap();
/// let (mut parts, ()) = request.into_parts();
/// assert_eq!(by_header.choose(&parts), PlanChoice::plan("pro"));
/// assert_eq!(by_account.choose(&parts), PlanChoice::default_plan());
/// parts.extensions.insert(Account { id: "acme".into(), plan: "free".into() });
/// assert_eq!(by_account.choose(&parts), PlanChoice::plan("free").customer("acme"));
/// ```
#[derive(Clone)]
pub struct PlanChooser(Arc<ChooseFn>);

type ChooseFn = dyn for<'a> Fn(&'a Parts) -> PlanChoice<'a> + Send + Sync;

impl PlanChooser {
    /// The choice a function of the request makes (from an extension, a claim of a token
    /// an earlier layer checked).
    pub fn from_fn<F>(choose: F) -> Self
    where
        F: for<'a> Fn(&'a Parts) -> PlanChoice<'a> + Send + Sync + 'static,
    {
        PlanChooser(Arc::new(choose))
    }

    /// The plan named by the request's header `name` (its value, when it is visible
    /// ASCII); no customer. Only behind something that sets it (a gateway, an
    /// authentication layer): a client that sets it itself chooses its own plan.
    pub fn header(name: &'static str) -> Self {
        PlanChooser::from_fn(move |parts| {
            let value = parts
                .headers
                .get(name)
                .and_then(|value| value.to_str().ok());
            PlanChoice::plan_or_default(value)
        })
    }

    /// The choice the request's extension of type `T` makes (set by an authentication
    /// layer before this one): see [`ChoosesPlan`].
    pub fn extension<T: ChoosesPlan>() -> Self {
        PlanChooser::from_fn(|parts| {
            parts
                .extensions
                .get::<T>()
                .map_or_else(PlanChoice::default_plan, ChoosesPlan::plan_choice)
        })
    }

    /// The choice the request makes.
    pub fn choose<'a>(&self, parts: &'a Parts) -> PlanChoice<'a> {
        (self.0)(parts)
    }
}

/// A request extension that says which plan its request is on (and for which customer), for
/// [`PlanChooser::extension`]: what an authentication layer stores about the caller.
///
/// # Example
///
/// ```
/// use leasehold::coordination::rate_limit::PlanChoice;
/// use leasehold::layer::rate_limit::{ChoosesPlan, PlanChooser};
///
/// #[derive(Clone)]
/// struct Account {
///     id: String,
///     plan: String,
/// }
///
/// impl ChoosesPlan for Account {
///     fn plan_choice(&self) -> PlanChoice<'_> {
///         PlanChoice::plan(&self.plan).customer(&self.id)
///     }
/// }
///
/// let chooser = PlanChooser::extension::<Account>();
/// # let _ = chooser;
/// ```
pub trait ChoosesPlan: Clone + Send + Sync + 'static {
    /// The plan, and the customer, of the request that carries this extension.
    fn plan_choice(&self) -> PlanChoice<'_>;
}

impl fmt::Debug for PlanChooser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlanChooser").finish_non_exhaustive()
    }
}

/// A layer's plans: the chooser, and the layer's configuration for each plan, made from the
/// layer's own when a request first meets the plan, and kept while the plan is unchanged.
pub(crate) struct Plans {
    plans: RateLimitPlans,
    chooser: Option<PlanChooser>,
    /// The configuration of each plan (by its index in the table), and the table it is
    /// for: made again, empty, when the plans in force change.
    configs: ArcSwapOption<Configs>,
    /// Held while `configs` is made for a new table: one request makes it, the others find
    /// it.
    remaking: std::sync::Mutex<()>,
    /// The configurations of stored customers' overrides, by the plan they share (kept
    /// beside it, so that an address is never another plan's).
    override_configs: std::sync::Mutex<HashMap<usize, OverrideConfig>>,
}

/// An override plan and the layer's configuration for it.
type OverrideConfig = (Arc<Plan>, Arc<Config>);

/// How many override plans a layer keeps a configuration for; a new one beyond them takes
/// the place of another.
const MAX_OVERRIDE_CONFIGS: usize = 1_024;

/// The configuration a request is decided under, or what to find out first.
pub(crate) enum Chosen {
    Ready(Arc<Config>),
    /// A customer of stored plans this process does not hold, with the plan it names.
    LookUp {
        customer: Vec<u8>,
        plan: Option<String>,
    },
}

struct Configs {
    table: Arc<PlanTable>,
    by_plan: Vec<OnceLock<Arc<Config>>>,
}

impl Plans {
    pub(crate) fn new(plans: RateLimitPlans) -> Self {
        Self::with(plans, None)
    }

    fn with(plans: RateLimitPlans, chooser: Option<PlanChooser>) -> Self {
        Plans {
            plans,
            chooser,
            configs: ArcSwapOption::empty(),
            remaking: std::sync::Mutex::new(()),
            override_configs: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The plans, the chooser replaced.
    pub(crate) fn choosing(&self, chooser: PlanChooser) -> Self {
        Self::with(self.plans.clone(), Some(chooser))
    }

    /// The same plans and chooser, for a layer whose configuration changed: the plans'
    /// configurations are made again from it.
    pub(crate) fn for_changed_layer(&self) -> Self {
        Self::with(self.plans.clone(), self.chooser.clone())
    }

    /// The plans.
    pub(crate) fn plans(&self) -> &RateLimitPlans {
        &self.plans
    }

    /// The configuration a request is decided under: its plan's, made from `layer`'s; or,
    /// for a customer of stored plans this process does not hold, what to look up first
    /// ([`looked_up`](Self::looked_up)).
    #[inline]
    pub(crate) fn config_for(&self, layer: &Config, parts: &Parts) -> Chosen {
        let choice = self
            .chooser
            .as_ref()
            .map_or_else(PlanChoice::default_plan, |chooser| chooser.choose(parts));
        match self.plans.resolve_now(choice) {
            Resolved::Plan(table, index) => Chosen::Ready(self.config_at(layer, &table, index)),
            Resolved::Override(plan) => Chosen::Ready(self.override_config(layer, &plan)),
            Resolved::LookUp(customer) => Chosen::LookUp {
                customer: customer.to_vec(),
                plan: choice.plan_name().map(str::to_owned),
            },
        }
    }

    /// Reads `customer`'s override from the store (see [`RateLimitPlans`]'s docs).
    pub(crate) async fn look_up(&self, customer: &[u8]) -> crate::Result<Option<Quotas>> {
        let store = self.plans.store()?;
        self.plans.look_up(store, customer).await
    }

    /// The configuration of a request of `customer` naming `plan`, once the customer's
    /// override is known to be `found`; `None` found while the store cannot be read: the
    /// override this process was configured with, if any, else the plan.
    pub(crate) fn config_known(
        &self,
        layer: &Config,
        customer: &[u8],
        plan: Option<&str>,
        found: Option<Quotas>,
    ) -> Arc<Config> {
        let choice = PlanChoice::plan_or_default(plan).customer(customer);
        match self.plans.resolved_with(choice, found) {
            Resolved::Plan(table, index) => self.config_at(layer, &table, index),
            Resolved::Override(plan) => self.override_config(layer, &plan),
            Resolved::LookUp(_) => {
                let table = self.plans.table();
                let index = table.choose(PlanChoice::plan_or_default(plan));
                self.config_at(layer, &table, index)
            }
        }
    }

    /// [`config_known`](Self::config_known) where the store could not answer: the override
    /// this process was configured with stands in.
    pub(crate) fn config_unknown(
        &self,
        layer: &Config,
        customer: &[u8],
        plan: Option<&str>,
    ) -> Arc<Config> {
        let configured = self.plans.configured_override(customer);
        self.config_known(layer, customer, plan, configured)
    }

    /// The configuration of the plan at `index` of `table`.
    fn config_at(&self, layer: &Config, table: &Arc<PlanTable>, index: usize) -> Arc<Config> {
        let configs = self.configs.load();
        if let Some(configs) = &*configs
            && Arc::ptr_eq(&configs.table, table)
        {
            return configs.by_plan[index]
                .get_or_init(|| made(layer, &table.plans()[index]))
                .clone();
        }
        drop(configs);
        let configs = self.remade_for(table);
        configs.by_plan[index]
            .get_or_init(|| made(layer, &table.plans()[index]))
            .clone()
    }

    /// The configuration of a stored customer's override, one per plan the overrides share
    /// (one per distinct quota); a full map gives up an entry for a new one.
    fn override_config(&self, layer: &Config, plan: &Arc<Plan>) -> Arc<Config> {
        let mut configs = self
            .override_configs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let id = Arc::as_ptr(plan) as usize;
        if let Some((kept, config)) = configs.get(&id)
            && Arc::ptr_eq(kept, plan)
        {
            return config.clone();
        }
        let config = made(layer, plan);
        if configs.len() >= MAX_OVERRIDE_CONFIGS
            && let Some(evicted) = configs.keys().next().copied()
        {
            configs.remove(&evicted);
        }
        configs.insert(id, (plan.clone(), config.clone()));
        config
    }

    /// The configurations for `table`: those of the plans it keeps as they were (their
    /// queues, deny caches and fallbacks go on), the others to be made on first use.
    fn remade_for(&self, table: &Arc<PlanTable>) -> Arc<Configs> {
        let _remaking = self
            .remaking
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let old = self.configs.load_full();
        if let Some(old) = &old
            && Arc::ptr_eq(&old.table, table)
        {
            return old.clone();
        }
        let by_plan = (table.plans().iter())
            .map(|plan| {
                let kept = old.as_ref().and_then(|old| {
                    let index = old.table.plans().iter().position(|was| {
                        &*was.name != OVERRIDE_POLICY_NAME
                            && was.name == plan.name
                            && was.quota == plan.quota
                    })?;
                    old.by_plan[index].get().cloned()
                });
                let slot = OnceLock::new();
                if let Some(config) = kept {
                    let _ = slot.set(config);
                }
                slot
            })
            .collect();
        let configs = Arc::new(Configs {
            table: table.clone(),
            by_plan,
        });
        self.configs.store(Some(configs.clone()));
        configs
    }
}

/// The configuration of `plan`: `layer`'s, with the plan's limiter (its queue and deny cache
/// as the layer's), fields, metrics label and fail-open fallback.
fn made(layer: &Config, plan: &Plan) -> Arc<Config> {
    let mut config = layer.clone();
    config.plans = None;
    config.limiter = plan.limiter.with_settings_of(&layer.limiter);
    config.fields = crate::response::headers::RateLimitFields::new(config.limiter.policies());
    config.metrics = crate::telemetry::DecisionMetrics::new(config.limiter.name());
    config.fallback = super::layer::fallback(&config);
    Arc::new(config)
}
