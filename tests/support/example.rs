//! Starts a compiled example as a user would: its own process, configured by environment
//! variables, ready once it prints its "listening on" line.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running example, killed when dropped.
pub struct Running {
    child: Child,
    /// Where it listens (`PORT` on the loopback address).
    pub addr: SocketAddr,
    /// What it printed on stdout up to its "listening on" line.
    pub lines: Vec<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The example binary that `cargo test` built beside this test. `cargo test --test <name>`
/// alone does not rebuild examples: after changing one, run `cargo build --examples` too.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<test> -> target/<profile>/examples/<name>
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let binary = profile_dir.join("examples").join(name);
    assert!(
        binary.exists(),
        "{} is missing: run the tests with `cargo test` (which builds examples)",
        binary.display()
    );
    binary
}

/// Starts the example `name` on a free port with `env` (and without `REDIS_URL` unless `env`
/// sets it), and waits (bounded) for its "listening" line.
pub fn start(name: &str, env: &[(&str, String)]) -> Running {
    let port = super::server::free_port();
    let mut command = Command::new(binary(name));
    command
        .env("PORT", port.to_string())
        .env_remove("REDIS_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("start the example");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut running = Running {
        child,
        addr: ([127, 0, 0, 1], port).into(),
        lines: Vec::new(),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("no 'listening' line within 10 s; got {:?}", running.lines));
        let done = line.starts_with("listening on ");
        running.lines.push(line);
        if done {
            return running;
        }
    }
}
