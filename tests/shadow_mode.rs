//! Shadow mode: a rate-limit layer that decides and records as enforced, but lets through
//! what it would reject, marked so that handlers and metrics can tell; on every path that
//! decides (the backend, the deny cache, the fail-open fallback), per layer, in part, and for
//! every layer at once.

#![cfg(all(feature = "metrics", feature = "axum"))]

mod support;

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Request, Response, StatusCode};
use leasehold::coordination::rate_limit::RateLimitPolicy;
use leasehold::layer::FailurePolicy;
use leasehold::layer::key::KeyExtractor;
use leasehold::layer::rate_limit::{
    RateLimitInfo, RedisRateLimitLayer, ShadowSwitch, set_shadow_mode,
};
use support::proxy::Proxy;
use support::recorder::{Recorded, decisions};
use support::{ServerKind, connect, shared};
use tower::ServiceExt as _;

/// The global switch is the process's: the tests that flip it or depend on it take turns.
static SWITCH: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A route that answers whether its request was a shadow rejection.
fn routed(layer: RedisRateLimitLayer) -> Router {
    Router::new().route(
        "/",
        get(|info: Option<RateLimitInfo>| async move {
            match info {
                Some(info) if info.is_shadow_rejection() => "shadow",
                Some(_) => "granted",
                None => "no decision",
            }
        })
        .layer(layer),
    )
}

async fn call(router: &Router) -> Response<Body> {
    let request = Request::get("/").body(Body::empty()).expect("a request");
    router.clone().oneshot(request).await.expect("infallible")
}

async fn body(response: Response<Body>) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), 1024)
        .await
        .expect("a body");
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A layer in shadow mode lets its rejections through, without rate-limit fields (clients
/// would hold back for a limit on trial) and with `RateLimitInfo` saying so; the metrics count them `shadow_limited`, not
/// `limited`, on the backend's path and the deny cache's. The shadow rejections consume
/// nothing: the limit's state is the one enforcement would leave.
#[tokio::test(flavor = "current_thread")]
async fn a_shadow_layer_lets_rejections_through_marked_and_counted() {
    let _switch = SWITCH.lock().await;
    let recorded = Recorded::start();
    let coordination = connect(shared(ServerKind::Redis7).url(), "shadow").await;
    let minute = Duration::from_secs(60);
    let layer = |name: &str| {
        RedisRateLimitLayer::fixed_window(&coordination, name, 2, minute)
            .expect("valid")
            .key(KeyExtractor::global())
            .shadow(true)
    };
    let stored = routed(layer("stored"));
    let cached = routed(layer("cached").deny_cache(10));
    for router in [&stored, &cached] {
        let mut answers = Vec::new();
        for _ in 0..4 {
            let response = call(router).await;
            assert_eq!(response.status(), StatusCode::OK);
            let fields = response
                .headers()
                .get("ratelimit")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            answers.push((body(response).await, fields));
        }
        let bodies: Vec<&str> = answers.iter().map(|(b, _)| b.as_str()).collect();
        assert_eq!(bodies, ["granted", "granted", "shadow", "shadow"]);
        // The grants show the limit; the shadow rejections show nothing a client would
        // hold back for (their `r=0`).
        assert!(
            answers[1].1.as_deref().is_some_and(|f| f.contains(";r=0")),
            "{:?}",
            answers[1].1
        );
        assert_eq!(answers[2].1, None);
        assert_eq!(answers[3].1, None);
    }
    let taken = recorded.take();
    for policy in ["stored", "cached"] {
        assert_eq!(decisions(&taken, policy, "allowed"), 2, "{policy}");
        assert_eq!(decisions(&taken, policy, "shadow_limited"), 2, "{policy}");
        assert_eq!(decisions(&taken, policy, "limited"), 0, "{policy}");
    }
    // Nothing consumed by the shadow rejections: the counter stands at the limit.
    let enforced = routed(
        RedisRateLimitLayer::fixed_window(&coordination, "stored", 2, minute)
            .expect("valid")
            .key(KeyExtractor::global()),
    );
    assert_eq!(
        call(&enforced).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// While failing open, the fallback's rejections are let through in shadow mode too, and
/// counted as failing open.
#[tokio::test(flavor = "current_thread")]
async fn a_shadow_layer_failing_open_lets_the_fallbacks_rejections_through() {
    let _switch = SWITCH.lock().await;
    let recorded = Recorded::start();
    let proxy = Proxy::to_port(shared(ServerKind::Redis7).port());
    let coordination = connect(proxy.url(), "shadow-open").await;
    let router = routed(
        RedisRateLimitLayer::fixed_window(&coordination, "open", 1, Duration::from_secs(60))
            .expect("valid")
            .key(KeyExtractor::global())
            .failure_policy(FailurePolicy::FailOpen)
            .shadow(true),
    );
    proxy.refuse();
    proxy.cut();
    for _ in 0..3 {
        let response = call(&router).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(body(response).await, "no decision");
    }
    assert_eq!(decisions(&recorded.take(), "open", "failed_open"), 3);
    proxy.pass();
}

/// The switch for every layer puts an enforcing layer in shadow mode, and gives it back its
/// own setting when turned off; a share enforces about its proportion of the rejections.
#[tokio::test(flavor = "current_thread")]
async fn the_switch_for_every_layer_and_a_share_enforce_as_told() {
    let _switch = SWITCH.lock().await;
    let recorded = Recorded::start();
    let coordination = connect(shared(ServerKind::Redis7).url(), "shadow-switch").await;
    let enforcing = routed(
        RedisRateLimitLayer::fixed_window(&coordination, "enforcing", 1, Duration::from_secs(60))
            .expect("valid")
            .key(KeyExtractor::global()),
    );
    assert_eq!(call(&enforcing).await.status(), StatusCode::OK);
    assert_eq!(
        call(&enforcing).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    set_shadow_mode(true);
    let shadowed = call(&enforcing).await;
    set_shadow_mode(false);
    assert_eq!(shadowed.status(), StatusCode::OK);
    assert_eq!(body(shadowed).await, "shadow");
    assert_eq!(
        call(&enforcing).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    let taken = recorded.take();
    assert_eq!(decisions(&taken, "enforcing", "limited"), 2);
    assert_eq!(decisions(&taken, "enforcing", "shadow_limited"), 1);

    let half = routed(
        RedisRateLimitLayer::fixed_window(&coordination, "half", 1, Duration::from_secs(60))
            .expect("valid")
            .key(KeyExtractor::global())
            .enforced_share(0.5),
    );
    assert_eq!(call(&half).await.status(), StatusCode::OK);
    let mut refused = 0;
    for _ in 0..400 {
        if call(&half).await.status() == StatusCode::TOO_MANY_REQUESTS {
            refused += 1;
        }
    }
    assert!((140..260).contains(&refused), "{refused} of 400 enforced");
    let taken = recorded.take();
    assert_eq!(decisions(&taken, "half", "limited"), refused);
    assert_eq!(decisions(&taken, "half", "shadow_limited"), 400 - refused);
}

/// A layer given a switch of its own follows it alone: the switch puts it (and the other
/// layer given a clone) in shadow mode and leaves a layer of another switch enforced, and
/// the process-wide switch leaves it enforced. This test takes turns with the ones that flip
/// the process's switch only to show that it does not follow it.
#[tokio::test(flavor = "current_thread")]
async fn a_layer_on_its_own_switch_follows_that_switch_alone() {
    let _switch = SWITCH.lock().await;
    let coordination = connect(shared(ServerKind::Redis7).url(), "shadow-own-switch").await;
    let (tenant, other) = (ShadowSwitch::new(), ShadowSwitch::new());
    let layer = |name: &str, switch: &ShadowSwitch| {
        routed(
            RedisRateLimitLayer::fixed_window(&coordination, name, 1, Duration::from_secs(60))
                .expect("valid")
                .key(KeyExtractor::global())
                .shadow_switch(switch),
        )
    };
    let (search, export, billing) = (
        layer("search", &tenant),
        layer("export", &tenant.clone()),
        layer("billing", &other),
    );
    for router in [&search, &export, &billing] {
        assert_eq!(call(router).await.status(), StatusCode::OK);
    }
    tenant.set(true);
    for router in [&search, &export] {
        let response = call(router).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(body(response).await, "shadow");
    }
    assert_eq!(
        call(&billing).await.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "another switch's layer stays enforced"
    );
    tenant.set(false);
    set_shadow_mode(true);
    let under_global = call(&search).await.status();
    set_shadow_mode(false);
    assert_eq!(
        under_global,
        StatusCode::TOO_MANY_REQUESTS,
        "the process's switch does not govern a layer with its own"
    );
}

/// A stacked layer with a shadow policy beside an enforced one: the shadow policy's
/// rejections go through, marked and counted `shadow_limited`; the enforced policy's are
/// `429`, counted `limited`.
#[tokio::test(flavor = "current_thread")]
async fn a_shadow_policy_of_a_stacked_layer_is_counted_apart() {
    let _switch = SWITCH.lock().await;
    let recorded = Recorded::start();
    let coordination = connect(shared(ServerKind::Redis7).url(), "shadow-policy").await;
    let router = routed(
        RedisRateLimitLayer::stacked(
            &coordination,
            "stack",
            [
                RateLimitPolicy::new("minute", 3, Duration::from_secs(60)),
                RateLimitPolicy::new("trial", 1, Duration::from_secs(60)).shadow(),
            ],
        )
        .expect("valid")
        .key(KeyExtractor::global()),
    );
    let mut seen = Vec::new();
    for _ in 0..4 {
        let response = call(&router).await;
        let status = response.status().as_u16();
        // The policy on trial is never shown to clients, who would hold back for it.
        for field in ["ratelimit", "ratelimit-policy"] {
            let value = response.headers().get(field).expect("the field");
            let value = value.to_str().expect("ASCII");
            assert!(
                value.contains("stack/minute") && !value.contains("trial"),
                "{value}"
            );
        }
        seen.push((status, body(response).await));
    }
    let seen: Vec<(u16, &str)> = seen.iter().map(|(s, b)| (*s, b.as_str())).collect();
    assert_eq!(
        seen,
        [
            (200, "granted"),
            (200, "shadow"),
            (200, "shadow"),
            (429, "")
        ]
    );
    let taken = recorded.take();
    assert_eq!(decisions(&taken, "stack", "allowed"), 1);
    assert_eq!(decisions(&taken, "stack", "shadow_limited"), 2);
    assert_eq!(decisions(&taken, "stack", "limited"), 1);

    // The handler's `RateLimitInfo` names the policy the fields name, never the one on
    // trial, though it alone has nothing left.
    let named = Router::new().route(
        "/",
        get(|info: RateLimitInfo| async move { info.policy().name().to_owned() }).layer(
            RedisRateLimitLayer::stacked(
                &coordination,
                "named",
                [
                    RateLimitPolicy::new("minute", 3, Duration::from_secs(60)),
                    RateLimitPolicy::new("trial", 1, Duration::from_secs(60)).shadow(),
                ],
            )
            .expect("valid")
            .key(KeyExtractor::global()),
        ),
    );
    for _ in 0..2 {
        let named_policy = body(call(&named).await).await;
        assert!(
            named_policy.contains("minute") && !named_policy.contains("trial"),
            "{named_policy}"
        );
    }
}
