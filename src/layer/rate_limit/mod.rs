//! Rate limiting as a tower layer: `429 Too Many Requests` with `Retry-After` and the IETF
//! `RateLimit` fields, decided in Redis and shared by every replica.
//!
//! See [`RedisRateLimitLayer`].

mod answer;
mod check;
mod config;
mod future;
mod info;
mod layer;
mod partition;
mod plan;
mod service;
mod shadow;

pub use future::ResponseFuture;
#[cfg(feature = "axum")]
pub use info::MissingRateLimitInfo;
pub use info::RateLimitInfo;
pub use layer::{DEFAULT_DECISION_TIMEOUT, DEFAULT_FALLBACK_KEYS, RedisRateLimitLayer};
pub use plan::{ChoosesPlan, PlanChooser};
pub use service::RateLimit;
pub use shadow::{ShadowSwitch, set_shadow_mode, shadow_mode};
