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
