//! Fencing tokens: a resource that refuses writes from a lock holder whose lease ran out.
//!
//! ```sh
//! cargo run --example fenced_resource                                   # in-process lock
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example fenced_resource  # shared through Redis
//! ```
//!
//! Worker A takes the lock, then stalls past its lease; worker B takes the lock and writes;
//! A wakes up and writes too. The lock cannot stop A, but the resource can: A's fencing token
//! is lower than B's, so its write is rejected.

use std::sync::Mutex;
use std::time::Duration;

use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::Attempt;
use leasehold::coordination::lock::{FencedLease, FencedLock};

/// Stands in for whatever the lock protects (a database row, a file service): it remembers
/// the highest fencing token it has accepted and refuses lower ones. The check and the write
/// must be one atomic step, as the mutex makes them here.
#[derive(Default)]
struct FencedResource {
    /// The last accepted token, and the value it wrote.
    state: Mutex<(u64, String)>,
}

impl FencedResource {
    /// Writes `value` unless a holder with a higher token has written since; equal tokens
    /// are the same holder writing again.
    fn write(&self, fencing_token: u64, value: &str) -> bool {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if fencing_token < state.0 {
            return false;
        }
        *state = (fencing_token, value.to_owned());
        true
    }

    fn read(&self) -> (u64, String) {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

const A_LEASE: Duration = Duration::from_millis(200);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The crate explains what it does (a backend failing, a limit failing open) through
    // `tracing`: show it on stderr.
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_writer(std::io::stderr)
        .init();

    let (coordination, backend) = match std::env::var("REDIS_URL") {
        // Every process connected to this Redis contends for the same lock.
        Ok(url) => {
            // This service's namespace: another service on the same Redis that names a
            // limit alike keeps its own.
            let redis = RedisBackend::connect(url, "fenced-resource:").await?;
            // Printed as logs may show it: any password masked.
            let endpoint = redis.endpoint().to_owned();
            (Coordination::from(redis), endpoint)
        }
        Err(_) => (
            Coordination::memory(),
            "memory (set REDIS_URL to share the lock)".into(),
        ),
    };
    println!("backend: {backend}");
    let lock = FencedLock::named(&coordination, "examples:fenced-resource");
    let resource = FencedResource::default();

    let mut a = acquire(&lock, A_LEASE).await?;
    println!("A: acquired the lock, fencing token {}", a.fencing_token());
    report("A", resource.write(a.fencing_token(), "written by A"));

    println!("A: stalls (a long pause, a slow disk) past its {A_LEASE:?} lease");
    tokio::time::sleep(A_LEASE + Duration::from_millis(100)).await;

    let mut b = acquire(&lock, Duration::from_secs(10)).await?;
    println!("B: acquired the lock, fencing token {}", b.fencing_token());
    report("B", resource.write(b.fencing_token(), "written by B"));

    println!("A: wakes up and writes, unaware that its lease is gone");
    report("A", resource.write(a.fencing_token(), "late write by A"));
    println!(
        "A: asks the lock: still held = {}, release = {:?}",
        a.verify_still_held().await?,
        a.release().await?
    );

    println!("B: release = {:?}", b.release().await?);
    let (token, value) = resource.read();
    println!("resource: {value:?} (last accepted token {token})");
    Ok(())
}

/// Takes the lock, waiting for the holder's lease to run out if it is held (a few tries).
async fn acquire(lock: &FencedLock, lease: Duration) -> Result<FencedLease, String> {
    for _ in 0..20 {
        match lock.try_acquire(lease).await.map_err(|e| e.to_string())? {
            Attempt::Acquired(lease) => return Ok(lease),
            Attempt::Busy { retry_after } => {
                let wait = retry_after.unwrap_or(Duration::from_millis(100));
                tokio::time::sleep(wait.min(Duration::from_secs(1))).await;
            }
        }
    }
    Err("the lock stayed held; is another process using it?".into())
}

fn report(worker: &str, accepted: bool) {
    if accepted {
        println!("{worker}: write accepted");
    } else {
        println!("{worker}: write REJECTED: a newer holder has written");
    }
}
