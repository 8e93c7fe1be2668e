//! The step protocol: every primitive's atomic steps, one folder per primitive.
//!
//! A step is a plain value (its keys and arguments) that implements [`Step`] (its reply
//! type), [`RedisStep`] (how Redis runs it) and [`MemoryStep`] (how the memory backend runs
//! it). Coordination builds a step and hands it to [`Backend::run`], the one place that
//! chooses how a step runs; how it travels (deadlines, resends, watches, the server's clock)
//! is the other seam, [`Delivery`](super::delivery::Delivery), chosen in one place too.
//! Nothing above the backend matches on its variants, and the shared backend types hold no
//! primitive's code.
//!
//! Each primitive's folder holds all of its backend code:
//!
//! - `mod.rs`: the step and reply types, with the rules both backends keep, and their
//!   [`Step`] implementations;
//! - `redis.rs`, the [`RedisStep`] implementations, and its `.lua` scripts, each declared
//!   with `script!` (whether it only reads, its name, its files) and answering in the one
//!   reply convention of `backend::redis::script_reply` (status first, one shape for
//!   corrupt state), which [`RedisBackend::script_outcome`] (or `script_reply`, for a
//!   script that may pack its answer into an integer) evaluates and decodes in one call;
//! - `memory.rs`: the [`MemoryStep`] implementations, the same steps on the in-process
//!   store with the same answers.

pub(crate) mod election;
pub(crate) mod fenced_lock;
pub(crate) mod fenced_value;
pub(crate) mod fencing_counter;
pub(crate) mod fixed_window;
pub(crate) mod gcra;
pub(crate) mod hash_lease;
pub(crate) mod latch;
pub(crate) mod lease_release;
pub(crate) mod rate_limit_plans;
pub(crate) mod rate_limit_reply;
pub(crate) mod redlock;
pub(crate) mod rw_lease;
pub(crate) mod semaphore;
mod server_time;
pub(crate) mod session;
pub(crate) mod sliding_window;
pub(crate) mod stacked_window;
pub(crate) mod token_bucket;

pub(crate) use server_time::ServerTime;

use std::future::Future;

use crate::backend::memory::MemoryBackend;
use crate::backend::redis::RedisBackend;
use crate::backend::{Backend, Kind};
use crate::error::Result;
use crate::telemetry;

use tracing::Instrument as _;

/// One atomic step of a primitive: what it answers, the same on both backends.
pub(crate) trait Step {
    /// Its primitive, by its folder here: the `primitive` of its trace and error count.
    const PRIMITIVE: &'static str;
    /// Its name (its type's, in snake case): the `step` of its trace and error count.
    const NAME: &'static str;
    /// What the step answers.
    type Reply;
}

/// A step as Redis runs it: one script call or one native command (a pipeline at most).
pub(crate) trait RedisStep: Step {
    /// Runs the step on `redis`.
    fn on_redis<'a>(
        &'a self,
        redis: &'a RedisBackend,
    ) -> impl Future<Output = Result<Self::Reply>> + Send + 'a;
}

/// A step as the memory backend runs it, atomically under its store's lock.
pub(crate) trait MemoryStep: Step {
    /// Runs the step on `memory`.
    fn in_memory(&self, memory: &MemoryBackend) -> Result<Self::Reply>;
}

impl Backend {
    /// Runs one step on this backend, in its trace span (see [`crate::telemetry`]).
    ///
    /// Not cancel safe on Redis: once the request is written, dropping the future does not
    /// stop the step, which may run to completion on the server.
    pub(crate) async fn run<S: RedisStep + MemoryStep>(&self, step: S) -> Result<S::Reply> {
        let span = step_span::<S>();
        let outcome = match self.kind() {
            // Boxed: a redis-rs future is a deeply nested type, and callers nest this one
            // further (timeouts, layers, extractors, user code); on the heap it costs one
            // allocation per step and keeps every caller's future small.
            Kind::Redis(redis) => Box::pin(step.on_redis(redis).instrument(span.clone())).await,
            Kind::Memory(memory) => span.in_scope(|| step.in_memory(memory)),
        };
        telemetry::observe_step(&span, S::PRIMITIVE, S::NAME, &outcome);
        outcome
    }

    /// Runs one step that may be delivered twice: one that only reads, or one that counts
    /// once however often it is delivered (it carries an id its state records). On Redis, a
    /// delivery lost on the way (no reply in time, a connection lost mid-flight: the first
    /// step on a connection the server closed while it was idle, say) is sent again within
    /// the transient-retry bound (see
    /// [`RedisBackend::resending_uncertain`](crate::backend::redis::RedisBackend)).
    ///
    /// Not cancel safe on Redis, as [`run`](Self::run).
    pub(crate) async fn run_idempotent<S: RedisStep + MemoryStep>(
        &self,
        step: S,
    ) -> Result<S::Reply> {
        let span = step_span::<S>();
        let outcome = match self.kind() {
            // Boxed for the reason `run` gives.
            Kind::Redis(redis) => {
                Box::pin(
                    redis
                        .resending_uncertain(|| step.on_redis(redis))
                        .instrument(span.clone()),
                )
                .await
            }
            Kind::Memory(memory) => span.in_scope(|| step.in_memory(memory)),
        };
        telemetry::observe_step(&span, S::PRIMITIVE, S::NAME, &outcome);
        outcome
    }
}

/// A step's span: `DEBUG`, with its primitive, its name and (once answered) its outcome.
/// Disabled, as it is unless a subscriber asks for `DEBUG` here, it costs a load and a
/// comparison.
#[inline]
fn step_span<S: Step>() -> tracing::Span {
    tracing::debug_span!(
        "step",
        primitive = S::PRIMITIVE,
        step = S::NAME,
        outcome = tracing::field::Empty
    )
}

/// The largest future the rate limiters' hot path may allocate: glibc's `malloc` serves
/// blocks of up to 1,032 bytes from a per-thread cache, and larger ones from its bins for
/// large blocks, at several hundred instructions more per allocation and free (measured
/// with callgrind on the fixed-window layer). A step's boxed future and a layer's boxed
/// decision stay within it: rare paths (a connection being made, a pause before a retry, a
/// script sent again in full, a probe for corrupt state, a hot-key reservation, a wait in
/// the queue) are boxed on their own instead of sitting inline in every request's future.
#[cfg(test)]
pub(crate) const FAST_ALLOCATION: usize = 1024;

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;

    /// A backend that never reaches a server: the steps' futures are built, never polled.
    pub(crate) async fn unreachable_redis() -> RedisBackend {
        RedisBackend::standalone("redis://127.0.0.1:1")
            .key_prefix("t:")
            .transient_retry(Duration::from_millis(1))
            .connect()
            .await
            .expect("an unreachable server is reported at the first step, not here")
    }

    /// The size of `step`'s future on Redis, as [`Backend::run`] boxes it.
    fn future_size<S: RedisStep>(step: S, redis: &RedisBackend) -> usize {
        std::mem::size_of_val(&step.on_redis(redis).instrument(step_span::<S>()))
    }

    /// Each rate limiter's step on Redis, as [`Backend::run`] boxes it on every decision,
    /// fits the allocator's fast cache.
    #[tokio::test]
    async fn the_rate_limit_steps_futures_fit_the_allocators_fast_cache() {
        let redis = unreachable_redis().await;
        let key = &b"k"[..];
        let sizes = [
            (
                "fixed window",
                future_size(
                    fixed_window::FixedWindowStep {
                        key,
                        permits: 1,
                        limit: 10,
                        window_ms: 1_000,
                        admitted_only: false,
                    },
                    &redis,
                ),
            ),
            (
                "sliding window",
                future_size(
                    sliding_window::SlidingWindowStep {
                        key,
                        permits: 1,
                        limit: 10,
                        window_ms: 1_000,
                        segment_ms: 100,
                    },
                    &redis,
                ),
            ),
            (
                "token bucket",
                future_size(
                    token_bucket::TokenBucketStep {
                        key,
                        permits: 1,
                        limit: 10,
                        tokens_per_period: 1,
                        period_ms: 100,
                    },
                    &redis,
                ),
            ),
            (
                "GCRA",
                future_size(
                    gcra::GcraStep {
                        key,
                        permits: 1,
                        interval_us: 100,
                        burst: 10,
                    },
                    &redis,
                ),
            ),
            (
                "stacked windows",
                future_size(
                    stacked_window::StackedWindowStep {
                        key,
                        permits: 1,
                        windows: &[(10, 1_000), (100, 60_000)],
                        shadows: 0,
                    },
                    &redis,
                ),
            ),
        ];
        for (step, size) in sizes {
            assert!(
                size <= FAST_ALLOCATION,
                "the {step} step's future is {size} bytes"
            );
        }
    }
}
