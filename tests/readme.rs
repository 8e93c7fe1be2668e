//! Every Rust example of the README, compiled: each is copied here verbatim (indented) into
//! a function that gives it what it assumes (a `coordination` handle, the functions it
//! calls, the imports of an earlier example), and
//! `every_rust_example_of_the_readme_is_compiled_here` checks that each example of the README
//! appears here, line for line, so that neither can change without the other. They are
//! compiled, not run.
#![allow(dead_code, unused_imports, unused_variables)]

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use leasehold::Coordination;
use leasehold::layer::key::KeyExtractor;
use leasehold::layer::rate_limit::RedisRateLimitLayer;

type Outcome = Result<(), Box<dyn std::error::Error>>;

async fn handler() -> &'static str {
    "ok"
}

/// The work the one-replica example runs under its lease.
async fn build_report(_fencing_token: u64) {}

/// The quickstart: a route limited in process, no server needed.
#[rustfmt::skip]
fn quickstart() {
    use std::net::SocketAddr;
    use std::time::Duration;
    use axum::{Router, routing::get};
    use leasehold::Coordination;
    use leasehold::layer::key::KeyExtractor;
    use leasehold::layer::rate_limit::RedisRateLimitLayer;

    #[tokio::main]
    async fn main() -> Result<(), Box<dyn std::error::Error>> {
        // Limits kept in this process: no server needed. To share them between replicas:
        // Coordination::connect("redis://127.0.0.1:6379", "myapp:").await?
        let coordination = Coordination::memory();
        // 5 requests per 10 seconds for each client IP.
        let hello = RedisRateLimitLayer::fixed_window(&coordination, "hello", 5, Duration::from_secs(10))?
            .key(KeyExtractor::peer_ip());
        let app = Router::new().route("/hello", get(|| async { "Hello!\n" }).layer(hello));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
        // With the connection's address, which `peer_ip` keys by.
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
        Ok(())
    }
}

/// A job on one replica, under a managed lease.
#[rustfmt::skip]
async fn run_a_job_on_one_replica(coordination: Coordination) -> Outcome {
    use std::time::Duration;
    use leasehold::coordination::ManagedOptions;
    use leasehold::coordination::lock::{FencedLock, ManagedLease};

    // Every replica runs this; the one that takes the lease does the work, the others skip it.
    let lock = FencedLock::named(&coordination, "nightly-report");
    let options = ManagedOptions::new().lease(Duration::from_secs(30));
    if let Some(lease) = ManagedLease::try_acquire(&lock, &options).await? {
        // Renewed in the background. Send the fencing token with every write, and stop if the lease is lost.
        let token = lease.fencing_token();
        let mut lost = lease.ownership();
        tokio::select! {
            () = build_report(token) => {}
            reason = lost.lost() => eprintln!("stopped: {reason}"),
        }
        lease.release().await?;
    }
    Ok(())
}

/// A GCRA quota per API key, with bursts.
#[rustfmt::skip]
async fn a_quota_per_api_key_with_bursts(coordination: Coordination) -> Outcome {
    use leasehold::layer::FailurePolicy;

    // 10 requests per second for each API key, and bursts of up to 20.
    let api = RedisRateLimitLayer::gcra(&coordination, "api", 10, Duration::from_secs(1), 20)?
        .key(KeyExtractor::header("x-api-key")?) // stored as its SHA-256 digest
        .failure_policy(FailurePolicy::FailOpen); // Redis away: a limit kept in the process
    let app: Router = Router::new().route("/api", get(handler)).layer(api);
    Ok(())
}

#[test]
fn every_rust_example_of_the_readme_is_compiled_here() {
    let readme = include_str!("../README.md");
    let here = include_str!("readme.rs");
    let mut lines = readme.lines();
    let mut examples = 0;
    while let Some(line) = lines.next() {
        if !line.starts_with("```rust") {
            continue;
        }
        let example: Vec<&str> = lines
            .by_ref()
            .take_while(|line| !line.starts_with("```"))
            .collect();
        let indented: Vec<String> = example
            .iter()
            .map(|line| {
                if line.is_empty() {
                    String::new()
                } else {
                    format!("    {line}")
                }
            })
            .collect();
        assert!(
            here.contains(&indented.join("\n")),
            "a README example not compiled in tests/readme.rs:\n{}",
            example.join("\n")
        );
        examples += 1;
    }
    assert_eq!(examples, 3, "every example is listed here");
}
