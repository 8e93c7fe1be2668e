//! Worker ownership with sessions: a job is a worker's while its session lives, marked by an
//! attached key; a worker that dies mid-job hands the job over within one lease.
//!
//! ```sh
//! cargo run --example worker_ownership                                   # in process
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example worker_ownership  # shared through Redis
//! ```
//!
//! Worker A claims the job and dies without a word (its session is let go of, unrevoked,
//! and nothing keeps it alive: what a killed process leaves). Worker B tries to claim the
//! job every 20 ms; it gets it once A's lease has run out, and not before.

use std::time::Duration;

use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::session::{Claim, Sessions};
use tokio::time::Instant;

/// How long a worker's session lives without a keep-alive.
const LEASE: Duration = Duration::from_millis(1_000);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_writer(std::io::stderr)
        .init();
    let coordination = match std::env::var("REDIS_URL") {
        Ok(url) => RedisBackend::standalone(url)
            .key_prefix(format!("worker-ownership-example:{}:", std::process::id()))
            .connect()
            .await?
            .into(),
        Err(_) => Coordination::memory(),
    };
    let jobs = Sessions::named(&coordination, "jobs");

    // Worker A claims the job, then dies mid-job.
    // The server counts the lease from after this moment.
    let granted_at = Instant::now();
    let mut a = jobs.grant(LEASE).await?;
    if a.claim("job:42", "worker-a").await? != Claim::Claimed {
        return Err("worker A could not claim a free job".into());
    }
    println!("worker A owns job:42");
    let _ = a.detach().await; // killed: nothing revokes it, nothing keeps it alive

    // Worker B waits for the job.
    let mut b = jobs.grant(Duration::from_secs(30)).await?;
    let handed_over = loop {
        match b.claim("job:42", "worker-b").await? {
            Claim::Claimed => break granted_at.elapsed(),
            Claim::Taken => tokio::time::sleep(Duration::from_millis(20)).await,
            _ => return Err("worker B lost its own session".into()),
        }
    };
    let owner = jobs.get("job:42").await?.unwrap_or_default();
    println!(
        "worker B owns job:42 (marked {:?}) {} ms after A's session was granted, for {} ms",
        String::from_utf8_lossy(&owner),
        handed_over.as_millis(),
        LEASE.as_millis()
    );
    if handed_over < LEASE || handed_over > LEASE + Duration::from_millis(500) {
        return Err(format!("handed over after {handed_over:?}, not within one lease").into());
    }
    b.release().await?;
    Ok(())
}
