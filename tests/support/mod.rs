//! The real-server test harness: servers are started lazily, once per test binary, and shared
//! by its tests; every process dies with the test binary (see [`spawner`]).
//!
//! Use it from an integration test with `mod support;`.
#![allow(dead_code, unused_imports)]

pub mod binaries;
pub mod cluster;
pub mod example;
pub mod http;
pub mod increx_module;
pub mod proxy;
pub mod sentinel;
pub mod server;
pub mod spawner;
pub mod target;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use cluster::{Cluster, cluster};
pub use sentinel::{SentinelSetup, sentinel};
pub use server::{Server, ServerKind, Spec, increx, independent, shared, wait_until};

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
