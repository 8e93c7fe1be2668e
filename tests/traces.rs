//! What the crate logs, and at which level, against a real server: a rejection is no
//! warning; a refusal (a misconfiguration every request meets) is one `ERROR` every ten
//! seconds, the rest at `DEBUG`; a fixed window told once per handle that the server lacks
//! `INCREX`, in the crate's words. Each test owns one of the process's ten-second turns, so
//! that tests running side by side do not take each other's: keep it so when adding one.

#![cfg(feature = "axum")]

mod support;

use std::time::Duration;

use http::StatusCode;
use leasehold::layer::FailurePolicy;
use leasehold::layer::key::KeyExtractor;
use leasehold::layer::rate_limit::RedisRateLimitLayer;
use support::http::{behind, status_of};
use support::{ServerKind, connect, shared};

/// Rejections are no event above `DEBUG`; a server without `INCREX` is told at `INFO` once
/// per handle, however many fixed windows meet it, without the reply's raw text (a client's
/// address); and an ACL that denies the scripts, which refuses every request, is one
/// `ERROR` from the step and one from the layer, the rest at `DEBUG`.
#[tokio::test(flavor = "current_thread")]
async fn a_rejection_is_no_warning_and_a_refusal_is_one_error() {
    let logs = support::logs::capture();
    let coordination = connect(shared(ServerKind::Redis7).url(), "traces").await;
    let minute = Duration::from_secs(60);
    let layer = |name| {
        RedisRateLimitLayer::fixed_window(&coordination, name, 1, minute)
            .expect("valid")
            .key(KeyExtractor::global())
    };
    let (first, second) = (behind(layer("first")), behind(layer("second")));
    for router in [&first, &second] {
        assert_eq!(status_of(router).await, StatusCode::OK);
        for _ in 0..3 {
            assert_eq!(status_of(router).await, StatusCode::TOO_MANY_REQUESTS);
        }
    }
    assert_eq!(logs.count("WARN", ""), 0, "{:?}", logs.lines("WARN", ""));
    assert_eq!(logs.count("ERROR", ""), 0, "{:?}", logs.lines("ERROR", ""));
    let increx = logs.lines("INFO", "INCREX");
    assert_eq!(increx.len(), 1, "once per handle: {increx:?}");
    assert!(
        !increx[0].contains("127.0.0.1")
            && !increx[0].contains("addr=")
            && !increx[0].contains("with args"),
        "no client address, nor the key the server quotes: {increx:?}"
    );

    let url = shared(ServerKind::Redis7).acl_user(&["-@scripting", "-incr"]);
    let refusing = connect(url, "traces_refused").await;
    let refused = behind(
        RedisRateLimitLayer::fixed_window(&refusing, "refused", 10, minute)
            .expect("valid")
            .key(KeyExtractor::global())
            .failure_policy(FailurePolicy::FailOpen),
    );
    for _ in 0..5 {
        assert_eq!(
            status_of(&refused).await,
            StatusCode::SERVICE_UNAVAILABLE,
            "a refusal never fails open"
        );
    }
    // One line from the step, one from the layer (what it answers), for five refusals.
    let errors = logs.lines("ERROR", "");
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(logs.count("ERROR", "the backend refused a step"), 1);
    assert_eq!(logs.count("ERROR", "answering 503"), 1);
    assert!(
        errors.iter().all(|line| line.contains("NoPerm")),
        "{errors:?}"
    );
    assert!(
        logs.count("DEBUG", "step failed") >= 4,
        "the others at DEBUG: {:?}",
        logs.lines("DEBUG", "")
    );
}

/// A server that records no peer address fails every request keyed by it with 500: one
/// `ERROR` that says what to change, the rest at `DEBUG`.
#[tokio::test(flavor = "current_thread")]
async fn a_server_without_peer_addresses_is_one_error_not_one_per_request() {
    let logs = support::logs::capture();
    let coordination = connect(shared(ServerKind::Redis7).url(), "traces_peer").await;
    let router = behind(
        RedisRateLimitLayer::fixed_window(&coordination, "peer", 10, Duration::from_secs(60))
            .expect("valid")
            .key(KeyExtractor::peer_ip()),
    );
    for _ in 0..5 {
        assert_eq!(status_of(&router).await, StatusCode::INTERNAL_SERVER_ERROR);
    }
    let errors = logs.lines("ERROR", "");
    assert_eq!(errors.len(), 1, "one line for five requests: {errors:?}");
    assert!(
        errors[0].contains("connect_info"),
        "says what to change: {errors:?}"
    );
    assert_eq!(logs.count("DEBUG", "cannot derive the request's key"), 4);
}

/// A handler that asks for the decision of a rate limit the route does not have (or one
/// that failed open and left none) answers 500 on every request: one `ERROR` every ten
/// seconds says why, the rest at `DEBUG`.
#[tokio::test(flavor = "current_thread")]
async fn a_missing_decision_is_one_error_not_one_per_request() {
    use leasehold::layer::rate_limit::RateLimitInfo;
    use tower::ServiceExt as _;
    let logs = support::logs::capture();
    let router = axum::Router::new().route(
        "/",
        axum::routing::get(|_info: RateLimitInfo| async { "ok" }),
    );
    for _ in 0..5 {
        let request = http::Request::get("/")
            .body(axum::body::Body::empty())
            .expect("a request");
        let status = router
            .clone()
            .oneshot(request)
            .await
            .expect("infallible")
            .status();
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    }
    let errors = logs.lines("ERROR", "no rate-limit decision");
    assert_eq!(errors.len(), 1, "one line for five requests: {errors:?}");
    assert_eq!(logs.count("DEBUG", "no rate-limit decision"), 4);
}

/// A release given up names no key at `WARN`: a lease named from a request (here a client's
/// address) leaves its name at `DEBUG` only, and the warning says which holding by the
/// first digits of its token (the whole token is a credential). A handle dropped with no
/// runtime to release it on is such a release.
#[test]
fn a_release_given_up_names_no_client_key_above_debug() {
    use leasehold::coordination::lock::FencedLock;
    let logs = support::logs::capture();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let coordination = leasehold::Coordination::memory();
    let lock = FencedLock::named(&coordination, "client:203.0.113.9");
    let lease = runtime.block_on(async {
        lock.try_acquire(Duration::from_secs(60))
            .await
            .expect("try")
            .acquired()
            .expect("free")
    });
    let token = lease.owner_token().to_string();
    drop(runtime);
    drop(lease);
    let warnings = logs.lines("WARN", "gave up releasing");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains(&token[..8]),
        "says which holding: {warnings:?}"
    );
    assert!(
        !warnings[0].contains(&token),
        "never the whole token, a credential: {warnings:?}"
    );
    for level in ["INFO", "WARN", "ERROR"] {
        assert_eq!(logs.count(level, "203.0.113.9"), 0, "{level}");
    }
    assert!(logs.count("DEBUG", "the keys of the release given up") == 1);
}
