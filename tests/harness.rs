//! Self-test of the real-server harness in `tests/support`.

mod support;

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redis::Commands;
use support::server::info_field;
use support::{Server, ServerKind, wait_until};

fn version_matches(server: &Server) {
    let info: String = server.cmd(&["INFO", "server"]);
    let (field, prefix) = match server.kind() {
        ServerKind::Redis5 => ("redis_version", "5.0."),
        ServerKind::Redis6 => ("redis_version", "6.2."),
        ServerKind::Redis7 => ("redis_version", "7.0."),
        ServerKind::Redis8 => ("redis_version", "8.2."),
        ServerKind::Valkey8 => ("valkey_version", "8.1."),
    };
    let version = info_field(&info, field)
        .unwrap_or_else(|| panic!("{}: no {field} in INFO server:\n{info}", server.kind()));
    assert!(
        version.starts_with(prefix),
        "{}: {field} {version}, expected {prefix}x",
        server.kind()
    );
    if server.kind() == ServerKind::Valkey8 {
        assert_eq!(info_field(&info, "server_name").as_deref(), Some("valkey"));
    }
}

fn ping_unix(server: &Server) {
    let mut con = redis::Client::open(server.unix_url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("{} over {}: {e}", server.kind(), server.unix_url()));
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn every_kind_answers_ping_and_reports_its_version() {
    for kind in ServerKind::ALL {
        let started = Instant::now();
        let server = support::shared(kind);
        eprintln!("{kind}: shared server ready in {:?}", started.elapsed());
        assert_eq!(server.kind(), kind);
        let pong: String = server.cmd(&["PING"]);
        assert_eq!(pong, "PONG");
        ping_unix(server);
        version_matches(server);
        assert!(
            std::ptr::eq(server, support::shared(kind)),
            "shared once per binary"
        );
    }
}

#[test]
fn private_server_restarts_on_the_same_port_and_socket() {
    let started = Instant::now();
    let server = Server::start(ServerKind::Valkey8, &["--maxmemory", "64mb"]);
    eprintln!("private valkey ready in {:?}", started.elapsed());
    let (port, socket, url, unix_url) = (
        server.port(),
        server.socket_path().to_owned(),
        server.url(),
        server.unix_url(),
    );
    assert_eq!(url, format!("redis://127.0.0.1:{port}"));
    assert!(unix_url.starts_with("redis+unix:///"), "{unix_url}");
    let key = format!("{}k", support::unique_prefix("restart"));
    let _: () = server.connection().set(&key, 1).unwrap();
    let first_pid = server.pid().expect("running");

    let started = Instant::now();
    server.restart();
    eprintln!("restart took {:?}", started.elapsed());
    assert!(server.is_running());
    assert_ne!(server.pid(), Some(first_pid));
    assert_eq!(
        (server.port(), server.socket_path()),
        (port, socket.as_path())
    );
    // No persistence: the restarted server is empty, and keeps its extra args.
    let value: Option<i64> = server.connection().get(&key).unwrap();
    assert_eq!(value, None);
    let maxmemory: Vec<String> = server.cmd(&["CONFIG", "GET", "maxmemory"]);
    assert_eq!(maxmemory[1], (64 * 1024 * 1024).to_string());
    ping_unix(&server);

    server.stop();
    assert!(!server.is_running());
    assert!(server.pid().is_none());
    assert!(server.try_connection(Duration::from_millis(200)).is_err());
    server.stop(); // idempotent
    server.start_again();
    assert!(server.is_running());
    server.start_again(); // no-op while running
    let pong: String = server.cmd(&["PING"]);
    assert_eq!(pong, "PONG");

    let pid = server.pid().unwrap();
    let dir = server.dir().to_owned();
    drop(server);
    assert!(!process_alive(pid), "a dropped server is killed");
    assert!(!dir.exists(), "a dropped server's dir is removed");
}

#[test]
fn start_again_retries_while_the_port_is_taken() {
    let server = Server::start(ServerKind::Redis7, &[]);
    server.stop();
    let squatter = std::net::TcpListener::bind(("127.0.0.1", server.port())).unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(80));
        drop(squatter);
    });
    server.start_again();
    release.join().unwrap();
    assert!(server.answers_ping());
    let log = std::fs::read_to_string(server.log_path()).unwrap();
    assert!(log.contains("Address already in use"), "{log}");
}

#[test]
fn cluster_is_ok_and_routes_keys() {
    let started = Instant::now();
    let cluster = support::cluster();
    eprintln!("cluster ready in {:?}", started.elapsed());
    assert_eq!(cluster.nodes().len(), 3);
    assert_eq!(cluster.urls().len(), 3);
    for node in cluster.nodes() {
        let info: String = node.cmd(&["CLUSTER", "INFO"]);
        assert_eq!(info_field(&info, "cluster_state").as_deref(), Some("ok"));
        version_matches(node);
    }
    let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    let mut con = client.get_connection().unwrap();
    let prefix = support::unique_prefix("cluster");
    for i in 0..30 {
        let _: () = con.set(format!("{prefix}{i}"), i).unwrap();
    }
    for i in 0..30 {
        let v: i64 = con.get(format!("{prefix}{i}")).unwrap();
        assert_eq!(v, i);
    }
    // The keys landed on more than one node.
    let holding = cluster
        .nodes()
        .iter()
        .filter(|n| n.cmd::<i64>(&["DBSIZE"]) > 0)
        .count();
    assert!(holding >= 2, "keys on {holding} node(s)");
}

#[test]
fn sentinel_resolves_the_master_and_fails_over() {
    let started = Instant::now();
    let setup = support::sentinel();
    eprintln!("sentinel setup ready in {:?}", started.elapsed());
    assert_eq!(setup.service_name(), "leasehold-master");
    assert_eq!(setup.sentinel_urls().len(), 3);
    let [a, b] = setup.data_nodes();
    let before = setup.master_port();
    assert!(before == a.port() || before == b.port());

    let resolved_port = |setup: &support::SentinelSetup| -> u16 {
        let mut con = setup.client().get_connection().unwrap();
        let port: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("port")
            .query(&mut con)
            .unwrap();
        port[1].parse().unwrap()
    };
    assert_eq!(resolved_port(setup), before);

    let started = Instant::now();
    setup.failover();
    eprintln!("failover took {:?}", started.elapsed());
    let after = setup.master_port();
    assert_ne!(after, before);
    assert!(after == a.port() || after == b.port());
    assert_eq!(setup.current_master().port(), after);
    assert_eq!(resolved_port(setup), after);
    let key = format!("{}k", support::unique_prefix("sentinel"));
    let _: () = setup.current_master().connection().set(&key, 1).unwrap();
}

#[test]
fn independent_servers_are_distinct() {
    let started = Instant::now();
    let three = support::independent(3);
    eprintln!("independent servers ready in {:?}", started.elapsed());
    let five = support::independent(5);
    assert_eq!(three.len(), 3);
    assert_eq!(five.len(), 5);
    assert!(
        std::ptr::eq(&three[0], &five[0]),
        "the same servers for every n"
    );
    let ports: HashSet<u16> = five.iter().map(Server::port).collect();
    assert_eq!(ports.len(), 5);
    let run_ids: HashSet<String> = five
        .iter()
        .map(|s| s.info_field("server", "run_id").unwrap())
        .collect();
    assert_eq!(run_ids.len(), 5);
    let key = format!("{}k", support::unique_prefix("independent"));
    let _: () = five[0].connection().set(&key, 1).unwrap();
    for other in &five[1..] {
        let v: Option<i64> = other.connection().get(&key).unwrap();
        assert_eq!(v, None);
    }
    for server in five {
        version_matches(server);
    }
}

#[test]
fn increx_server_answers_increx() {
    let started = Instant::now();
    let server = support::increx();
    eprintln!("increx server ready in {:?}", started.elapsed());
    let key = format!("{}k", support::unique_prefix("increx"));
    let reply: Vec<i64> = server.cmd(&[
        "INCREX", &key, "BYINT", "2", "UBOUND", "5", "PX", "1000", "ENX",
    ]);
    assert_eq!(reply, vec![2, 2]);
    // A plain server rejects INCREX.
    let plain = support::shared(ServerKind::Redis7);
    let err = redis::cmd("INCREX")
        .arg(&key)
        .query::<Vec<i64>>(&mut plain.connection())
        .unwrap_err();
    assert!(
        err.to_string().to_lowercase().contains("unknown command"),
        "{err}"
    );
}

#[test]
fn unique_prefixes_differ() {
    let a = support::unique_prefix("t");
    let b = support::unique_prefix("t");
    assert_ne!(a, b);
    assert!(a.starts_with(&format!("lh-test:{}:", std::process::id())));
    assert!(a.ends_with(":t:"));
}

// ---------------------------------------------------------------------------------------------
// Servers die with the test binary, however it ends.

const CHILD_MODE: &str = "LEASEHOLD_HARNESS_CHILD";

/// Not a real test: the body of a re-executed copy of this binary (see below).
#[test]
#[ignore = "run by servers_die_with_the_test_binary"]
fn child_starts_servers_then_ends_badly() {
    let Ok(mode) = std::env::var(CHILD_MODE) else {
        return;
    };
    let shared = support::shared(ServerKind::Redis7);
    let private = Server::start(ServerKind::Redis8, &[]);
    println!("SERVER_PID={}", shared.pid().unwrap());
    println!("SERVER_PID={}", private.pid().unwrap());
    match mode.as_str() {
        "panic" => panic!("on purpose"),
        "abort" => std::process::abort(),
        "exit" => std::process::exit(0),
        other => panic!("unknown mode {other}"),
    }
}

fn process_alive(pid: u32) -> bool {
    // A zombie (state Z) is dead; it may linger when no init reaps orphans.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .next();
            !matches!(state, Some("Z" | "X"))
        }
    }
}

#[test]
fn servers_die_with_the_test_binary() {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = ["panic", "abort", "exit"]
        .into_iter()
        .map(|mode| {
            let child = Command::new(&exe)
                .args([
                    "--exact",
                    "child_starts_servers_then_ends_badly",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_MODE, mode)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            (mode, child)
        })
        .collect();
    for (mode, mut child) in children {
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let pids: Vec<u32> = stdout
            .lines()
            .map_while(Result::ok)
            // The first line may start with libtest's "test <name> ... ".
            .filter_map(|l| {
                l.split_once("SERVER_PID=")
                    .map(|(_, p)| p.trim().parse().unwrap())
            })
            .collect();
        let status = child.wait().unwrap();
        assert_eq!(pids.len(), 2, "{mode}: child printed {pids:?} ({status})");
        wait_until(Duration::from_secs(5), "the child's servers to die", || {
            let alive: Vec<_> = pids.iter().filter(|p| process_alive(**p)).collect();
            if alive.is_empty() {
                Ok(())
            } else {
                Err(format!("{mode}: still alive: {alive:?}"))
            }
        });
    }
}

// ---------------------------------------------------------------------------------------------
// The fault proxy

mod fault_proxy {
    use std::io::{ErrorKind, Read, Write};
    use std::net::TcpStream;
    use std::time::{Duration, Instant};

    use super::support::proxy::{Direction, Proxy};
    use super::support::{ServerKind, shared};

    fn proxy() -> Proxy {
        Proxy::to_port(shared(ServerKind::Redis7).port())
    }

    fn connect(proxy: &Proxy) -> TcpStream {
        let stream = TcpStream::connect(proxy.addr()).expect("connect to the proxy");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        stream
    }

    /// Sends `PING` and reads `+PONG\r\n`.
    fn ping(stream: &mut TcpStream) -> std::io::Result<()> {
        stream.write_all(b"PING\r\n")?;
        let mut reply = [0u8; 7];
        stream.read_exact(&mut reply)?;
        assert_eq!(&reply, b"+PONG\r\n");
        Ok(())
    }

    #[test]
    fn passes_and_counts() {
        let proxy = proxy();
        let mut stream = connect(&proxy);
        ping(&mut stream).expect("a pong through the proxy");
        ping(&mut stream).expect("a second pong");
        assert_eq!(proxy.connections_accepted(), 1);
        assert_eq!(proxy.bytes(Direction::ToServer), 12);
        assert_eq!(proxy.bytes(Direction::ToClient), 14);
        super::wait_until(Duration::from_secs(5), "one open connection", || {
            (proxy.connections_open() == 1)
                .then_some(())
                .ok_or_else(|| format!("{} open", proxy.connections_open()))
        });
        drop(stream);
        super::wait_until(Duration::from_secs(5), "no open connection", || {
            (proxy.connections_open() == 0)
                .then_some(())
                .ok_or_else(|| format!("{} open", proxy.connections_open()))
        });
    }

    #[test]
    fn latency_delays_each_direction() {
        let proxy = proxy();
        let mut stream = connect(&proxy);
        proxy.latency(Direction::ToServer, Duration::from_millis(150));
        proxy.latency(Direction::ToClient, Duration::from_millis(100));
        let started = Instant::now();
        ping(&mut stream).expect("a late pong");
        assert!(
            started.elapsed() >= Duration::from_millis(250),
            "{:?}",
            started.elapsed()
        );
        proxy.pass();
        let started = Instant::now();
        ping(&mut stream).expect("a pong");
        assert!(
            started.elapsed() < Duration::from_millis(250),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_stall_holds_the_bytes_and_delivers_them_later() {
        let proxy = proxy();
        let mut stream = connect(&proxy);
        ping(&mut stream).expect("a pong");
        proxy.stall_direction(Direction::ToServer);
        stream.write_all(b"PING\r\n").expect("write");
        stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        let mut reply = [0u8; 7];
        let err = stream
            .read_exact(&mut reply)
            .expect_err("no reply while stalled");
        assert!(
            matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{err}"
        );
        assert_eq!(proxy.bytes(Direction::ToServer), 6, "the command is held");
        proxy.pass();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        stream
            .read_exact(&mut reply)
            .expect("the held command was delivered");
        assert_eq!(&reply, b"+PONG\r\n");
    }

    #[test]
    fn a_command_held_past_the_clients_close_still_arrives() {
        let server = shared(ServerKind::Redis7);
        let proxy = proxy();
        let key = format!("{}held", super::support::unique_prefix("proxy"));
        let mut stream = connect(&proxy);
        proxy.stall();
        let command = format!("SET {key} late\r\n");
        stream.write_all(command.as_bytes()).expect("write");
        drop(stream);
        std::thread::sleep(Duration::from_millis(100));
        let value: Option<String> = server.cmd(&["GET", &key]);
        assert_eq!(value, None, "held");
        proxy.pass();
        super::wait_until(Duration::from_secs(5), "the late SET lands", || {
            let value: Option<String> = server.cmd(&["GET", &key]);
            (value.as_deref() == Some("late"))
                .then_some(())
                .ok_or_else(|| format!("{value:?}"))
        });
    }

    #[test]
    fn a_severed_connection_delivers_what_it_held_after_its_client_went_on() {
        let server = shared(ServerKind::Redis7);
        let proxy = proxy();
        let key = format!("{}severed", super::support::unique_prefix("proxy"));
        let mut old = connect(&proxy);
        ping(&mut old).expect("a pong");
        proxy.stall();
        let command = format!("SET {key} late\r\n");
        old.write_all(command.as_bytes()).expect("write");
        super::wait_until(
            Duration::from_secs(5),
            "the proxy holds the command",
            || {
                let received = proxy.sent();
                (received == 6 + command.len() as u64)
                    .then_some(())
                    .ok_or_else(|| format!("{received} bytes"))
            },
        );
        proxy.sever();
        let mut byte = [0u8; 1];
        match old.read(&mut byte) {
            Ok(0) => {}
            Err(err) => assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}"),
            Ok(n) => panic!("read {n} bytes after a sever"),
        }
        // The client goes on over a new connection; the old command is still on its way.
        proxy.pass();
        let mut fresh = connect(&proxy);
        ping(&mut fresh).expect("a new connection is served");
        let value: Option<String> = server.cmd(&["GET", &key]);
        assert_eq!(value, None, "still held");
        proxy.deliver_held();
        super::wait_until(Duration::from_secs(5), "the held SET lands", || {
            let value: Option<String> = server.cmd(&["GET", &key]);
            (value.as_deref() == Some("late"))
                .then_some(())
                .ok_or_else(|| format!("{value:?}"))
        });
    }

    #[test]
    fn a_blackhole_accepts_and_never_answers() {
        let proxy = proxy();
        proxy.blackhole();
        let mut stream = connect(&proxy);
        stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        let err = ping(&mut stream).expect_err("no answer");
        assert!(
            matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{err}"
        );
        assert_eq!(proxy.connections_accepted(), 1);
        assert_eq!(proxy.bytes(Direction::ToServer), 0, "dropped, not held");
        proxy.pass();
        let mut stream = connect(&proxy);
        ping(&mut stream).expect("answers again");
    }

    #[test]
    fn a_cut_resets_open_connections_and_accepts_new_ones() {
        let proxy = proxy();
        let mut stream = connect(&proxy);
        ping(&mut stream).expect("a pong");
        proxy.cut();
        let mut reply = [0u8; 1];
        // The reset arrives as an error or the end of the stream.
        match stream.read(&mut reply) {
            Ok(0) => {}
            Err(err) => assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}"),
            Ok(n) => panic!("read {n} bytes after a cut"),
        }
        let mut fresh = connect(&proxy);
        ping(&mut fresh).expect("a new connection is served");
    }

    #[test]
    fn refusing_closes_the_port_until_pass() {
        let proxy = proxy();
        let mut open = connect(&proxy);
        // Served once, so it is accepted (not waiting in the backlog, which a close resets).
        ping(&mut open).expect("a pong");
        proxy.refuse();
        super::wait_until(Duration::from_secs(5), "connections are refused", || {
            match TcpStream::connect(proxy.addr()) {
                Err(err) if err.kind() == ErrorKind::ConnectionRefused => Ok(()),
                other => Err(format!("{other:?}")),
            }
        });
        ping(&mut open).expect("an open connection goes on");
        proxy.pass();
        super::wait_until(Duration::from_secs(5), "the port reopens", || {
            TcpStream::connect(proxy.addr())
                .map(drop)
                .map_err(|e| e.to_string())
        });
    }

    #[test]
    fn nothing_is_left_running_after_drop() {
        let proxy = proxy();
        let addr = proxy.addr();
        let mut stream = connect(&proxy);
        ping(&mut stream).expect("a pong");
        drop(proxy);
        let err = TcpStream::connect(addr).expect_err("the port is closed");
        assert_eq!(err.kind(), ErrorKind::ConnectionRefused);
        let mut byte = [0u8; 1];
        match stream.read(&mut byte) {
            Ok(0) | Err(_) => {}
            Ok(n) => panic!("read {n} bytes from a dropped proxy"),
        }
    }
}
