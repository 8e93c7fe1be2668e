//! A process of the test binary itself, running one of its tests as a role (a holder to
//! freeze, a replica, a contender): started with a setting in an environment variable, its
//! stdout read line by line, killed when dropped, and frozen (SIGSTOP) and thawed on demand.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::sync::mpsc;

/// A running test process.
pub struct TestProcess {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    /// Waited for: nothing to kill.
    ended: bool,
}

impl TestProcess {
    /// Runs the test `role` of this binary with `variable` set to `setting` (the role's test
    /// does nothing without it), from the spawner thread, so that it dies with this binary.
    pub fn start(role: &str, variable: &str, setting: &str) -> TestProcess {
        let mut command = Command::new(std::env::current_exe().expect("the test binary"));
        command
            .args(["--exact", role, "--ignored", "--nocapture"])
            .env(variable, setting)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = super::spawner::spawn(command).expect("start a test process");
        let stdout = child.stdout.take().expect("piped");
        let (sender, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        TestProcess {
            child,
            lines,
            ended: false,
        }
    }

    /// The rest of the next line that starts with `prefix`, within `within`.
    pub async fn line(&mut self, prefix: &str, within: Duration) -> String {
        tokio::time::timeout(within, async {
            loop {
                let line = self.lines.recv().await.expect("the process prints it");
                if let Some(rest) = line.strip_prefix(prefix) {
                    return rest.to_owned();
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no line starting with {prefix:?} within {within:?}"))
    }

    /// Drops every line read so far and not yet taken.
    pub fn drain(&mut self) {
        while self.lines.try_recv().is_ok() {}
    }

    /// The next line, whatever it is (unbounded: wrap it in a timeout).
    pub async fn next_line(&mut self) -> String {
        self.lines.recv().await.expect("the process prints a line")
    }

    /// Every remaining line that starts with `prefix`, once the process has ended (it must
    /// succeed), within `within`.
    pub async fn finish(mut self, prefix: &str, within: Duration) -> Vec<String> {
        let mut found = Vec::new();
        tokio::time::timeout(within, async {
            while let Some(line) = self.lines.recv().await {
                if line.starts_with(prefix) {
                    found.push(line);
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the process did not end within {within:?}"));
        let status = self.child.wait().expect("wait");
        self.ended = true;
        assert!(status.success(), "the test process failed: {status}");
        found
    }

    /// Freezes the process (SIGSTOP), as a long pause or a stalled VM would.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Thaws a frozen process (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal}");
    }
}

impl Drop for TestProcess {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // Thawed first, so that a frozen process dies of the kill.
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
