//! Every Rust example of the README, compiled: each is copied here verbatim (indented) into
//! a function that gives it what it assumes (a `coordination` handle, the handlers it
//! routes to, the imports of an earlier example), and
//! `every_rust_example_of_the_readme_is_compiled_here` checks that each example of the README
//! appears here, line for line, so that neither can change without the other. They are
//! compiled, not run: they connect to a Redis of their own.
#![allow(dead_code, unused_imports, unused_variables)]

use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use leasehold::Coordination;
use leasehold::coordination::rate_limit::{FixedWindow, HotKeys};
use leasehold::layer::key::KeyExtractor;
use leasehold::layer::rate_limit::RedisRateLimitLayer;

type Outcome = Result<(), Box<dyn std::error::Error>>;

async fn handler() -> &'static str {
    "ok"
}

async fn events() -> &'static str {
    ""
}

/// The quickstart's router: a fixed window per client IP.
#[rustfmt::skip]
async fn rate_limiting_a_router() -> Outcome {
    use std::time::Duration;
    use axum::{Router, routing::get};
    use leasehold::Coordination;
    use leasehold::layer::FailurePolicy;
    use leasehold::layer::key::KeyExtractor;
    use leasehold::layer::rate_limit::RedisRateLimitLayer;

    // "myapp:" prefixes every key: this service's namespace, so that another service on the
    // same Redis that also names a limit "api" keeps its own counters. It is required.
    let coordination = Coordination::connect("redis://127.0.0.1:6379", "myapp:").await?;
    let app: Router = Router::new()
        .route("/api", get(handler))
        .layer(
            RedisRateLimitLayer::fixed_window(&coordination, "api", 100, Duration::from_secs(60))?
                // behind load balancers in 10.0.0.0/8 that append to X-Forwarded-For
                .key(KeyExtractor::client_ip(["10.0.0.0/8".parse()?]))
                // Redis away: 503 with Retry-After (the default), or FailurePolicy::FailOpen.
                .failure_policy(FailurePolicy::FailClosed { retry_after: Duration::from_secs(1) }),
        );
    Ok(())
}

/// Plans: a quota per customer.
#[rustfmt::skip]
async fn plans_a_quota_per_customer(coordination: Coordination) -> Outcome {
    use leasehold::coordination::rate_limit::{PlanAlgorithm, PlanChoice, Quota, RateLimitPlans};
    use leasehold::layer::rate_limit::{ChoosesPlan, PlanChooser};

    // What your authentication layer puts in the request's extensions.
    #[derive(Clone)]
    struct Account { id: String, plan: String }

    impl ChoosesPlan for Account {
        fn plan_choice(&self) -> PlanChoice<'_> {
            PlanChoice::plan(&self.plan).customer(&self.id)
        }
    }

    let plans = RateLimitPlans::builder(&coordination, "api", PlanAlgorithm::FixedWindow)
        .plan("free", Quota::per_minute(10)) // the first plan is the default
        .plan("pro", Quota::per_minute(100))
        .customer_override("acme", Quota::per_minute(1000))
        .build()?;
    let app: Router = Router::new().route("/api", get(handler)).layer(
        RedisRateLimitLayer::plans(plans)
            .key(KeyExtractor::header("x-api-key")?)
            .choose_plan(PlanChooser::extension::<Account>()),
    );
    Ok(())
}

/// A concurrency limit for streams.
#[rustfmt::skip]
async fn concurrency_limits_for_streaming_responses(coordination: Coordination) -> Outcome {
    use std::time::Duration;
    use leasehold::layer::CircuitBreaker;
    use leasehold::layer::concurrency_limit::{Capacity, RedisConcurrencyLimitLayer};

    // At most 2 streams per client IP and 100 in all, across every replica.
    let streams = RedisConcurrencyLimitLayer::new(
        &coordination,
        "events",
        Capacity::per_key(2).and_global(100),
    )?
    .lease(Duration::from_secs(10))
    // Its own breaker, rather than the one it shares with every layer and extractor of the
    // handle (on by default).
    .circuit_breaker(CircuitBreaker::new().open_for(Duration::from_secs(5)));
    let app: Router = Router::new().route("/events", get(events).layer(streams));
    Ok(())
}

/// The `Lease` extractor.
#[rustfmt::skip]
async fn locks_with_fencing_tokens(coordination: Coordination) -> Outcome {
    use leasehold::extract::{HoldingLost, Lease, LeaseRequest, LeaseSpec};
    use leasehold::layer::key::KeyError;

    struct Reindex;
    impl<S: Sync> LeaseSpec<S> for Reindex {
        async fn lease(
            _parts: &mut axum::http::request::Parts,
            _state: &S,
        ) -> Result<LeaseRequest, KeyError> {
            // A refused request is told to come back within 5 s, whatever the lease's length.
            Ok(LeaseRequest::named("reindex").retry_after_at_most(Duration::from_secs(5)))
        }
    }

    // Runs on one replica at a time; the lease renews itself until the response is produced.
    // Its work runs only while the lease is held: lost midway, it stops and answers 503.
    async fn reindex(lease: Lease<Reindex>) -> Result<String, HoldingLost> {
        let token = lease.fencing_token();
        lease.while_held(async move { format!("reindexed with fencing token {token}") }).await
    }
    let app: Router = Router::new().route("/reindex", post(reindex)).with_state(coordination);
    Ok(())
}

/// A countdown latch's round.
#[rustfmt::skip]
async fn countdown_latches(coordination: Coordination) -> Outcome {
    use leasehold::coordination::latch::{CountDown, CountdownLatch};

    // The coordinator starts a round of three imports; the key expires after an hour whatever
    // happens to the participants.
    let latch = CountdownLatch::named(&coordination, "nightly-import");
    let round = latch.reset(3, Some(Duration::from_secs(3600))).await?;

    // Each worker, in any replica, joins the round and counts down when its shard is done.
    let joined = latch.join().await?.expect("a round is under way");
    match joined.count_down().await? {
        CountDown::Remaining(left) => println!("{left} shards to go"),
        CountDown::Stale => println!("the round was reset; this work belongs to the old one"),
        _ => {}
    }

    // Waiters on any connection see it reach zero (`true`), or the round replaced (`false`).
    let completed = round.wait().await?;
    Ok(())
}

/// Read and write leases.
#[rustfmt::skip]
async fn read_write_leases(coordination: Coordination) -> Outcome {
    use leasehold::coordination::rw_lease::{Access, ReadWriteLock};

    // Waiters take turns (phase-fair): neither readers nor writers starve.
    let lock = ReadWriteLock::named(&coordination, "price-list");

    // Any number of readers at once, in any replica.
    let mut reader = lock.read(Duration::from_secs(10)).await?;
    reader.release().await?;

    // One writer alone; it can become a reader in one step, with no writer in between.
    let mut writer = lock.write(Duration::from_secs(10)).await?;
    writer.downgrade().await?;
    assert_eq!(writer.access(), Access::Read);
    writer.release().await?;
    Ok(())
}

/// Leases in hash fields.
#[rustfmt::skip]
async fn named_leases_in_hash_fields(coordination: Coordination) -> Outcome {
    use leasehold::coordination::hash_lease::LeaseHash;

    // One session per device of a user: one hash, one field (and one expiry) per device.
    let sessions = LeaseHash::named(&coordination, "user:7:sessions");
    let laptop = sessions.acquire("laptop", Duration::from_secs(30)).await?; // waits if held

    // The session outlives the request that opened it: its handle lets go, unreleased, and
    // the owner token goes to the device.
    let Some(detached) = laptop.detach().await else { return Ok(()) }; // lost meanwhile
    let token = detached.into_owner_token();

    // Any replica, on a later request: renewed, checked or ended by that token alone.
    let session = sessions.by_owner("laptop", token);
    session.renew(Duration::from_secs(30)).await?; // false once it expired or was taken
    session.release().await?;
    Ok(())
}

/// Sessions: leases with attached keys.
#[rustfmt::skip]
async fn sessions(coordination: Coordination) -> Outcome {
    use leasehold::coordination::ManagedOptions;
    use leasehold::coordination::session::{Claim, ManagedSession, Sessions};

    // Worker ownership: a job is a worker's while its session lives, marked by a key.
    let jobs = Sessions::named(&coordination, "jobs");
    let mut worker = jobs.grant(Duration::from_secs(10)).await?;
    if worker.claim("job:42", "worker-a").await? == Claim::Claimed {
        // ... the work, with worker.keep_alive() every few seconds ...
        worker.release().await?; // done: the mark goes at once
    } // a worker that dies leaves the job to the next claim within one lease

    // Presence: each instance keeps a session alive with its address attached.
    let instances = Sessions::named(&coordination, "api-instances");
    let options = ManagedOptions::new().lease(Duration::from_secs(5));
    let me = ManagedSession::grant(&instances, &options).await?;
    me.put("instance:a", "10.0.0.1:8080").await?;
    let live = instances.list().await?; // (name, address) of every live instance
    Ok(())
}

/// Leader election.
#[rustfmt::skip]
async fn leader_election(instances: leasehold::coordination::session::Sessions, me: leasehold::coordination::session::ManagedSession) -> Outcome {
    use leasehold::coordination::election::Election;

    // Leader election among the sessions of a space: the candidate that began first leads.
    let election = Election::named(&instances, "scheduler");
    let leadership = election.campaign(&me, "10.0.0.1:8080").await?; // waits until it leads
    let term = leadership.term(); // a fencing token: send it with every write the leader makes
    let lost = leadership.ownership(); // fires when the session is lost
    leadership.proclaim("10.0.0.1:8080, draining").await?;

    // Anyone can follow who leads, gaps with no leader included.
    let mut observer = election.observe();
    let current = observer.changed().await?; // Some(leader) or None
    leadership.resign().await?; // the next candidate leads at once, with a greater term
    Ok(())
}

/// The hot-key tier.
#[rustfmt::skip]
async fn hot_keys(coordination: Coordination) -> Outcome {
    let window = FixedWindow::new(&coordination, "search", 100_000, Duration::from_secs(60))?
        .with_hot_keys(HotKeys::new(1_000))?;
    let layer = RedisRateLimitLayer::new(window).key(KeyExtractor::global());
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
    assert_eq!(examples, 11, "every example is listed here");
}

/// Redlock over five independent servers.
#[rustfmt::skip]
async fn redlock_over_independent_servers(five_nodes: Vec<Coordination>) -> Outcome {
    use leasehold::coordination::redlock::RedlockGroup;

    // Five independent deployments (not a cluster's nodes); the group shares the handles.
    let group = RedlockGroup::new(five_nodes)?.node_timeout(Duration::from_millis(50))?;
    if let Some(mut lease) = group.try_acquire("invoice:42", Duration::from_secs(10)).await?.acquired() {
        // Finish within lease.remaining_estimate(); send lease.fencing_token() with every write.
        lease.release().await?;
    }
    Ok(())
}
