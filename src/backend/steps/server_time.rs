//! Reading the backend's clock.

use std::future::Future;
use std::time::Duration;

use super::{MemoryStep, RedisStep, Step};
use crate::backend::memory::MemoryBackend;
use crate::backend::redis::RedisBackend;
use crate::error::Result;

/// The backend's current time as a duration since the Unix epoch: Redis `TIME`, or the
/// memory backend's pausable monotonic clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServerTime;

impl Step for ServerTime {
    const PRIMITIVE: &'static str = "server_time";
    const NAME: &'static str = "server_time";
    type Reply = Duration;
}

impl RedisStep for ServerTime {
    fn on_redis<'a>(
        &'a self,
        redis: &'a RedisBackend,
    ) -> impl Future<Output = Result<Duration>> + Send + 'a {
        redis.server_time()
    }
}

impl MemoryStep for ServerTime {
    fn in_memory(&self, memory: &MemoryBackend) -> Result<Duration> {
        Ok(memory.now())
    }
}
