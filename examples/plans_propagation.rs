//! How fast a plan changed in one process is in force in the others: three handles on one
//! deployment (separate connections, as three replicas have), each following the same stored
//! plans; `CHANGES` changes (100 by default, 20 ms apart) made by each in turn, and for each the time from
//! the change's return (it is stored, and in force where it was made) until both other
//! replicas have it in force. Prints the p50, p99 and max, in microseconds; run by
//! `scripts/bench-plans.sh` on a standalone server and on a cluster.
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --release --example plans_propagation
//! CLUSTER_URLS=redis://127.0.0.1:7000,redis://127.0.0.1:7001 cargo run --release --example plans_propagation
//! ```

use std::time::{Duration, Instant};

use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::rate_limit::{PlanAlgorithm, Quota, RateLimitPlans};

const WINDOW: Duration = Duration::from_secs(60);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let changes: u64 = std::env::var("CHANGES").map_or(Ok(100), |n| n.parse())?;
    let prefix = format!("propagation-{}:", std::process::id());
    let mut replicas = Vec::new();
    for _ in 0..3 {
        let backend = match std::env::var("CLUSTER_URLS") {
            Ok(urls) => RedisBackend::cluster(urls.split(',').map(str::to_owned)),
            Err(_) => RedisBackend::standalone(
                std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into()),
            ),
        };
        let coordination: Coordination = backend.key_prefix(prefix.clone()).connect().await?.into();
        let plans = RateLimitPlans::builder(&coordination, "api", PlanAlgorithm::FixedWindow)
            .plan("free", Quota::new(1, WINDOW))
            .build_stored()
            .await?;
        replicas.push(plans);
    }
    let mut seen = Vec::new();
    for change in 0..changes {
        let quota = Quota::new(2 + change, WINDOW);
        let writer = usize::try_from(change % 3)?;
        replicas[writer].set_plan("free", quota).await?;
        let stored = Instant::now();
        let deadline = stored + Duration::from_secs(10);
        while replicas
            .iter()
            .any(|plans| plans.quota("free") != Some(quota.into()))
        {
            if Instant::now() > deadline {
                return Err(format!("change {change} not in force everywhere within 10 s").into());
            }
            tokio::time::sleep(Duration::from_micros(100)).await;
        }
        seen.push(stored.elapsed());
        // Changes a moment apart, as an operator's are: each is timed on its own.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen.sort_unstable();
    let at = |share: f64| {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let index = ((seen.len() as f64 - 1.0) * share).round() as usize;
        seen[index].as_micros()
    };
    println!(
        "changes={} p50_us={} p99_us={} max_us={}",
        seen.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    );
    Ok(())
}
