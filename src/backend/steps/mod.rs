//! The step protocol: every primitive's atomic steps, one folder per primitive.
//!
//! A step is a plain value (its keys and arguments) that implements [`Step`]: its reply type,
//! how Redis runs it, and how the memory backend runs it. Coordination builds a step and hands
//! it to [`Backend::run`], the one place that looks at which backend it has; nothing above the
//! backend matches on its variants.
//!
//! Each primitive's folder holds all of its backend code:
//!
//! - `mod.rs`: the step and reply types, with the rules both backends keep, and the [`Step`]
//!   implementations that name the two below;
//! - `redis.rs` and its `.lua` scripts, each declared with `script!` (whether it only reads,
//!   its name, its files) and answering in the one reply convention of
//!   `backend::redis::script_reply` (status first, one shape for corrupt state), which
//!   `Script::decode` decodes;
//! - `memory.rs`: the same step on the in-process store, with the same answers.

pub(crate) mod fenced_lock;
pub(crate) mod fixed_window;
pub(crate) mod gcra;
pub(crate) mod rate_limit_reply;
pub(crate) mod semaphore;
mod server_time;
pub(crate) mod sliding_window;
pub(crate) mod stacked_window;
pub(crate) mod token_bucket;

pub(crate) use server_time::ServerTime;

use std::future::Future;

use crate::backend::Backend;
use crate::backend::memory::MemoryBackend;
use crate::backend::redis::RedisBackend;
use crate::error::Result;

/// One atomic step of a primitive, runnable on either backend.
pub(crate) trait Step {
    /// What the step answers, the same on both backends.
    type Reply;

    /// Runs the step on Redis: one script call or one native command (a pipeline at most).
    fn on_redis<'a>(
        &'a self,
        redis: &'a RedisBackend,
    ) -> impl Future<Output = Result<Self::Reply>> + Send + 'a;

    /// Runs the step on the memory backend, atomically under its store's lock.
    fn in_memory(&self, memory: &MemoryBackend) -> Result<Self::Reply>;
}

impl Backend {
    /// Runs one step on this backend.
    ///
    /// Not cancel safe on Redis: once the request is written, dropping the future does not
    /// stop the step, which may run to completion on the server.
    pub(crate) async fn run<S: Step>(&self, step: S) -> Result<S::Reply> {
        match self {
            // Boxed: a redis-rs future is a deeply nested type, and callers nest this one
            // further (timeouts, layers, extractors, user code); on the heap it costs one
            // allocation per step and keeps every caller's future small.
            Backend::Redis(redis) => Box::pin(step.on_redis(redis)).await,
            Backend::Memory(memory) => step.in_memory(memory),
        }
    }
}
