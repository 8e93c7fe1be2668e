//! Plans read from configuration (feature `serde`): a quota as text (`100/min`; a stacked
//! plan's several, `10/s, 1000/day`), the
//! algorithm by its name, and the plans of a limit as one table.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, Serializer};

use super::{PlanAlgorithm, RateLimitPlans, RateLimitPlansBuilder};
use crate::Coordination;
use crate::coordination::rate_limit::{Quota, Quotas};

/// The segments of a sliding window read from configuration that names none.
pub const DEFAULT_SLIDING_SEGMENTS: u32 = 10;

impl<'de> Deserialize<'de> for Quota {
    /// A quota as configuration writes it (see [`Quota`'s `FromStr`](Quota#impl-FromStr-for-Quota)).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        from_text(deserializer)
    }
}

impl Serialize for Quota {
    /// As configuration writes it: `100/min`, `10/s burst 20`.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Quotas {
    /// Quotas as configuration writes them, joined by commas (`10/s, 1000/day`).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        from_text(deserializer)
    }
}

impl Serialize for Quotas {
    /// As configuration writes them: `10/s, 1000/day`.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A value read from its text, as configuration writes it.
fn from_text<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: std::str::FromStr<Err = crate::Error>,
{
    let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
    text.parse().map_err(de::Error::custom)
}

impl<'de> Deserialize<'de> for PlanAlgorithm {
    /// `fixed_window`, `sliding_window` (of [`DEFAULT_SLIDING_SEGMENTS`] segments; a
    /// [`RateLimitPlansConfig`] takes `segments` beside it), `gcra`, `token_bucket` or
    /// `stacked`.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        algorithm(&name, None).map_err(de::Error::custom)
    }
}

/// The algorithm `name` names, a sliding window of `segments`.
fn algorithm(name: &str, segments: Option<u32>) -> Result<PlanAlgorithm, String> {
    let algorithm = match name {
        "fixed_window" => PlanAlgorithm::FixedWindow,
        "sliding_window" => PlanAlgorithm::SlidingWindow {
            segments: segments.unwrap_or(DEFAULT_SLIDING_SEGMENTS),
        },
        "gcra" => PlanAlgorithm::Gcra,
        "token_bucket" => PlanAlgorithm::TokenBucket,
        "stacked" => PlanAlgorithm::Stacked,
        other => {
            return Err(format!(
                "the algorithm is one of fixed_window, sliding_window, gcra, token_bucket and \
                 stacked, not {other:?}"
            ));
        }
    };
    if segments.is_some() && !matches!(algorithm, PlanAlgorithm::SlidingWindow { .. }) {
        return Err(format!("segments are a sliding window's, not {name}'s"));
    }
    Ok(algorithm)
}

/// The plans of one limit as configuration states them (feature `serde`), read from any
/// format serde reads (TOML, YAML, JSON, ...):
///
/// ```toml
/// algorithm = "fixed_window"   # or sliding_window (with segments = 10), gcra, token_bucket,
///                              # stacked (each plan "10/s, 1000/day")
/// default = "free"             # the first plan when left out
///
/// [plans]
/// free = "10/min"
/// pro = "100/min"
///
/// [overrides]                  # a customer's own quota, whatever its plan
/// acme = "1000/min"
/// ```
///
/// A quota is written as [`Quota`] reads it (`100/min`, `10/s burst 20`, `5000/day`,
/// `7/90s`); a stacked plan's quotas joined by commas, as [`Quotas`] reads them
/// (`10/s, 1000/day`). An error names the field and the value (`plans.pro: a quota is written ...,
/// not "ten"`); the format adds where it is. The values are checked by the algorithm when
/// the plans are built from it ([`builder`](Self::builder)).
///
/// # Example
///
/// ```
/// use leasehold::Coordination;
/// use leasehold::coordination::rate_limit::{PlanChoice, Quota, RateLimitPlansConfig};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let config: RateLimitPlansConfig = serde_json::from_str(
///     r#"{ "algorithm": "gcra", "plans": { "free": "1/s burst 5", "pro": "20/s burst 40" } }"#,
/// )?;
/// let plans = config.builder(&Coordination::memory(), "api").build()?;
/// assert_eq!(plans.quota("pro"), Some(Quota::per_second(20).with_burst(40).into()));
/// assert_eq!(&*plans.default_plan(), "free");
///
/// let wrong = serde_json::from_str::<RateLimitPlansConfig>(
///     r#"{ "algorithm": "gcra", "plans": { "free": "ten a second" } }"#,
/// );
/// let message = wrong.unwrap_err().to_string();
/// assert!(message.contains("plans.free") && message.contains("ten a second"), "{message}");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateLimitPlansConfig {
    /// The algorithm every plan runs.
    pub algorithm: PlanAlgorithm,
    /// The default plan's name; `None`: the first plan.
    pub default: Option<String>,
    /// The plans, in the order they were written.
    pub plans: Vec<(String, Quotas)>,
    /// Each customer's override.
    pub overrides: Vec<(String, Quotas)>,
}

impl RateLimitPlansConfig {
    /// A builder of these plans for the limit `name`, to build as plans of this process
    /// ([`build`](RateLimitPlansBuilder::build)) or stored ones
    /// ([`build_stored`](RateLimitPlansBuilder::build_stored)).
    pub fn builder(
        &self,
        coordination: &Coordination,
        name: impl Into<String>,
    ) -> RateLimitPlansBuilder {
        let mut builder = RateLimitPlans::builder(coordination, name, self.algorithm);
        for (plan, quota) in &self.plans {
            builder = builder.plan(plan.as_str(), quota.clone());
        }
        if let Some(default) = &self.default {
            builder = builder.default_plan(default.as_str());
        }
        for (customer, quota) in &self.overrides {
            builder = builder.customer_override(customer, quota.clone());
        }
        builder
    }
}

impl<'de> Deserialize<'de> for RateLimitPlansConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ConfigVisitor)
    }
}

struct ConfigVisitor;

impl<'de> Visitor<'de> for ConfigVisitor {
    type Value = RateLimitPlansConfig;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a limit's plans: algorithm, plans, and optionally default and overrides")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut algorithm_name: Option<String> = None;
        let mut segments: Option<u32> = None;
        let mut default = None;
        let mut plans = None;
        let mut overrides = None;
        while let Some(field) = map.next_key::<String>()? {
            match field.as_str() {
                "algorithm" => algorithm_name = Some(map.next_value()?),
                "segments" => segments = Some(map.next_value()?),
                "default" => default = Some(map.next_value()?),
                "plans" => plans = Some(map.next_value::<QuotaTable>()?.named("plans")?),
                "overrides" => {
                    overrides = Some(map.next_value::<QuotaTable>()?.named("overrides")?)
                }
                other => {
                    return Err(de::Error::unknown_field(
                        other,
                        &["algorithm", "segments", "default", "plans", "overrides"],
                    ));
                }
            }
        }
        let algorithm_name = algorithm_name.ok_or_else(|| de::Error::missing_field("algorithm"))?;
        let algorithm = algorithm(&algorithm_name, segments)
            .map_err(|err| de::Error::custom(format_args!("algorithm: {err}")))?;
        Ok(RateLimitPlansConfig {
            algorithm,
            default,
            plans: plans.ok_or_else(|| de::Error::missing_field("plans"))?,
            overrides: overrides.unwrap_or_default(),
        })
    }
}

/// A table of quotas by name, in its order; each quota as text until it is named, so that
/// an error says which.
struct QuotaTable(Vec<(String, String)>);

impl QuotaTable {
    /// The quotas, an error naming `section.<name>` and the value.
    fn named<E: de::Error>(self, section: &str) -> Result<Vec<(String, Quotas)>, E> {
        self.0
            .into_iter()
            .map(|(name, text)| match text.parse::<Quotas>() {
                Ok(quota) => Ok((name, quota)),
                Err(err) => Err(E::custom(format_args!("{section}.{name}: {err}"))),
            })
            .collect()
    }
}

impl<'de> Deserialize<'de> for QuotaTable {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct QuotasVisitor;
        impl<'de> Visitor<'de> for QuotasVisitor {
            type Value = QuotaTable;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table of quotas by name, such as free = \"10/min\"")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<QuotaTable, A::Error> {
                let mut quotas = Vec::new();
                while let Some((name, text)) = map.next_entry::<String, String>()? {
                    quotas.push((name, text));
                }
                Ok(QuotaTable(quotas))
            }
        }
        deserializer.deserialize_map(QuotasVisitor)
    }
}
