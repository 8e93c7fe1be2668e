//! What the crate reports about its work: metrics through the [`metrics`](https://docs.rs/metrics)
//! facade (0.24) with the `metrics` feature, and `tracing` spans and events always.
//!
//! # Metrics
//!
//! Nothing is exported by the crate itself: install any `metrics` recorder (a Prometheus
//! exporter, say) **before the first request**, and these appear. Every label is bounded by
//! the application's configuration (limiter names, primitive and step names); no client key
//! is ever a label.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | [`leasehold_rate_limit_decisions_total`](DECISIONS) | counter | `policy`, `decision` | one per check of a rate-limit layer, on every path (the backend, the deny cache, the hot-key tier, the queue, the fail-open fallback, an open circuit); a request dropped before its decision (its client went away) and one whose key cannot be derived are not counted |
//! | [`leasehold_rate_limit_decision_duration_seconds`](DECISION_SECONDS) | histogram | `policy` | from the request's arrival at the layer to its decision |
//! | [`leasehold_concurrency_decisions_total`](CONCURRENCY_DECISIONS) | counter | `limit`, `decision` | one per request a concurrency-limit layer decides, on every path (the backend, the fail-open fallback, an open circuit); a request whose key cannot be derived is not counted |
//! | [`leasehold_concurrency_decision_duration_seconds`](CONCURRENCY_DECISION_SECONDS) | histogram | `limit` | from the request's arrival at the layer to its decision |
//! | [`leasehold_rate_limit_queued_permits`](QUEUED_PERMITS) | gauge | `policy` | permits waiting in the layer's queue (`.wait(...)`) |
//! | [`leasehold_backend_errors_total`](BACKEND_ERRORS) | counter | `primitive`, `step`, `class` | each backend step that failed (a step dropped at its caller's timeout has no outcome, and is not counted: a silent server shows as timeouts, in the decisions and the breaker's state) |
//! | [`leasehold_leases_held`](LEASES_HELD) | gauge | `primitive` | leases and permits this process holds now: handles not yet released, lost or detached (one whose release may have run unanswered counts until it is settled) |
//! | [`leasehold_lease_renewals_total`](RENEWALS) | counter | `primitive`, `outcome` | each renewal of a held lease or permit |
//! | [`leasehold_leases_lost_total`](LEASES_LOST) | counter | `primitive`, `reason` | each managed lease or permit whose ownership signal fired for a loss |
//! | [`leasehold_abandoned_releases_total`](ABANDONED_RELEASES) | counter | `primitive`, `stage`, `cause` | each background release given up (see [`abandoned_releases`](crate::coordination::ownership::abandoned_releases)) |
//! | [`leasehold_circuit_breaker_state`](CIRCUIT_STATE) | gauge | `breaker` | 0 closed, 1 half-open, 2 open |
//!
//! Label values:
//!
//! - `policy`: the rate limiter's name, as given to its constructor (a stacked limiter's
//!   own name, not its policies'); behind plans, the chosen plan's name, or `override` for a
//!   customer's override; `limit`: the concurrency limit's name.
//! - `decision`: `allowed` and `limited` (the backend decided, or the deny cache or hot-key
//!   tier for it), `failed_open` (the backend could not decide and the failure policy
//!   answered in this process: the fail-open fallback admitted the request, or refused it
//!   once its quota was spent), `failed_closed` (`503`: the backend could not decide, or
//!   refused), `shadow_limited` (a rejection let through in
//!   [shadow mode](crate::layer::rate_limit::RedisRateLimitLayer::shadow)). A concurrency
//!   limit's are the same but the last: `allowed` (a permit), `limited` (`429`: every slot
//!   taken), `failed_open` (a local permit, or `429` once the local capacity is taken),
//!   `failed_closed` (`503`).
//! - `primitive`: a step's primitive, by its folder of steps (`fixed_window`,
//!   `sliding_window`, `token_bucket`, `gcra`, `stacked_window`, `semaphore`, `fenced_lock`,
//!   `fenced_value`, `rw_lease`, `hash_lease`, `latch`, `redlock`, `session`, `election`,
//!   `rate_limit_plans`, `server_time`), or a held one (`fenced_lease`, `semaphore_permit`, `read_write_lease`,
//!   `hash_field_lease`, `redlock_lease`, `session`, and `election` for a deposed leader's
//!   `deposed` loss).
//! - `step`: the step, by its name in the crate: `fixed_window`, `fixed_window_reserve`,
//!   `fixed_window_return`, `sliding_window`, `stacked_window`, `token_bucket`, `gcra`;
//!   `semaphore_acquire`, `semaphore_held`, `permit_renew`, `permit_verify`,
//!   `permit_release`; `fenced_acquire`, `lease_renew`, `lease_verify`, `lease_release`,
//!   `fenced_read`, `fenced_write`, `redlock_raise`; `rw_acquire`, `rw_downgrade`,
//!   `rw_renew`, `rw_verify`, `rw_release`; `field_acquire`, `field_renew`,
//!   `field_verify`, `field_release`; `latch_set`, `latch_count_down`, `latch_read`;
//!   `session_grant`, `session_keep_alive`, `session_verify`, `session_revoke`,
//!   `session_put`, `session_get`, `session_delete`, `session_list`, `session_lease`;
//!   `campaign`, `proclaim`, `resign`, `leader`; `plan_set_read`, `plan_set_field_read`,
//!   `plan_set_write`; `server_time`.
//! - `class`: `unavailable`, `refused`, or `uncertain` (it may have applied, whichever of
//!   the two it is: see [`Error::is_outcome_uncertain`](crate::Error::is_outcome_uncertain)).
//! - `outcome`: `renewed`, `lost` (found gone or another's), `failed` (certainly not
//!   applied), `uncertain` (no answer: it may have applied).
//! - `reason`: `not_renewed`, `uncertain`, `lifetime_limit`, `deposed` (see
//!   [`LossReason`](crate::coordination::ownership::LossReason)).
//! - `stage`: `dropped`, `cancelled_release`, `uncertain_acquire`, `late_grant`; `cause`:
//!   `no_runtime`, `unavailable`, `refused`.
//! - `breaker`: the deployment a [`Coordination`](crate::Coordination)'s reaches (its
//!   [`endpoint`](crate::Coordination::endpoint)), the layer's name for a layer's own. The
//!   gauge moves when a breaker changes state, and an open one shows half-open from the
//!   first look after its open time (a request of a layer, an acquisition,
//!   [`circuit_state`](crate::Coordination::circuit_state)) or after the server answered
//!   anything. A breaker that never changed has no series yet. Each handle made by
//!   `connect` has a breaker of its own (its clones share it): two handles on one endpoint
//!   write one series, which shows the last change of either. Share one handle, or give a
//!   layer a breaker of its own, for a series per breaker.
//!
//! Limiters given the same name share their series.
//!
//! # Traces
//!
//! Each backend step runs in a `DEBUG` span named `step`, with `primitive` and `step` fields
//! and its `outcome` (`ok`, `unavailable`, `refused`, `uncertain`). A failed step is an event
//! in it: `ERROR` for a refusal (at most one every ten seconds, the rest at `DEBUG`: a
//! misconfiguration refuses every request), `DEBUG` otherwise (an outage is told at `WARN`
//! once by each layer and handle). A rejection is no event at all above `DEBUG`. A request
//! whose key or lease name the server cannot derive (it records no peer address) is an
//! `ERROR` event likewise at most every ten seconds in the process, the rest at `DEBUG`.

/// `leasehold_rate_limit_decisions_total`: see the [module](self).
pub const DECISIONS: &str = "leasehold_rate_limit_decisions_total";
/// `leasehold_concurrency_decisions_total`: see the [module](self).
pub const CONCURRENCY_DECISIONS: &str = "leasehold_concurrency_decisions_total";
/// `leasehold_concurrency_decision_duration_seconds`: see the [module](self).
pub const CONCURRENCY_DECISION_SECONDS: &str = "leasehold_concurrency_decision_duration_seconds";
/// `leasehold_rate_limit_decision_duration_seconds`: see the [module](self).
pub const DECISION_SECONDS: &str = "leasehold_rate_limit_decision_duration_seconds";
/// `leasehold_rate_limit_queued_permits`: see the [module](self).
pub const QUEUED_PERMITS: &str = "leasehold_rate_limit_queued_permits";
/// `leasehold_backend_errors_total`: see the [module](self).
pub const BACKEND_ERRORS: &str = "leasehold_backend_errors_total";
/// `leasehold_leases_held`: see the [module](self).
pub const LEASES_HELD: &str = "leasehold_leases_held";
/// `leasehold_lease_renewals_total`: see the [module](self).
pub const RENEWALS: &str = "leasehold_lease_renewals_total";
/// `leasehold_leases_lost_total`: see the [module](self).
pub const LEASES_LOST: &str = "leasehold_leases_lost_total";
/// `leasehold_abandoned_releases_total`: see the [module](self).
pub const ABANDONED_RELEASES: &str = "leasehold_abandoned_releases_total";
/// `leasehold_circuit_breaker_state`: see the [module](self).
pub const CIRCUIT_STATE: &str = "leasehold_circuit_breaker_state";

mod circuit;
mod decisions;
mod holdings;
mod steps;
mod throttle;

pub(crate) use circuit::circuit;
pub(crate) use decisions::{Clock, Decided, DecisionMetrics, queued_permits};
pub(crate) use holdings::{Renewal, abandoned, held, lost, renewed};
pub(crate) use steps::observe_step;
pub(crate) use throttle::Throttle;
