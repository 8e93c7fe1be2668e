//! What a limiter test runs against: one [`Target`] per server kind, the INCREX test module,
//! the cluster and the memory backend, with [`scenario!`] to make one `#[tokio::test]` per
//! target of an `async fn(Target)`.

use std::future::Future;

use leasehold::Coordination;
use leasehold::backend::Backend;
use leasehold::backend::memory::MemoryBackend;
use leasehold::backend::redis::{RedisBackend, RedisBackendBuilder};
use leasehold::coordination::rate_limit::{
    FixedWindow, Gcra, RateLimitDecision, RateLimiter, SlidingWindow, Stacked, TokenBucket,
};

use super::{Server, ServerKind, cluster, increx, shared, unique_prefix};

/// Where a limiter test runs.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// The shared server of this kind.
    Server(ServerKind),
    /// Redis 7.0 with the INCREX test module: the fixed window's fast path.
    Increx,
    /// The shared cluster.
    Cluster,
    /// The in-process memory backend.
    Memory,
}

impl Target {
    /// A builder for the target's server; Redis targets only.
    pub fn redis_builder(self) -> RedisBackendBuilder {
        match self {
            Target::Server(kind) => RedisBackend::standalone(shared(kind).unix_url()),
            Target::Increx => RedisBackend::standalone(increx().unix_url()),
            Target::Cluster => RedisBackend::cluster(cluster().urls()),
            Target::Memory => unreachable!("Redis targets only"),
        }
    }

    /// A handle with a key prefix of its own (see [`unique_prefix`]).
    pub async fn coordination(self, test: &str) -> Coordination {
        let prefix = unique_prefix(test);
        if let Target::Memory = self {
            return MemoryBackend::builder()
                .key_prefix(prefix)
                .build()
                .expect("valid")
                .into();
        }
        self.redis_builder()
            .key_prefix(prefix)
            .connect()
            .await
            .unwrap_or_else(|e| panic!("connect to {self:?}: {e}"))
            .into()
    }

    /// `n` independent handles (separate connections) sharing `first`'s key prefix, as
    /// replicas do; for the memory backend, `n` clones of `first` (its state is in-process).
    pub async fn handles(self, first: &Coordination, n: usize) -> Vec<Coordination> {
        let Some(redis) = first.backend().as_redis() else {
            return vec![first.clone(); n];
        };
        let mut handles = Vec::new();
        for _ in 0..n {
            let backend = self
                .redis_builder()
                .key_prefix(redis.key_prefix())
                .connect()
                .await
                .expect("connect");
            handles.push(backend.into());
        }
        handles
    }

    /// Runs a raw command (`args[0]` is its name) on the target's server; Redis targets only.
    pub fn query<T: redis::FromRedisValue>(self, args: &[&[u8]]) -> T {
        let mut cmd = redis::cmd(std::str::from_utf8(args[0]).expect("ascii command"));
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        match self {
            Target::Server(kind) => cmd.query(&mut shared(kind).connection()).expect("raw"),
            Target::Increx => cmd.query(&mut increx().connection()).expect("raw"),
            Target::Cluster => cmd
                .query(&mut cluster().client().get_connection().expect("cluster"))
                .expect("raw"),
            Target::Memory => unreachable!("Redis targets only"),
        }
    }

    /// [`query`](Self::query) for the answer as the server gave it.
    pub fn raw(self, args: &[&[u8]]) -> redis::Value {
        self.query(args)
    }

    /// Asserts that `key` expires at `expected` ms since the epoch: exactly by `PEXPIRETIME`
    /// (Redis 7.0+), or within a few milliseconds by the server's `TIME` plus `PTTL` on
    /// Redis 6.2, which has no `PEXPIRETIME`.
    #[track_caller]
    pub fn assert_expires_at(self, key: &[u8], expected: u64) {
        if let Target::Server(ServerKind::Redis6) = self {
            let (secs, micros): (u64, u64) = self.query(&[b"TIME"]);
            let now = secs * 1000 + micros / 1000;
            let ttl = u64::try_from(self.pttl(key)).expect("an expiry");
            let late = expected.checked_sub(now + ttl);
            assert!(
                late.is_some_and(|ms| ms <= 20),
                "expires at {} (TIME + PTTL), expected {expected}",
                now + ttl
            );
        } else {
            let expires_at: u64 = self.query(&[b"PEXPIRETIME", key]);
            assert_eq!(expires_at, expected);
        }
    }

    /// The key's PTTL in ms: -1 without an expiry, -2 without the key.
    pub fn pttl(self, key: &[u8]) -> i64 {
        match self.raw(&[b"PTTL", key]) {
            redis::Value::Int(ttl) => ttl,
            other => panic!("PTTL answered {other:?}"),
        }
    }
}

/// Generates a module named after the `async fn $scenario(Target)` beside it, with one
/// `#[tokio::test]` per target:
///
/// - `scenario!(name: redis7 => Target::Server(ServerKind::Redis7), ...)`: the targets given;
/// - `scenario!(name)`: every server kind, the cluster and the memory backend;
/// - `scenario!(name redis)`: every server kind and the cluster;
/// - `scenario!(name servers)`: every server kind, one server each;
/// - `scenario!(name field_expiry)`: the targets with hash field expiry (Redis 8.2 here, and
///   the memory backend); `scenario!(name without_field_expiry)`: the Redis targets without
///   it.
///
/// The targets and what each has are listed once, in [`targets!`]; the INCREX target is never
/// implied: a test file that wants it lists it.
#[allow(unused_macros)] // by the test binaries that have no scenarios
macro_rules! scenario {
    ($scenario:ident: $($name:ident => $target:expr),+ $(,)?) => {
        mod $scenario {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[tokio::test]
                async fn $name() {
                    super::$scenario($target).await
                }
            )+
        }
    };
    ($scenario:ident $($filter:ident)?) => {
        $crate::support::target::targets!(
            $crate::support::target::select, $scenario [$($filter)?] []
        );
    };
}
pub(crate) use scenario;

/// Every target a scenario may run on, listed once: what it has (a Redis server or cluster;
/// hash field expiry; one server), its name, and the target. Hands the list to `$then`.
#[allow(unused_macros)]
macro_rules! targets {
    ($then:path, $($args:tt)*) => {
        $then!($($args)*
            [redis: yes, field_expiry: no, server: yes] redis6
                ($crate::support::target::Target::Server($crate::support::ServerKind::Redis6))
            [redis: yes, field_expiry: no, server: yes] redis7
                ($crate::support::target::Target::Server($crate::support::ServerKind::Redis7))
            [redis: yes, field_expiry: yes, server: yes] redis8
                ($crate::support::target::Target::Server($crate::support::ServerKind::Redis8))
            [redis: yes, field_expiry: no, server: yes] valkey8
                ($crate::support::target::Target::Server($crate::support::ServerKind::Valkey8))
            [redis: yes, field_expiry: no, server: no] cluster
                ($crate::support::target::Target::Cluster)
            [redis: no, field_expiry: yes, server: no] memory
                ($crate::support::target::Target::Memory)
        );
    };
}
pub(crate) use targets;

/// Keeps the targets of [`targets!`]'s list that `$filter` asks for (see [`scenario!`]), then
/// expands the scenario over them.
#[allow(unused_macros)]
macro_rules! select {
    // The list is done.
    ($scenario:ident [$($filter:ident)?] [$($kept:tt)*]) => {
        $crate::support::target::scenario!($scenario: $($kept)*);
    };
    // Every target.
    ($scenario:ident [] [$($kept:tt)*] [$($has:tt)*] $name:ident $target:tt $($rest:tt)*) => {
        $crate::support::target::select!($scenario [] [$($kept)* $name => $target,] $($rest)*);
    };
    // The Redis targets.
    ($scenario:ident [redis] [$($kept:tt)*] [redis: yes, $($has:tt)*] $name:ident $target:tt $($rest:tt)*) => {
        $crate::support::target::select!($scenario [redis] [$($kept)* $name => $target,] $($rest)*);
    };
    // One server each.
    ($scenario:ident [servers] [$($kept:tt)*] [redis: $r:tt, field_expiry: $f:tt, server: yes] $name:ident $target:tt $($rest:tt)*) => {
        $crate::support::target::select!($scenario [servers] [$($kept)* $name => $target,] $($rest)*);
    };
    // Hash field expiry.
    ($scenario:ident [field_expiry] [$($kept:tt)*] [redis: $r:tt, field_expiry: yes, $($has:tt)*] $name:ident $target:tt $($rest:tt)*) => {
        $crate::support::target::select!($scenario [field_expiry] [$($kept)* $name => $target,] $($rest)*);
    };
    // The Redis targets without it.
    ($scenario:ident [without_field_expiry] [$($kept:tt)*] [redis: yes, field_expiry: no, $($has:tt)*] $name:ident $target:tt $($rest:tt)*) => {
        $crate::support::target::select!($scenario [without_field_expiry] [$($kept)* $name => $target,] $($rest)*);
    };
    // Not asked for: skipped.
    ($scenario:ident [$filter:ident] [$($kept:tt)*] [$($has:tt)*] $name:ident $target:tt $($rest:tt)*) => {
        $crate::support::target::select!($scenario [$filter] [$($kept)*] $($rest)*);
    };
}
pub(crate) use select;

/// The physical key of a limiter's client key: `rl:<algorithm_tag>:<len>:<name>:<key>` under
/// the handle's prefix (see each limiter's docs); Redis handles only.
pub fn storage_key(
    coordination: &Coordination,
    algorithm_tag: &str,
    name: &str,
    key: &str,
) -> Vec<u8> {
    coordination
        .backend()
        .physical_key(format!("rl:{algorithm_tag}:{}:{name}:{key}", name.len()).as_bytes())
}

/// The backend's clock in milliseconds since the epoch.
pub async fn server_ms(coordination: &Coordination) -> u64 {
    let now = coordination.server_time().await.expect("server time");
    u64::try_from(now.as_millis()).expect("ms fit")
}

/// How many times the server ran `command` (lower case), from `INFO commandstats`.
pub fn command_calls(server: &Server, command: &str) -> u64 {
    let stats: String = server.cmd(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
}

/// Any algorithm's limiter, for helpers that serve them all: its inherent `try_acquire`.
pub trait Acquire: Send + Sync + 'static {
    fn try_acquire(
        &self,
        key: &[u8],
        permits: u64,
    ) -> impl Future<Output = leasehold::Result<RateLimitDecision>> + Send;
}

macro_rules! acquire_is_the_inherent_method {
    ($($limiter:ty),+) => {
        $(
            impl Acquire for $limiter {
                fn try_acquire(
                    &self,
                    key: &[u8],
                    permits: u64,
                ) -> impl Future<Output = leasehold::Result<RateLimitDecision>> + Send {
                    <$limiter>::try_acquire(self, key, permits)
                }
            }
        )+
    };
}
acquire_is_the_inherent_method!(
    FixedWindow,
    SlidingWindow,
    TokenBucket,
    Gcra,
    Stacked,
    RateLimiter
);

/// Whether `limiter` grants `permits` of `key` now; the request itself must not fail.
pub async fn is_granted(limiter: &impl Acquire, key: &[u8], permits: u64) -> bool {
    limiter
        .try_acquire(key, permits)
        .await
        .expect("acquire")
        .is_granted()
}

/// One caller per handle, all at once, each with its own limiter (from `limiter`) asking
/// `attempts` times for one permit of the key `hot`: the permits granted in total.
pub async fn concurrent_grants<L: Acquire>(
    handles: Vec<Coordination>,
    attempts: usize,
    limiter: impl Fn(&Coordination) -> L,
) -> u64 {
    let tasks: Vec<_> = handles
        .into_iter()
        .map(|coordination| {
            let limiter = limiter(&coordination);
            tokio::spawn(async move {
                let mut granted = 0u64;
                for _ in 0..attempts {
                    if is_granted(&limiter, b"hot", 1).await {
                        granted += 1;
                    }
                }
                granted
            })
        })
        .collect();
    let mut granted = 0;
    for task in tasks {
        granted += task.await.expect("task");
    }
    granted
}

impl Target {
    /// How many keys exist now under `coordination`'s key prefix: on the target's server (every
    /// node of the cluster), or in the memory backend (whose keys all carry its prefix).
    pub fn count_keys(self, coordination: &Coordination) -> usize {
        if let Some(memory) = coordination.backend().as_memory() {
            return memory.len();
        }
        self.key_lengths(coordination).len()
    }

    /// The lengths of the Redis keys under `coordination`'s prefix, prefix included.
    pub fn key_lengths(self, coordination: &Coordination) -> Vec<usize> {
        let backend = coordination
            .backend()
            .as_redis()
            .expect("only a Redis backend has Redis keys");
        let prefix = backend.key_prefix();
        let keys = match self {
            Target::Server(kind) => shared(kind).keys(prefix),
            Target::Increx => increx().keys(prefix),
            Target::Cluster => cluster()
                .nodes()
                .iter()
                .flat_map(|node| node.keys(prefix))
                .collect(),
            Target::Memory => unreachable!("a memory target has a memory backend"),
        };
        keys.iter().map(Vec::len).collect()
    }
}
