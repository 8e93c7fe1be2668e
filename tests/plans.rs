//! Rate-limit plans: a quota chosen per request (a plan, a client's override, the default),
//! on every target; what a client's state means once its plan changes, per algorithm; and
//! the layer's fields, information and problem body under each plan.

mod support;

use std::time::Duration;

use axum::body::Body;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use leasehold::Coordination;
use leasehold::coordination::rate_limit::{PlanAlgorithm, PlanChoice, Quota, RateLimitPlans};
use leasehold::layer::key::KeyExtractor;
use leasehold::layer::rate_limit::{ChoosesPlan, PlanChooser, RateLimitInfo, RedisRateLimitLayer};
use support::target::{Target, scenario};

/// Long enough that no window ends, no token comes back and no arrival time moves
/// noticeably while a test runs.
const WINDOW: Duration = Duration::from_secs(600);

/// Plans free (5 per window) and pro (50) of `algorithm`, windows of [`WINDOW`] (each plan's
/// burst its limit).
fn free_and_pro(coordination: &Coordination, algorithm: PlanAlgorithm) -> RateLimitPlans {
    RateLimitPlans::builder(coordination, "plans", algorithm)
        .plan("free", Quota::new(5, WINDOW))
        .plan("pro", Quota::new(50, WINDOW))
        .build()
        .expect("valid plans")
}

/// How many of `tries` requests of `key` under `plan` were granted.
async fn granted(plans: &RateLimitPlans, plan: &str, key: &[u8], tries: usize) -> usize {
    let mut granted = 0;
    for _ in 0..tries {
        if plans
            .try_acquire(PlanChoice::plan(plan), key, 1)
            .await
            .expect("decided")
            .is_granted()
        {
            granted += 1;
        }
    }
    granted
}

/// A client downgraded from pro to free, and one upgraded from free to pro, keep their key's
/// state: after the change no more than the new quota is admitted, and in the window of the
/// change no more than the larger of the two. Returns what each was admitted after its
/// change, for the algorithm's own statement.
async fn plan_changes(target: Target, algorithm: PlanAlgorithm, test: &str) -> (usize, usize) {
    let coordination = target.coordination(test).await;
    let plans = free_and_pro(&coordination, algorithm);

    assert_eq!(granted(&plans, "pro", b"downgraded", 30).await, 30);
    let after_downgrade = granted(&plans, "free", b"downgraded", 60).await;
    assert!(
        after_downgrade <= 5,
        "{after_downgrade} admitted under free after the downgrade"
    );

    assert_eq!(granted(&plans, "free", b"upgraded", 10).await, 5);
    let after_upgrade = granted(&plans, "pro", b"upgraded", 60).await;
    assert!(
        5 + after_upgrade <= 50,
        "{after_upgrade} admitted under pro after 5 under free"
    );
    (after_downgrade, after_upgrade)
}

scenario!(a_fixed_windows_count_is_judged_by_the_new_plan);

/// The window's count carries over: downgraded past free's limit, nothing more; upgraded,
/// exactly what pro has left of the count.
async fn a_fixed_windows_count_is_judged_by_the_new_plan(target: Target) {
    let changed = plan_changes(target, PlanAlgorithm::FixedWindow, "plans-fixed").await;
    assert_eq!(changed, (0, 45));
}

scenario!(a_sliding_windows_segments_are_judged_by_the_new_plan);

/// The segments' counts carry over, weighed against the new limit.
async fn a_sliding_windows_segments_are_judged_by_the_new_plan(target: Target) {
    let algorithm = PlanAlgorithm::SlidingWindow { segments: 10 };
    let changed = plan_changes(target, algorithm, "plans-sliding").await;
    assert_eq!(changed, (0, 45));
}

scenario!(gcras_arrival_time_carries_over_to_the_new_plan);

/// The theoretical arrival time carries over: 30 of pro's permits are 360 s of free's
/// 600 s tolerance, which leaves free 2 more (120 s each); 5 of free's are the whole
/// tolerance, which pro's spacing pays back only as time passes.
async fn gcras_arrival_time_carries_over_to_the_new_plan(target: Target) {
    let changed = plan_changes(target, PlanAlgorithm::Gcra, "plans-gcra").await;
    assert_eq!(changed, (2, 0));
}

scenario!(a_token_buckets_tokens_carry_over_at_most_the_new_size);

/// The tokens left carry over, at most the new bucket's size: 20 of pro's left are 5 in
/// free's bucket; an empty bucket stays empty until the new plan's refill.
async fn a_token_buckets_tokens_carry_over_at_most_the_new_size(target: Target) {
    let changed = plan_changes(target, PlanAlgorithm::TokenBucket, "plans-bucket").await;
    assert_eq!(changed, (5, 0));
}

// ---------------------------------------------------------------------------------------------

/// What an authentication layer found out about the caller.
#[derive(Clone)]
struct Account {
    id: String,
    plan: Option<String>,
}

impl ChoosesPlan for Account {
    fn plan_choice(&self) -> PlanChoice<'_> {
        PlanChoice::plan_or_default(self.plan.as_deref()).customer(&self.id)
    }
}

/// One replica's router: `/` behind the plans free (5), pro (50) and the override of the
/// customer `acme` (20), keyed by `x-api-key`, each request's plan and customer from its
/// `Account` extension (set here from `x-api-key` and `x-plan`, as an authentication layer
/// would).
fn replica(coordination: &Coordination) -> axum::Router {
    let plans = RateLimitPlans::builder(coordination, "api", PlanAlgorithm::FixedWindow)
        .plan("free", Quota::new(5, WINDOW))
        .plan("pro", Quota::new(50, WINDOW))
        .customer_override("acme", Quota::new(20, WINDOW))
        .build()
        .expect("valid plans");
    let layer = RedisRateLimitLayer::plans(plans)
        .key(KeyExtractor::header("x-api-key").expect("valid header"))
        .choose_plan(PlanChooser::extension::<Account>())
        .problem_json(true);
    axum::Router::new()
        .route(
            "/",
            axum::routing::get(|info: RateLimitInfo| async move {
                format!("{} {}", info.policy().name(), info.policy().quota())
            }),
        )
        .layer(layer)
        .layer(axum::middleware::from_fn(
            |mut request: Request<Body>, next: axum::middleware::Next| async move {
                let account = {
                    let header = |name: &str| {
                        let value = request.headers().get(name)?.to_str().ok()?;
                        Some(value.to_owned())
                    };
                    Account {
                        id: header("x-api-key").unwrap_or_default(),
                        plan: header("x-plan"),
                    }
                };
                request.extensions_mut().insert(account);
                next.run(request).await
            },
        ))
}

/// One `GET /` with `x-api-key: key` and, if any, `x-plan: plan`, through `router`.
async fn get(router: &axum::Router, key: &str, plan: Option<&str>) -> Response<Body> {
    use tower::ServiceExt as _;
    let mut request = Request::get("/").header("x-api-key", key);
    if let Some(plan) = plan {
        request = request.header("x-plan", plan);
    }
    router
        .clone()
        .oneshot(request.body(Body::empty()).expect("a request"))
        .await
        .expect("infallible")
}

async fn body_text(response: Response<Body>) -> String {
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    String::from_utf8_lossy(&bytes).into_owned()
}

scenario!(three_replicas_admit_each_client_its_plans_quota:
    memory => Target::Memory,
    redis7 => Target::Server(support::ServerKind::Redis7),
    cluster => Target::Cluster);

/// Three replicas, clients on free, on pro and with an override, their requests spread over
/// the replicas: each is admitted exactly its quota in the window, and its responses show its
/// plan's name and quota (the fields, the handler's information, the problem body).
async fn three_replicas_admit_each_client_its_plans_quota(target: Target) {
    let first = target.coordination("plans-replicas").await;
    let replicas: Vec<axum::Router> = target
        .handles(&first, 3)
        .await
        .iter()
        .map(replica)
        .collect();
    for (key, plan, quota, shown) in [
        ("alice", Some("free"), 5, "free"),
        ("bob", Some("pro"), 50, "pro"),
        ("acme", Some("free"), 20, "override"),
        ("carol", None, 5, "free"),
    ] {
        let mut admitted = 0;
        for i in 0..quota + 10 {
            let response = get(&replicas[i % 3], key, plan).await;
            let policy = response
                .headers()
                .get("ratelimit-policy")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            assert!(
                policy.starts_with(&format!("\"{shown}\";q={quota};w=600")),
                "{key}: {policy}"
            );
            match response.status() {
                StatusCode::OK => {
                    admitted += 1;
                    assert_eq!(body_text(response).await, format!("{shown} {quota}"));
                }
                StatusCode::TOO_MANY_REQUESTS => {
                    let body = body_text(response).await;
                    assert!(body.contains(&format!("\\\"{shown}\\\"")), "{key}: {body}");
                }
                other => panic!("{key}: {other}"),
            }
        }
        assert_eq!(admitted, quota, "{key} on {shown}");
    }
}

// ---------------------------------------------------------------------------------------------
// Plans stored in the backend and followed by every process.

/// Plans free (5) and pro (50) of a fixed window, stored, on `coordination`.
async fn stored(coordination: &Coordination) -> RateLimitPlans {
    RateLimitPlans::builder(coordination, "stored", PlanAlgorithm::FixedWindow)
        .plan("free", Quota::new(5, WINDOW))
        .plan("pro", Quota::new(50, WINDOW))
        .build_stored()
        .await
        .expect("stored plans")
}

/// Waits until `plans` has `free` at `limit` per window; how long that took. Bounded.
async fn until_free_is(plans: &RateLimitPlans, limit: u64) -> Duration {
    let started = std::time::Instant::now();
    loop {
        if plans.quota("free") == Some(Quota::new(limit, WINDOW).into()) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < support::PATIENCE,
            "free never became {limit}: {plans:?}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

scenario!(a_plan_changed_in_one_replica_applies_in_every_other:
    memory => Target::Memory,
    redis7 => Target::Server(support::ServerKind::Redis7),
    valkey8 => Target::Server(support::ServerKind::Valkey8),
    cluster => Target::Cluster);

/// Three replicas follow one stored plan set: a change made in one is in force there at
/// once, and in the two others as soon as they hear of it (the times are the benchmark's;
/// here each change must arrive, in order). A customer's override and a new default follow
/// the same way, and a replica built later takes the stored plans, not its configuration.
async fn a_plan_changed_in_one_replica_applies_in_every_other(target: Target) {
    let first = target.coordination("plans-stored").await;
    let handles = target.handles(&first, 3).await;
    let mut replicas = Vec::new();
    for handle in &handles {
        replicas.push(stored(handle).await);
    }
    for limit in 6..16 {
        replicas[limit as usize % 3]
            .set_plan("free", Quota::new(limit, WINDOW))
            .await
            .expect("stored");
        assert_eq!(
            replicas[limit as usize % 3].quota("free"),
            Some(Quota::new(limit, WINDOW).into()),
            "in force at once where it was made"
        );
        for replica in &replicas {
            until_free_is(replica, limit).await;
        }
    }
    let versions: Vec<u64> = replicas.iter().map(RateLimitPlans::version).collect();
    assert!(
        versions.iter().all(|v| *v == versions[0] && *v > 1),
        "{versions:?}"
    );

    replicas[1]
        .set_customer_override("acme", Quota::new(20, WINDOW))
        .await
        .expect("stored");
    replicas[2].set_default_plan("pro").await.expect("stored");
    for replica in &replicas {
        support::eventually("the override and the default arrive", async || {
            replica.customer_override("acme").await.ok()
                == Some(Some(Quota::new(20, WINDOW).into()))
                && &*replica.default_plan() == "pro"
        })
        .await;
    }
    // A replica started now takes the stored plans over its configuration.
    let later = stored(&target.handles(&first, 1).await[0]).await;
    assert_eq!(later.quota("free"), Some(Quota::new(15, WINDOW).into()));
    assert_eq!(&*later.default_plan(), "pro");
    // Decided under them: the override's 20.
    let decision = later
        .try_acquire(PlanChoice::plan("free").customer("acme"), b"acme-key", 1)
        .await
        .expect("decided");
    assert_eq!(decision.remaining(), 19);
}

scenario!(a_limit_the_algorithm_refuses_is_refused_when_set_and_nothing_is_stored:
    memory => Target::Memory,
    redis7 => Target::Server(support::ServerKind::Redis7));

/// An invalid limit is refused by the call that sets it, naming the plan and the value,
/// before anything is stored: the replicas keep deciding under the plans in force.
async fn a_limit_the_algorithm_refuses_is_refused_when_set_and_nothing_is_stored(target: Target) {
    let coordination = target.coordination("plans-refused").await;
    let plans = stored(&coordination).await;
    let version = plans.version();
    let err = plans
        .set_plan("free", Quota::new(0, WINDOW))
        .await
        .expect_err("a limit of 0");
    assert_eq!(err.kind(), leasehold::ErrorKind::InvalidArgument);
    let message = err.to_string();
    assert!(
        message.contains("\"free\"") && message.contains("0/600s"),
        "{message}"
    );
    let err = plans.remove_plan("free").await.expect_err("the default");
    assert!(err.to_string().contains("default"), "{err}");
    let err = plans
        .set_plan("pro", Quota::new(5, WINDOW).with_burst(9))
        .await
        .expect_err("a window's burst");
    assert!(err.to_string().contains("burst"), "{err}");
    assert_eq!(plans.version(), version, "nothing stored");
    let again = stored(&coordination).await;
    assert_eq!(again.quota("free"), Some(Quota::new(5, WINDOW).into()));
    assert_eq!(again.version(), version);
}

/// On a private server: checks under stored plans send the server no more commands than
/// under plans kept in process (no read of the plans per check: the server's command
/// statistics show it).
#[tokio::test]
async fn a_check_under_stored_plans_costs_no_extra_command() {
    let behind = support::Behind::start("plans-commands");
    let coordination = behind.direct().await;
    let in_process = RateLimitPlans::builder(&coordination, "local", PlanAlgorithm::FixedWindow)
        .plan("free", Quota::new(7, WINDOW))
        .build()
        .expect("valid");
    let plans = stored(&coordination).await;
    plans
        .set_plan("free", Quota::new(7, WINDOW))
        .await
        .expect("stored");
    let calls = || -> u64 {
        let stats: String = behind.server.cmd(&["INFO", "commandstats"]);
        stats
            .lines()
            .filter_map(|line| {
                line.split_once("calls=")?
                    .1
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    };
    let mut spent = Vec::new();
    for plans in [&in_process, &plans] {
        let before = calls();
        for i in 0..1000 {
            let key = format!("client-{i}");
            plans
                .try_acquire(PlanChoice::plan("free"), key.as_bytes(), 1)
                .await
                .expect("decided");
        }
        spent.push(calls() - before);
    }
    // Commands (and those of scripts) per check: the followers' own reads, at a change, are
    // a few in all, where a read per check would be one more per check.
    #[allow(clippy::cast_precision_loss)]
    let extra = (spent[1] as f64 - spent[0] as f64) / 1000.0;
    assert!(extra < 0.05, "{spent:?} for 1000 checks each");
}

/// On a private server: a plan set that is gone (deleted: as a restart without persistence
/// or an eviction leaves it) is stored again from the plans in force, also by a change made
/// before that (stored whole, never a set of the one field changed); an entry written by
/// hand that the algorithm refuses is left out, the others taken; and once the plans are
/// dropped, their follower ends.
#[tokio::test]
async fn a_lost_or_hand_written_plan_set_never_reaches_a_request() {
    let behind = support::Behind::start("plans-lost");
    let coordination = behind.direct().await;
    let plans = stored(&coordination).await;
    plans
        .set_plan("free", Quota::new(7, WINDOW))
        .await
        .expect("stored");
    let key = String::from_utf8_lossy(&coordination.backend().physical_key(b"rl:plans:6:stored"))
        .into_owned();
    let () = behind.server.cmd(&["DEL", &key]);
    support::eventually("the plan set is stored again", async || {
        let free: Option<String> = behind.server.cmd(&["HGET", &key, "plan:free"]);
        free.as_deref() == Some("7/600s")
    })
    .await;
    assert_eq!(plans.quota("free"), Some(Quota::new(7, WINDOW).into()));

    // Lost again, and changed at once (before the follower may store it again): stored
    // whole, the change with the rest, never a set of the one field changed.
    let () = behind.server.cmd(&["DEL", &key]);
    plans
        .set_plan("pro", Quota::new(60, WINDOW))
        .await
        .expect("stored");
    let stored: Vec<String> =
        behind
            .server
            .cmd(&["HMGET", &key, "plan:free", "plan:pro", "default"]);
    assert_eq!(stored, ["7/600s", "60/600s", "free"]);

    // An entry written by hand that the algorithm refuses is left out; the rest go on.
    let () = behind.server.cmd(&[
        "HSET",
        &key,
        "plan:broken",
        "0/600s",
        "plan:gold",
        "90/600s",
    ]);
    let () = behind.server.cmd(&["HINCRBY", &key, "version", "1"]);
    support::eventually("the usable entries are taken", async || {
        plans.quota("gold") == Some(Quota::new(90, WINDOW).into())
    })
    .await;
    assert_eq!(plans.quota("broken"), None);
    assert_eq!(plans.quota("free"), Some(Quota::new(7, WINDOW).into()));

    // Dropped, the plans' follower ends, and with it its watch.
    let redis = coordination.backend().as_redis().expect("Redis").clone();
    drop(plans);
    support::eventually("the follower's watch is gone", async || {
        redis.watch_count() == 0
    })
    .await;
}

/// A limit set while Redis cannot be reached is refused (unavailable), never kept in one
/// process alone; the plans in force stay. A replica started during the outage serves its
/// configured plans, and takes the stored ones once Redis answers.
#[tokio::test]
async fn a_change_during_an_outage_is_refused_and_a_replica_started_then_catches_up() {
    let behind = support::Behind::start("plans-outage");
    let direct = behind.direct().await;
    let writer = stored(&direct).await;
    writer
        .set_plan("free", Quota::new(9, WINDOW))
        .await
        .expect("stored");
    let follower = stored(&behind.through_proxy(|builder| builder).await).await;
    assert_eq!(follower.quota("free"), Some(Quota::new(9, WINDOW).into()));

    behind.proxy.refuse();
    behind.proxy.cut();
    // Once the handle has met the cut (a change sent just before it may have landed, its
    // answer lost: uncertain), the change is certainly not stored.
    support::eventually("the handle meets the cut", async || {
        follower
            .try_acquire(PlanChoice::plan("free"), b"probe", 0)
            .await
            .is_err()
    })
    .await;
    let err = follower
        .set_plan("free", Quota::new(11, WINDOW))
        .await
        .expect_err("Redis away");
    assert!(err.is_unavailable() && !err.is_outcome_uncertain(), "{err}");
    assert_eq!(
        follower.quota("free"),
        Some(Quota::new(9, WINDOW).into()),
        "kept"
    );

    // Started during the outage: its configuration, until Redis answers.
    let started = stored(&behind.through_proxy(|builder| builder).await).await;
    assert_eq!(started.quota("free"), Some(Quota::new(5, WINDOW).into()));
    behind.proxy.pass();
    until_free_is(&started, 9).await;
    writer
        .set_plan("free", Quota::new(12, WINDOW))
        .await
        .expect("stored");
    until_free_is(&started, 12).await;
    until_free_is(&follower, 12).await;
}

/// A layer over stored plans follows a change made in another replica: its fields show the
/// new quota and its decisions keep to it.
#[tokio::test]
async fn a_layer_follows_a_plan_raised_in_another_replica() {
    let first = Target::Server(support::ServerKind::Redis7)
        .coordination("plans-layer")
        .await;
    let handles = Target::Server(support::ServerKind::Redis7)
        .handles(&first, 2)
        .await;
    let admin = stored(&handles[0]).await;
    let router = support::http::behind(
        RedisRateLimitLayer::plans(stored(&handles[1]).await).key(KeyExtractor::global()),
    );
    let status = async || support::http::status_of(&router).await;
    for _ in 0..5 {
        assert_eq!(status().await, StatusCode::OK);
    }
    assert_eq!(status().await, StatusCode::TOO_MANY_REQUESTS);
    admin
        .set_plan("free", Quota::new(8, WINDOW))
        .await
        .expect("stored");
    support::eventually("the layer admits under the raised plan", async || {
        status().await == StatusCode::OK
    })
    .await;
    // 8 in all: the count carried over.
    assert_eq!(status().await, StatusCode::OK);
    assert_eq!(status().await, StatusCode::OK);
    assert_eq!(status().await, StatusCode::TOO_MANY_REQUESTS);
}

/// Every future of the plans' API is `Send`, as a handler's must be (checked at compile
/// time).
#[allow(dead_code)]
fn the_plans_futures_are_send(
    plans: &RateLimitPlans,
    builder: leasehold::coordination::rate_limit::RateLimitPlansBuilder,
) {
    fn send<T: Send>(_: T) {}
    let quota = Quota::per_minute(1);
    send(plans.try_acquire(PlanChoice::default_plan(), b"k", 1));
    send(plans.set_plan("a", quota));
    send(plans.remove_plan("a"));
    send(plans.set_default_plan("a"));
    send(plans.set_customer_override("c", quota));
    send(plans.remove_customer_override("c"));
    send(builder.build_stored());
}

/// `PUT` of `body` to `path` at `addr`, over one HTTP/1.1 connection: the status.
async fn put(addr: std::net::SocketAddr, path: &str, body: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "PUT {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut reply = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut reply))
        .await
        .expect("a reply within 10 s")
        .expect("read");
    reply
        .split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or_else(|| panic!("no status in {reply:?}"))
}

/// The plans example reads its limits from its file, serves them per plan, and its admin
/// route changes a plan at runtime (and refuses a quota it cannot read, naming it).
#[tokio::test]
async fn the_plans_example_reads_its_file_and_changes_a_plan_at_runtime() {
    let running = support::example::start("plans", &[]);
    let client = support::http::client();
    let api = async |plan: &str| {
        support::http::get(
            &client,
            running.addr,
            "/api",
            &[("x-api-key", "k1"), ("x-plan", plan)],
        )
        .await
    };
    for _ in 0..5 {
        let reply = api("free").await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("ratelimit-policy"), Some("\"free\";q=5;w=60"));
    }
    assert_eq!(api("free").await.status, 429);
    assert_eq!(
        put(running.addr, "/admin/plans/free", "ten a minute").await,
        400
    );
    assert_eq!(put(running.addr, "/admin/plans/free", "8/min").await, 200);
    for _ in 0..3 {
        let reply = api("free").await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("ratelimit-policy"), Some("\"free\";q=8;w=60"));
    }
    assert_eq!(api("free").await.status, 429);
    // Pro's 50, counted from the same key's 8.
    assert_eq!(
        api("pro").await.header("ratelimit"),
        Some("\"pro\";r=41;t=60")
    );
}

/// A configuration names the field and the value it cannot read.
#[test]
fn a_configuration_error_names_the_field_and_the_value() {
    use leasehold::coordination::rate_limit::RateLimitPlansConfig;
    let read = |text: &str| toml::from_str::<RateLimitPlansConfig>(text).map_err(|e| e.to_string());
    let config = read("algorithm = \"sliding_window\"\nsegments = 6\n[plans]\nfree = \"6/min\"\npro = \"60/min\"\n[overrides]\nacme = \"600/min\"\n")
        .expect("valid");
    assert_eq!(
        config.algorithm,
        PlanAlgorithm::SlidingWindow { segments: 6 }
    );
    assert_eq!(
        config.plans[1],
        ("pro".to_owned(), Quota::per_minute(60).into())
    );
    assert_eq!(config.overrides[0].0, "acme");
    let stacked =
        read("algorithm = \"stacked\"\n[plans]\nfree = \"10/s, 1000/day\"\n").expect("valid");
    assert_eq!(stacked.algorithm, PlanAlgorithm::Stacked);
    assert_eq!(
        stacked.plans[0].1,
        leasehold::coordination::rate_limit::Quotas::from([
            Quota::per_second(10),
            Quota::per_day(1000)
        ])
    );
    for (text, names) in [
        (
            "algorithm = \"leaky\"\n[plans]\nfree = \"1/s\"",
            ["algorithm", "leaky"],
        ),
        (
            "algorithm = \"gcra\"\n[plans]\nfree = \"1 per s\"",
            ["plans.free", "1 per s"],
        ),
        (
            "algorithm = \"gcra\"\n[plans]\nfree = \"1/s\"\n[overrides]\nacme = \"x\"",
            ["overrides.acme", "\"x\""],
        ),
        (
            "algorithm = \"gcra\"\nsegments = 3\n[plans]\nfree = \"1/s\"",
            ["segments", "gcra"],
        ),
        ("algorithm = \"gcra\"\nplan = 3", ["plan", "plans"]),
    ] {
        let err = read(text).expect_err(text);
        for name in names {
            assert!(err.contains(name), "{text:?}: {err}");
        }
    }
}

/// Changes made by three replicas in turn while the plan set's slot moves from master to
/// master: each is stored (latency, not errors) and in force in every replica.
#[tokio::test]
async fn stored_plans_ride_out_a_slot_move() {
    let cluster = std::sync::Arc::new(support::Cluster::start(support::ServerKind::Redis7));
    let handles = cluster.handles("plans-slot-move", 3).await;
    let mut replicas = Vec::new();
    for handle in &handles {
        replicas.push(stored(handle).await);
    }
    let key = handles[0].backend().physical_key(b"rl:plans:6:stored");
    let slot = leasehold::backend::key_slot(&key);
    let changing = async {
        let mut limit = 6;
        while limit < 200 {
            replicas[limit as usize % 3]
                .set_plan("free", Quota::new(limit, WINDOW))
                .await
                .unwrap_or_else(|err| panic!("the change to {limit}: {err}"));
            for replica in &replicas {
                until_free_is(replica, limit).await;
            }
            limit += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        limit
    };
    let moving = cluster.move_slot_around(slot, 3);
    tokio::pin!(moving);
    tokio::pin!(changing);
    // The changes go on while the slot moves, and at least until it has moved three times.
    let mut moved = false;
    loop {
        tokio::select! {
            () = &mut moving, if !moved => moved = true,
            limit = &mut changing => {
                assert!(moved, "the slot moved three times within {limit} changes");
                break;
            }
        }
    }
}

/// Stored plans across a Sentinel failover: the plans in force stay while the primary
/// changes, every replica agrees on them once the new primary answers (the set as it
/// replicated), and a change made after the failover is stored and in force everywhere.
#[tokio::test]
async fn stored_plans_ride_out_a_sentinel_failover() {
    let setup = std::sync::Arc::new(support::SentinelSetup::start(support::ServerKind::Redis7));
    let handles = setup.handles("plans-failover", 3).await;
    let mut replicas = Vec::new();
    for handle in &handles {
        replicas.push(stored(handle).await);
    }
    replicas[0]
        .set_plan("free", Quota::new(9, WINDOW))
        .await
        .expect("stored");
    for replica in &replicas {
        until_free_is(replica, 9).await;
    }
    let failing_over = setup.clone();
    let failover = tokio::task::spawn_blocking(move || failing_over.failover());
    // In force all along.
    while !failover.is_finished() {
        for replica in &replicas {
            assert_eq!(replica.quota("free"), Some(Quota::new(9, WINDOW).into()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    failover.await.expect("failed over");
    support::eventually("the change after the failover is stored", async || {
        replicas[1]
            .set_plan("free", Quota::new(10, WINDOW))
            .await
            .is_ok()
    })
    .await;
    for replica in &replicas {
        until_free_is(replica, 10).await;
    }
}

/// Customers' overrides of stored plans, at scale: stored beside the plans, each process
/// holds only the customers its requests met, up to its bound; a held customer's checks cost
/// no read, a customer beyond the bound one read per check; a change made in one process
/// reaches the customers of every other. On a private server, whose command statistics
/// count the reads.
#[tokio::test]
async fn overrides_are_looked_up_once_per_customer_and_bounded_in_each_process() {
    let behind = support::Behind::start("plans-overrides");
    let admin = stored(&behind.direct().await).await;
    let serving =
        RateLimitPlans::builder(&behind.direct().await, "stored", PlanAlgorithm::FixedWindow)
            .plan("free", Quota::new(5, WINDOW))
            .plan("pro", Quota::new(50, WINDOW))
            .override_cache(2)
            .build_stored()
            .await
            .expect("stored plans");
    for (i, customer) in ["c0", "c1", "c2"].iter().enumerate() {
        admin
            .set_customer_override(customer, Quota::new(100 + i as u64, WINDOW))
            .await
            .expect("stored");
    }
    let calls = || -> u64 {
        let stats: String = behind.server.cmd(&["INFO", "commandstats"]);
        stats
            .lines()
            .filter(|line| line.starts_with("cmdstat_evalsha"))
            .filter_map(|line| {
                line.split_once("calls=")?
                    .1
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    };
    let check = async |customer: &str, key: &str| {
        serving
            .try_acquire(
                PlanChoice::plan("free").customer(customer),
                key.as_bytes(),
                1,
            )
            .await
            .expect("decided")
    };
    // Each customer gets its override; a customer without one, its plan.
    support::eventually("the overrides are stored", async || {
        check("c2", "k-c2").await.remaining() >= 90
    })
    .await;
    assert_eq!(check("c0", "k-c0").await.remaining(), 99);
    assert_eq!(check("nobody", "k-nobody").await.remaining(), 4);

    // Held: one script per check (the decision's), no read (a read per check would be 40;
    // the followers' own reads after the changes above may add one or two).
    check("c0", "k-c0").await;
    let before = calls();
    for _ in 0..20 {
        check("c0", "k-c0").await;
    }
    let spent = calls() - before;
    assert!(
        (20..=22).contains(&spent),
        "{spent} scripts for 20 checks of a held customer"
    );
    // Three customers in turn over a bound of two: once each has been met, held ones would
    // cost a script per check, but two cannot hold three.
    for customer in ["c0", "c1", "c2"] {
        check(customer, &format!("k-{customer}")).await;
    }
    let before = calls();
    for round in 0..9 {
        let customer = ["c0", "c1", "c2"][round % 3];
        check(customer, &format!("k-{customer}")).await;
    }
    let spent = calls() - before;
    assert!(
        (10..=18).contains(&spent),
        "{spent} scripts for 9 checks: some reads, at most one each"
    );

    // A change made by the admin reaches the serving process's customers.
    admin
        .set_customer_override("c0", Quota::new(7, WINDOW))
        .await
        .expect("stored");
    support::eventually("the serving process takes the new override", async || {
        serving.customer_override("c0").await.ok() == Some(Some(Quota::new(7, WINDOW).into()))
    })
    .await;
    admin.remove_customer_override("c0").await.expect("stored");
    support::eventually("the override is gone everywhere", async || {
        serving.customer_override("c0").await.ok() == Some(None)
    })
    .await;

    // A customer held as having no override gets the one set later in another process:
    // the change empties every process's cache.
    let held = stored(&behind.direct().await).await;
    let quota_of = async |customer: &str| {
        held.limiter(PlanChoice::plan("free").customer(customer))
            .await
            .expect("decided")
            .policy()
            .quota()
    };
    assert_eq!(quota_of("late").await, 5, "held: no override");
    admin
        .set_customer_override("late", Quota::new(33, WINDOW))
        .await
        .expect("stored");
    support::eventually("the held customer gets its new override", async || {
        quota_of("late").await == 33
    })
    .await;
    // Any name is a customer's, `version` too, without touching the set's own count.
    admin
        .set_customer_override("version", Quota::new(44, WINDOW))
        .await
        .expect("stored");
    support::eventually("the customer named version", async || {
        quota_of("version").await == 44 && quota_of("c1").await == 101
    })
    .await;
}

/// Overrides configured in a process that stores its plans are stored beside them, for every
/// other process (which has none configured) to find.
#[tokio::test]
async fn configured_overrides_are_stored_for_every_process() {
    let first = Target::Server(support::ServerKind::Redis7)
        .coordination("plans-configured-overrides")
        .await;
    let handles = Target::Server(support::ServerKind::Redis7)
        .handles(&first, 2)
        .await;
    let configured = RateLimitPlans::builder(&handles[0], "stored", PlanAlgorithm::FixedWindow)
        .plan("free", Quota::new(5, WINDOW))
        .customer_override("acme", Quota::new(21, WINDOW))
        .build_stored()
        .await
        .expect("stored plans");
    let other = stored(&handles[1]).await;
    assert_eq!(
        other.customer_override("acme").await.expect("read"),
        Some(Quota::new(21, WINDOW).into())
    );
    assert_eq!(
        configured.customer_override("acme").await.expect("read"),
        Some(Quota::new(21, WINDOW).into())
    );
}

/// A layer over stored plans looks up a customer it does not hold before deciding its first
/// request: the override applies from the first request on, shown in the fields.
#[tokio::test]
async fn a_layer_decides_a_customers_first_request_under_its_stored_override() {
    let first = Target::Server(support::ServerKind::Redis7)
        .coordination("plans-layer-override")
        .await;
    let handles = Target::Server(support::ServerKind::Redis7)
        .handles(&first, 2)
        .await;
    let admin = stored(&handles[0]).await;
    admin
        .set_customer_override("acme", Quota::new(3, WINDOW))
        .await
        .expect("stored");
    let layer = RedisRateLimitLayer::plans(stored(&handles[1]).await)
        .key(KeyExtractor::header("x-api-key").expect("valid header"))
        .choose_plan(PlanChooser::extension::<Account>());
    let router = axum::Router::new()
        .route("/", axum::routing::get(|| async { "ok" }))
        .layer(layer)
        .layer(axum::middleware::from_fn(
            |mut request: Request<Body>, next: axum::middleware::Next| async move {
                let id = (request.headers().get("x-api-key"))
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                request.extensions_mut().insert(Account { id, plan: None });
                next.run(request).await
            },
        ));
    for _ in 0..3 {
        let response = get(&router, "acme", None).await;
        assert_eq!(response.status(), StatusCode::OK);
        let policy = response.headers().get("ratelimit-policy").cloned();
        assert_eq!(
            policy.as_ref().and_then(|v| v.to_str().ok()),
            Some("\"override\";q=3;w=600")
        );
    }
    assert_eq!(
        get(&router, "acme", None).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another customer: its plan, the default.
    let response = get(&router, "beta", None).await;
    assert_eq!(
        response
            .headers()
            .get("ratelimit-policy")
            .and_then(|v| v.to_str().ok()),
        Some("\"free\";q=5;w=600")
    );
}

/// A router over stored plans on `coordination`, failing as `policy` says: `/` keyed and
/// chosen by `x-api-key` (the customer) under the plan `pro`.
fn customers_router(
    plans: RateLimitPlans,
    policy: leasehold::layer::FailurePolicy,
) -> axum::Router {
    let layer = RedisRateLimitLayer::plans(plans)
        .key(KeyExtractor::header("x-api-key").expect("valid header"))
        .choose_plan(PlanChooser::extension::<Account>())
        .failure_policy(policy);
    axum::Router::new()
        .route("/", axum::routing::get(|| async { "ok" }))
        .layer(layer)
        .layer(axum::middleware::from_fn(
            |mut request: Request<Body>, next: axum::middleware::Next| async move {
                let id = (request.headers().get("x-api-key"))
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let plan = Some("pro".to_owned());
                request.extensions_mut().insert(Account { id, plan });
                next.run(request).await
            },
        ))
}

/// Redis silent while a customer this process does not hold sends its first request: the
/// lookup and the decision share the layer's timeout, so the failure policy answers within
/// it (not after twice it): 503 with `Retry-After` failing closed; failing open, the fallback
/// admits under the plan the request names. Timed from the moment the silence starts.
#[tokio::test]
async fn a_customers_first_request_during_an_outage_is_answered_within_the_timeout() {
    use leasehold::layer::FailurePolicy;
    let behind = support::Behind::start("plans-lookup-outage");
    let admin = stored(&behind.direct().await).await;
    admin
        .set_customer_override("acme", Quota::new(3, WINDOW))
        .await
        .expect("stored");
    // No circuit breaker: each request meets the silence itself.
    let serving = behind
        .through_proxy(|builder| builder)
        .await
        .circuit_breaker(None);
    let closed = customers_router(stored(&serving).await, FailurePolicy::default());
    let open = customers_router(stored(&serving).await, FailurePolicy::FailOpen);

    behind.proxy.blackhole();
    let silent_since = std::time::Instant::now();
    let response = get(&closed, "acme", None).await;
    let took = silent_since.elapsed();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    let timeout = leasehold::layer::rate_limit::DEFAULT_DECISION_TIMEOUT;
    assert!(
        took < timeout + Duration::from_millis(300),
        "answered {took:?} after the silence began, the timeout being {timeout:?}"
    );
    let started = std::time::Instant::now();
    let response = get(&open, "beta", None).await;
    assert_eq!(response.status(), StatusCode::OK, "the fallback admits");
    assert!(started.elapsed() < timeout + Duration::from_millis(300));
    behind.proxy.pass();
}

/// With the circuit breaker open, a customer this process does not hold is answered at once
/// under the plan its request names (no lookup is sent): failing open, by that plan's
/// fallback, which admits pro's quota, not the default plan's 5.
#[tokio::test]
async fn an_open_breaker_answers_an_unknown_customer_under_its_named_plan() {
    use leasehold::layer::FailurePolicy;
    let behind = support::Behind::start("plans-lookup-breaker");
    let serving = behind.through_proxy(|builder| builder).await;
    let open = customers_router(stored(&serving).await, FailurePolicy::FailOpen);
    behind.proxy.blackhole();
    // New customers until one is answered at once: the breaker has opened.
    let mut opened = false;
    for i in 0..40 {
        let started = std::time::Instant::now();
        let response = get(&open, &format!("customer-{i}"), None).await;
        assert_eq!(response.status(), StatusCode::OK, "failing open");
        if started.elapsed() < Duration::from_millis(100) {
            opened = true;
            break;
        }
    }
    assert!(opened, "the breaker opened");
    // One more unknown customer, ten requests: pro's fallback admits them all (the default
    // plan's would stop at 5).
    for request in 0..10 {
        let response = get(&open, "unknown", None).await;
        assert_eq!(response.status(), StatusCode::OK, "request {request}");
    }
    behind.proxy.pass();
}

scenario!(a_stacked_plans_windows_are_judged_by_the_new_plan);

/// Stacked plans (a window of 10 minutes and one of 20): the counts of every window carry
/// over, each against the new plan's limit for it; a plan whose windows differ from the
/// default plan's is refused, naming them.
async fn a_stacked_plans_windows_are_judged_by_the_new_plan(target: Target) {
    let coordination = target.coordination("plans-stacked").await;
    let longer = Duration::from_secs(1200);
    let plans = RateLimitPlans::builder(&coordination, "plans", PlanAlgorithm::Stacked)
        .plan("free", [Quota::new(5, WINDOW), Quota::new(8, longer)])
        .plan("pro", [Quota::new(50, WINDOW), Quota::new(80, longer)])
        .build()
        .expect("valid plans");
    assert_eq!(granted(&plans, "pro", b"downgraded", 30).await, 30);
    assert_eq!(granted(&plans, "free", b"downgraded", 60).await, 0);
    assert_eq!(granted(&plans, "free", b"upgraded", 10).await, 5);
    assert_eq!(granted(&plans, "pro", b"upgraded", 60).await, 45);
    let decision = plans
        .try_acquire(PlanChoice::plan("free"), b"fresh", 1)
        .await
        .expect("decided");
    assert!(decision.is_granted());
    let left: Vec<u64> = decision
        .policy_states()
        .iter()
        .map(|state| state.remaining())
        .collect();
    assert_eq!(left, [4, 7], "one state per window, each against its limit");
    // The longer window decides: 9 spent under pro leave free's 8 spent over, though its
    // 10-minute window (limit 10 here) has room.
    let wide = RateLimitPlans::builder(&coordination, "wide", PlanAlgorithm::Stacked)
        .plan("free", [Quota::new(10, WINDOW), Quota::new(8, longer)])
        .plan("pro", [Quota::new(50, WINDOW), Quota::new(80, longer)])
        .build()
        .expect("valid plans");
    assert_eq!(granted(&wide, "pro", b"client", 9).await, 9);
    assert_eq!(granted(&wide, "free", b"client", 5).await, 0);
    let shown: Vec<String> = plans
        .limiter(PlanChoice::plan("free"))
        .await
        .expect("in process")
        .policies()
        .iter()
        .map(|policy| policy.name().to_owned())
        .collect();
    assert_eq!(shown, ["free/600s", "free/1200s"]);

    let err = RateLimitPlans::builder(&coordination, "other", PlanAlgorithm::Stacked)
        .plan("free", [Quota::new(5, WINDOW), Quota::new(8, longer)])
        .plan("odd", [Quota::new(5, WINDOW)])
        .build()
        .expect_err("other windows");
    assert!(err.to_string().contains("600s, 1200s"), "{err}");
    let err = RateLimitPlans::builder(&coordination, "other", PlanAlgorithm::FixedWindow)
        .plan("free", [Quota::new(5, WINDOW), Quota::new(8, longer)])
        .build()
        .expect_err("two quotas");
    assert!(err.to_string().contains("one quota"), "{err}");
}
