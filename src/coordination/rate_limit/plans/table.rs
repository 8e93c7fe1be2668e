//! The plans in force: what a configuration or the stored plan set says (a [`Spec`]), and
//! the table of limiters a request is decided by, built from it and checked.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::{MAX_PLAN_NAME_LEN, MAX_PLANS, OVERRIDE_POLICY_NAME, PlanAlgorithm, PlanChoice};
use crate::Coordination;
use crate::coordination::rate_limit::algorithm::Algorithm;
use crate::coordination::rate_limit::{
    FixedWindow, Gcra, Quota, Quotas, RateLimitPolicy, RateLimiter, Refill, SlidingWindow, Stacked,
    TokenBucket,
};
use crate::error::{Error, Result};

/// The longest customer name of an override, in bytes.
pub const MAX_CUSTOMER_LEN: usize = 256;

/// What a set of plans says: the plans in order, the default's name (`None`: the first
/// plan), each customer's override.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Spec {
    pub(crate) plans: Vec<(String, Quotas)>,
    pub(crate) default: Option<String>,
    pub(crate) overrides: BTreeMap<Vec<u8>, Quotas>,
}

impl Spec {
    /// Sets the plan `name`'s quota, adding the plan at the end if it is new.
    pub(crate) fn set_plan(&mut self, name: &str, quota: Quotas) {
        match self.plans.iter_mut().find(|(known, _)| known == name) {
            Some((_, known)) => *known = quota,
            None => self.plans.push((name.to_owned(), quota)),
        }
    }

    /// The default plan's name.
    pub(crate) fn default_name(&self) -> Option<&str> {
        self.default
            .as_deref()
            .or_else(|| self.plans.first().map(|(name, _)| name.as_str()))
    }
}

/// What every plan of a set is built with: the handle, the limit's name (its keys'), the
/// algorithm.
pub(crate) struct Kit {
    pub(crate) coordination: Coordination,
    pub(crate) name: Arc<str>,
    pub(crate) algorithm: PlanAlgorithm,
}

/// The plans in force, replaced whole when they change.
pub(crate) struct Table {
    /// What they were built from.
    pub(crate) spec: Spec,
    /// The stored plan set's version they are (0: configured, never stored).
    pub(crate) version: u64,
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
    pub(crate) name: Arc<str>,
    pub(crate) quota: Quotas,
    pub(crate) limiter: RateLimiter,
}

impl Table {
    /// The plans `spec` says, each checked by the algorithm's rules; an error names the plan
    /// (or the customer) and its quota.
    pub(crate) fn build(kit: &Kit, spec: Spec, version: u64) -> Result<Table> {
        if spec.plans.is_empty() {
            return Err(Error::invalid_argument("at least one plan is needed"));
        }
        if spec.plans.len() > MAX_PLANS {
            return Err(Error::invalid_argument(format!(
                "at most {MAX_PLANS} plans, not {}",
                spec.plans.len()
            )));
        }
        let default = match &spec.default {
            None => 0,
            Some(name) => spec
                .plans
                .iter()
                .position(|(known, _)| known == name)
                .ok_or_else(|| {
                    Error::invalid_argument(format!("the default plan {name:?} is not a plan"))
                })?,
        };
        let reference = spec.plans[default].1.clone();
        let mut plans = Vec::with_capacity(spec.plans.len() + spec.overrides.len());
        for (name, quota) in &spec.plans {
            check_name(name)?;
            let plan = built(kit, Arc::from(name.as_str()), quota, &reference)
                .map_err(|err| err.context(format_args!("the plan {name:?} ({quota})")))?;
            plans.push(plan);
        }
        let named = plans.len();
        let mut overrides = HashMap::with_capacity(spec.overrides.len());
        for (customer, quota) in &spec.overrides {
            let which = || {
                format!(
                    "the override of the customer {:?} ({quota})",
                    String::from_utf8_lossy(customer)
                )
            };
            check_customer(customer).map_err(|err| err.context(which()))?;
            let plan = built(kit, Arc::from(OVERRIDE_POLICY_NAME), quota, &reference)
                .map_err(|err| err.context(which()))?;
            plans.push(plan);
            overrides.insert(customer.clone().into_boxed_slice(), plans.len() - 1);
        }
        Ok(Table {
            spec,
            version,
            plans,
            named,
            default,
            overrides,
        })
    }

    /// The plans a stored plan set says, each taken on its own: an entry the algorithm
    /// refuses (written by hand, by another service's configuration, or by two changes
    /// each valid alone) is left out with an error in the log rather than failing the rest;
    /// a default that names no plan left keeps `previous` (the default in force) if it is
    /// one, else the first plan. Fails only when no plan is left.
    pub(crate) fn build_lenient(
        kit: &Kit,
        mut spec: Spec,
        version: u64,
        previous: Option<&str>,
    ) -> Result<Table> {
        let named = |name: Option<&str>, spec: &Spec| {
            name.filter(|name| spec.plans.iter().any(|(known, _)| known == name))
                .map(str::to_owned)
        };
        let reference = named(spec.default.as_deref(), &spec)
            .or_else(|| named(previous, &spec))
            .or_else(|| spec.plans.first().map(|(name, _)| name.clone()));
        let reference = reference
            .as_deref()
            .and_then(|name| spec.plans.iter().find(|(known, _)| known == name))
            .map(|(_, quota)| quota.clone())
            .unwrap_or_else(|| Quotas::from(Vec::new()));
        let limit = &*kit.name;
        spec.plans.retain(|(name, quota)| {
            let kept = check_name(name).and_then(|()| built(kit, Arc::from(name.as_str()), quota, &reference));
            if let Err(err) = &kept {
                tracing::error!(limit, plan = %name, %quota, error = %err, "a stored rate-limit plan cannot be used; it is left out");
            }
            kept.is_ok()
        });
        spec.plans.truncate(MAX_PLANS);
        spec.overrides.retain(|customer, quota| {
            let kept = (!customer.is_empty() && customer.len() <= MAX_CUSTOMER_LEN)
                .then(|| built(kit, Arc::from(OVERRIDE_POLICY_NAME), quota, &reference));
            let usable = matches!(kept, Some(Ok(_)));
            if !usable {
                tracing::error!(limit, customer = %String::from_utf8_lossy(customer), %quota, "a stored rate-limit override cannot be used; it is left out");
            }
            usable
        });
        spec.default = named(spec.default.as_deref(), &spec).or_else(|| named(previous, &spec));
        Table::build(kit, spec, version)
    }

    /// The index of the plan a request that made `choice` is decided by: its customer's
    /// override, else the plan it names, else the default.
    #[inline]
    pub(crate) fn choose(&self, choice: PlanChoice<'_>) -> usize {
        if !self.overrides.is_empty()
            && let Some(customer) = choice.customer_id()
            && let Some(index) = self.overrides.get(customer)
        {
            return *index;
        }
        // A few plans, found by their name faster than by a hash of it.
        choice
            .plan_name()
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

    /// The named plans, in order.
    pub(crate) fn named(&self) -> &[Plan] {
        &self.plans[..self.named]
    }

    /// The default plan.
    pub(crate) fn default_plan(&self) -> &Plan {
        &self.plans[self.default]
    }

    /// The override of `customer`, if there is one.
    pub(crate) fn override_of(&self, customer: &[u8]) -> Option<&Plan> {
        self.overrides
            .get(customer)
            .map(|index| &self.plans[*index])
    }

    /// How many customers have an override.
    pub(crate) fn override_count(&self) -> usize {
        self.overrides.len()
    }
}

/// A customer's override of `quota`, checked against the plans of `table` (a sliding
/// window's shares the default plan's window).
pub(crate) fn override_plan(kit: &Kit, quota: &Quotas, table: &Table) -> Result<Plan> {
    built(
        kit,
        Arc::from(OVERRIDE_POLICY_NAME),
        quota,
        &table.default_plan().quota,
    )
}

/// The plan `name` with `quotas`, its limiter over the limit's keys; `reference`: the default
/// plan's (a sliding window's plans share its window, a stacked limiter's its windows).
fn built(kit: &Kit, name: Arc<str>, quotas: &Quotas, reference: &Quotas) -> Result<Plan> {
    let (c, limit) = (&kit.coordination, &*kit.name);
    for quota in quotas.as_slice() {
        // Stored as configuration writes it, which counts whole milliseconds.
        if !quota.window().subsec_nanos().is_multiple_of(1_000_000) {
            return Err(Error::invalid_argument(format!(
                "a plan's window is a whole number of milliseconds, not {:?}",
                quota.window()
            )));
        }
    }
    let stacked = matches!(kit.algorithm, PlanAlgorithm::Stacked);
    if quotas.is_empty() || (!stacked && quotas.len() > 1) {
        return Err(Error::invalid_argument(format!(
            "a plan has one quota (several for a stacked limiter's), not {}",
            quotas.len()
        )));
    }
    let quota = quotas.first();
    let windows_only = || {
        if quotas.as_slice().iter().any(|quota| quota.has_burst()) {
            Err(Error::invalid_argument(
                "a window takes no burst (GCRA and the token bucket do)",
            ))
        } else {
            Ok(())
        }
    };
    let algorithm: Algorithm = match kit.algorithm {
        PlanAlgorithm::FixedWindow => {
            windows_only()?;
            let mut window = FixedWindow::new(c, limit, quota.limit(), quota.window())?;
            // A count another plan may judge holds only what was admitted.
            window.admitted_only = true;
            window.into()
        }
        PlanAlgorithm::SlidingWindow { segments } => {
            windows_only()?;
            let window = reference.first().window();
            if quota.window() != window && !reference.is_empty() {
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
        PlanAlgorithm::Stacked => {
            windows_only()?;
            let windows = |quotas: &Quotas| -> Vec<std::time::Duration> {
                quotas
                    .as_slice()
                    .iter()
                    .map(|quota| quota.window())
                    .collect()
            };
            if !reference.is_empty() && windows(quotas) != windows(reference) {
                return Err(Error::invalid_argument(format!(
                    "a stacked limiter's plans share the default plan's windows, {}",
                    reference
                        .as_slice()
                        .iter()
                        .map(|quota| window_text(*quota))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            // Each window's policy named by its window (`day`, `90s`): `<plan>/day` once shown.
            let policies = quotas.as_slice().iter().map(|quota| {
                RateLimitPolicy::new(window_text(*quota), quota.limit(), quota.window())
            });
            Stacked::new(c, limit, policies)?.into()
        }
    };
    Ok(Plan {
        limiter: RateLimiter::new(algorithm.shown_as(name.clone())),
        name,
        quota: quotas.clone(),
    })
}

/// A quota's window as configuration writes it: `s`, `min`, `day`, `90s`.
fn window_text(quota: Quota) -> String {
    let text = quota.to_string();
    let window = text.split_once('/').map_or("", |(_, rest)| rest);
    window
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// A customer's name, as overrides are stored under it: bounded.
pub(crate) fn check_customer(customer: &[u8]) -> Result<()> {
    if customer.is_empty() || customer.len() > MAX_CUSTOMER_LEN {
        return Err(Error::invalid_argument(format!(
            "a customer's name must have 1 to {MAX_CUSTOMER_LEN} bytes, not {}",
            customer.len()
        )));
    }
    Ok(())
}

/// A plan's name: shown to clients and as a metrics label, so short and printable.
pub(crate) fn check_name(name: &str) -> Result<()> {
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
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(Error::invalid_argument(format!(
            "a plan name is made of letters, digits and - _ ., not {name:?}"
        )));
    }
    Ok(())
}
