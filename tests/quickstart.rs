//! The quickstart example runs on a fresh machine without Redis, and against Redis when
//! `REDIS_URL` is set: the compiled example is started as a user would start it.

#![cfg(feature = "axum")]

mod support;

use support::example::{self, Running};
use support::http::{client, get};
use support::{Server, ServerKind, shared};

/// Starts the quickstart, with `REDIS_URL` when given.
fn start(redis_url: Option<String>) -> Running {
    let env: Vec<(&str, String)> = redis_url
        .map(|url| ("REDIS_URL", url))
        .into_iter()
        .collect();
    example::start("quickstart", &env)
}

async fn five_then_429(addr: std::net::SocketAddr) {
    let client = client();
    for _ in 0..5 {
        let reply = get(&client, addr, "/hello", &[]).await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.body, "Hello!\n");
    }
    let reply = get(&client, addr, "/hello", &[]).await;
    assert_eq!(reply.status, 429);
    let retry = reply.retry_after_secs();
    // Up to one second more than the window: Redis frees it a millisecond after its TTL.
    assert!((1..=11).contains(&retry), "Retry-After {retry}");
    assert_eq!(reply.header("ratelimit-policy"), Some("\"hello\";q=5;w=10"));
}

#[tokio::test]
async fn quickstart_runs_without_redis() {
    let running = start(None);
    let (addr, lines) = (running.addr, &running.lines);
    assert!(
        lines.iter().any(|l| l.starts_with("backend: memory")),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l.starts_with("policy:")), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("curl") && l.contains(&addr.to_string())),
        "{lines:?}"
    );
    five_then_429(addr).await;
}

#[tokio::test]
async fn quickstart_uses_redis_when_redis_url_is_set() {
    let server = shared(ServerKind::Redis7);
    // The example names its keys with its own prefix.
    let key = "quickstart:|rl:fw:5:hello:ip:127.0.0.1";
    let () = server.cmd(&["DEL", key]);
    let running = start(Some(server.url()));
    let (addr, lines) = (running.addr, &running.lines);
    assert!(
        lines
            .iter()
            .any(|l| l == &format!("backend: {}", server.url())),
        "{lines:?}"
    );
    five_then_429(addr).await;
    // The limit lives in Redis, where every replica would see it: five grants, and the
    // rejection, which a step of one permit leaves counted once the window is full.
    let count: Option<String> = server.cmd(&["GET", key]);
    assert_eq!(count.as_deref(), Some("6"));
}

/// A password in `REDIS_URL` is never printed: the example shows the URL with it masked.
#[tokio::test]
async fn quickstart_masks_the_password_of_redis_url() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let () = server.cmd(&["CONFIG", "SET", "requirepass", "s3cret"]);
    let url = format!("redis://:s3cret@127.0.0.1:{}", server.port());
    let running = start(Some(url));
    let (addr, lines) = (running.addr, &running.lines);
    assert!(
        lines
            .iter()
            .any(|l| l == &format!("backend: redis://:***@127.0.0.1:{}", server.port())),
        "{lines:?}"
    );
    assert!(!lines.iter().any(|l| l.contains("s3cret")), "{lines:?}");
    five_then_429(addr).await;
}
