//! The real-server test harness: servers are started lazily, once per test binary, and shared
//! by its tests; every process dies with the test binary (see [`spawner`]).
//!
//! Use it from an integration test with `mod support;`.
#![allow(dead_code, unused_imports)]

pub mod binaries;
pub mod cluster;
pub mod example;
pub mod holding;
pub mod http;
pub mod increx_module;
pub mod logs;
pub mod process;
pub mod proxy;
pub mod recorder;
pub mod sentinel;
pub mod server;
pub mod spawner;
pub mod stalling;
pub mod target;
pub mod tls;
pub mod turns;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use cluster::{Cluster, cluster};
pub use sentinel::{SentinelSetup, sentinel};
pub use server::{Server, ServerKind, Spec, increx, independent, shared, wait_until};

/// The repository's root: the nearest directory above the compiled package that holds this
/// harness. The crate's tests are compiled there; the benchmarks' package, two levels down.
pub fn repo_root() -> &'static Path {
    let package = Path::new(env!("CARGO_MANIFEST_DIR"));
    package
        .ancestors()
        .find(|dir| dir.join("tests/support/mod.rs").is_file())
        .unwrap_or(package)
}

/// A key prefix unique to this call, this test binary and this process:
/// `lh-test:<pid>:<n>:<test_name>:`.
pub fn unique_prefix(test_name: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("lh-test:{}:{n}:{test_name}:", std::process::id())
}

/// How long a test waits for something that must happen soon (a background release, a
/// server-side expiry) before failing.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A handle on the standalone server at `url`, its keys under a prefix of `test`'s own.
pub async fn connect(url: String, test: &str) -> leasehold::Coordination {
    leasehold::backend::redis::RedisBackend::standalone(url)
        .key_prefix(unique_prefix(test))
        .connect()
        .await
        .expect("connect")
        .into()
}

/// Waits until each of `handles` has `each` waits that tried once and now wait for a change:
/// on Redis, that many pending key watches on the handle's backend (a wait that has not
/// tried yet has none). In memory, whose waits poll and register nothing, it gives them a
/// few polls' time.
#[allow(dead_code)]
pub async fn until_waiting(handles: &[leasehold::Coordination], each: usize) {
    for handle in handles {
        match handle.backend().as_redis() {
            Some(redis) => {
                eventually("the waits wait for a change", async || {
                    redis.watch_count() >= each
                })
                .await;
            }
            None => tokio::time::sleep(Duration::from_millis(150)).await,
        }
    }
}

/// Polls `check` every 10 ms until it holds; panics after [`PATIENCE`].
pub async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {PATIENCE:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A private Redis 7 server, a fault proxy in front of it and a key prefix of its own: for
/// tests that break one holder's network while others reach the server directly.
pub struct Behind {
    pub server: Server,
    pub proxy: proxy::Proxy,
    pub prefix: String,
}

impl Behind {
    /// Starts a Redis 7 server and the proxy.
    pub fn start(test: &str) -> Behind {
        Behind::start_on(ServerKind::Redis7, test)
    }

    /// Starts a server of `kind` and the proxy.
    pub fn start_on(kind: ServerKind, test: &str) -> Behind {
        let server = Server::start(kind, &[]);
        let proxy = proxy::Proxy::to_port(server.port());
        Behind {
            server,
            proxy,
            prefix: unique_prefix(test),
        }
    }

    /// A handle through the proxy, its builder set up by `configure` (timeouts, say).
    pub async fn through_proxy(
        &self,
        configure: impl FnOnce(
            leasehold::backend::redis::RedisBackendBuilder,
        ) -> leasehold::backend::redis::RedisBackendBuilder,
    ) -> leasehold::Coordination {
        configure(leasehold::backend::redis::RedisBackend::standalone(
            self.proxy.url(),
        ))
        .key_prefix(&self.prefix)
        .connect()
        .await
        .expect("connect through the proxy")
        .into()
    }

    /// A handle straight to the server, sharing the prefix.
    pub async fn direct(&self) -> leasehold::Coordination {
        leasehold::backend::redis::RedisBackend::standalone(self.server.url())
            .key_prefix(&self.prefix)
            .connect()
            .await
            .expect("connect")
            .into()
    }
}
