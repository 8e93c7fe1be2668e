//! Presence with sessions: the live instances of a service are the keys their sessions
//! keep alive.
//!
//! ```sh
//! cargo run --example presence                                   # in process
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example presence  # shared through Redis
//! ```
//!
//! Three instances announce themselves with a managed session each (kept alive in the
//! background); one leaves cleanly (revoked: gone at once), one dies (its session let go of
//! and never kept alive: gone when its lease runs out).

use std::time::Duration;

use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::ManagedOptions;
use leasehold::coordination::session::{ManagedSession, Sessions};

const LEASE: Duration = Duration::from_millis(600);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_writer(std::io::stderr)
        .init();
    let coordination = match std::env::var("REDIS_URL") {
        Ok(url) => RedisBackend::standalone(url)
            .key_prefix(format!("presence-example:{}:", std::process::id()))
            .connect()
            .await?
            .into(),
        Err(_) => Coordination::memory(),
    };
    let instances = Sessions::named(&coordination, "api-instances");
    let options = ManagedOptions::new().lease(LEASE);

    let mut announced = Vec::new();
    for (name, address) in [
        ("a", "10.0.0.1:8080"),
        ("b", "10.0.0.2:8080"),
        ("c", "10.0.0.3:8080"),
    ] {
        let session = ManagedSession::grant(&instances, &options).await?;
        session.put(format!("instance:{name}"), address).await?;
        announced.push(session);
    }
    print_live("three instances announced", &instances).await?;

    // Past several leases: kept alive in the background.
    tokio::time::sleep(3 * LEASE).await;
    let live = print_live("three leases later", &instances).await?;
    expect(&live, &["a", "b", "c"])?;

    let c = announced.pop().ok_or("three sessions")?;
    let b = announced.pop().ok_or("three sessions")?;
    c.release().await?;
    let live = print_live("c left cleanly", &instances).await?;
    expect(&live, &["a", "b"])?;
    // b dies: nothing keeps its session alive any more. It stays listed until its lease
    // runs out, and no longer.
    let left = b
        .detach()
        .await
        .ok_or("b still held its session")?
        .remaining_estimate();
    let died = tokio::time::Instant::now();
    let live = print_live("b died", &instances).await?;
    if died.elapsed() < left {
        expect(&live, &["a", "b"])?;
    }
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
    let live = print_live("one lease later", &instances).await?;
    expect(&live, &["a"])?;
    Ok(())
}

/// An error unless `live` names exactly the instances `names`.
fn expect(live: &[Vec<u8>], names: &[&str]) -> Result<(), Box<dyn std::error::Error>> {
    let expected: Vec<Vec<u8>> = names
        .iter()
        .map(|name| format!("instance:{name}").into_bytes())
        .collect();
    if live != expected.as_slice() {
        return Err(format!("expected {names:?}, found {live:?}").into());
    }
    Ok(())
}

/// Prints the live instances, and returns their names.
async fn print_live(
    when: &str,
    instances: &Sessions,
) -> Result<Vec<Vec<u8>>, Box<dyn std::error::Error>> {
    let mut live = instances.list().await?;
    live.sort();
    let shown: Vec<String> = live
        .iter()
        .map(|(name, address)| {
            format!(
                "{} at {}",
                String::from_utf8_lossy(name),
                String::from_utf8_lossy(address)
            )
        })
        .collect();
    println!("{when}: {}", shown.join(", "));
    Ok(live.into_iter().map(|(name, _)| name).collect())
}
