//! Rate limiters: how many permits a client key may take per unit of time.
//!
//! Each limiter decides in one atomic step on the backend, with the backend's clock, and
//! answers a [`RateLimitDecision`]. Permits are consumptive: nothing is given back.

mod decision;
mod fixed_window;
mod key;
mod limiter;
mod policy;

pub use decision::RateLimitDecision;
pub use fixed_window::FixedWindow;
pub use limiter::RateLimiter;
pub use policy::{QuotaUnit, RateLimitPolicy};
