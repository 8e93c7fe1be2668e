//! The quickstart example runs on a fresh machine without Redis, and against Redis when
//! `REDIS_URL` is set: the compiled example is started as a user would start it.

#![cfg(feature = "axum")]

mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::http::{client, get};
use support::{Server, ServerKind, shared};

/// The example binary that `cargo test` built beside this test.
fn quickstart_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> -> target/<profile>/examples/quickstart
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let binary = profile_dir.join("examples").join("quickstart");
    assert!(
        binary.exists(),
        "{} is missing: run the tests with `cargo test` (which builds examples)",
        binary.display()
    );
    binary
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the quickstart on a free port and waits (bounded) for its "listening" line.
fn start(redis_url: Option<String>) -> (Running, std::net::SocketAddr, Vec<String>) {
    let port = support::server::free_port();
    let mut command = Command::new(quickstart_binary());
    command
        .env("PORT", port.to_string())
        .env_remove("REDIS_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(url) = redis_url {
        command.env("REDIS_URL", url);
    }
    let mut child = command.spawn().expect("start the quickstart");
    let stdout = child.stdout.take().expect("piped stdout");
    let running = Running(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("no 'listening' line within 10 s; got {lines:?}"));
        let done = line.starts_with("listening on ");
        lines.push(line);
        if done {
            break;
        }
    }
    (running, ([127, 0, 0, 1], port).into(), lines)
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
    let (_running, addr, lines) = start(None);
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
    let key = "quickstart:rl:fw:5:hello:ip:127.0.0.1";
    let () = server.cmd(&["DEL", key]);
    let (_running, addr, lines) = start(Some(server.url()));
    assert!(
        lines
            .iter()
            .any(|l| l == &format!("backend: {}", server.url())),
        "{lines:?}"
    );
    five_then_429(addr).await;
    // The limit lives in Redis, where every replica would see it.
    let count: Option<String> = server.cmd(&["GET", key]);
    assert_eq!(count.as_deref(), Some("5"));
}

/// A password in `REDIS_URL` is never printed: the example shows the URL with it masked.
#[tokio::test]
async fn quickstart_masks_the_password_of_redis_url() {
    let server = Server::start(ServerKind::Redis7, &[]);
    let () = server.cmd(&["CONFIG", "SET", "requirepass", "s3cret"]);
    let url = format!("redis://:s3cret@127.0.0.1:{}", server.port());
    let (_running, addr, lines) = start(Some(url));
    assert!(
        lines
            .iter()
            .any(|l| l == &format!("backend: redis://:***@127.0.0.1:{}", server.port())),
        "{lines:?}"
    );
    assert!(!lines.iter().any(|l| l.contains("s3cret")), "{lines:?}");
    five_then_429(addr).await;
}
