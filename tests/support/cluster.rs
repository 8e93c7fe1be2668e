//! A 3-master Redis Cluster (Redis 7.0, no replicas), created without redis-cli: each node
//! gets a config epoch and a third of the slots, then node 0 meets the others.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use leasehold::Coordination;
use leasehold::backend::redis::RedisBackend;
use leasehold::coordination::rate_limit::RateLimiter;

use super::server::{POLL, Server, ServerKind, Spec, get_or_start, launch_all};

/// How long the nodes get to agree on the cluster's shape.
pub const CONVERGE_TIMEOUT: Duration = Duration::from_secs(20);

/// A running cluster of 3 masters.
pub struct Cluster {
    nodes: Vec<Server>,
}

impl Cluster {
    /// Starts a new private cluster of `kind` and waits until every node sees all 3 masters.
    pub fn start(kind: ServerKind) -> Cluster {
        Cluster::start_with(kind, |_| Vec::new())
    }

    /// [`start`](Self::start), node `i` with the flags `extra_args(i)` besides.
    pub fn start_with(kind: ServerKind, extra_args: impl Fn(usize) -> Vec<String>) -> Cluster {
        let specs = (0..3)
            .map(|i| {
                let mut spec = Spec::new(kind, format!("cluster{i}"), &[]);
                spec.extra_args = extra_args(i);
                spec.cluster = true;
                spec
            })
            .collect();
        let nodes = launch_all(specs);
        const RANGES: [(u16, u16); 3] = [(0, 5460), (5461, 10922), (10923, 16383)];
        for (i, (node, (first, last))) in nodes.iter().zip(RANGES).enumerate() {
            let mut con = node.connection();
            let epoch = (i + 1).to_string();
            let _: () = redis::cmd("CLUSTER")
                .arg("SET-CONFIG-EPOCH")
                .arg(&epoch)
                .query(&mut con)
                .unwrap_or_else(|e| panic!("SET-CONFIG-EPOCH on {}: {e}", node.url()));
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .query(&mut con)
                .unwrap_or_else(|e| panic!("ADDSLOTSRANGE on {}: {e}", node.url()));
        }
        let mut con = nodes[0].connection();
        for node in &nodes[1..] {
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.port())
                .arg(node.bus_port().expect("cluster node has a bus port"))
                .query(&mut con)
                .unwrap_or_else(|e| panic!("CLUSTER MEET {}: {e}", node.url()));
        }
        let cluster = Cluster { nodes };
        cluster.wait_converged(CONVERGE_TIMEOUT);
        cluster
    }

    /// `redis://127.0.0.1:<port>` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }

    /// The nodes (all masters).
    pub fn nodes(&self) -> &[Server] {
        &self.nodes
    }

    /// A sync cluster client over every node.
    pub fn client(&self) -> redis::cluster::ClusterClient {
        redis::cluster::ClusterClient::new(self.urls()).expect("valid cluster urls")
    }

    /// The node that serves `slot` now, by its own view (node 0's).
    pub fn owner_of(&self, slot: u16) -> &Server {
        let ranges = slot_ranges(&self.nodes[0]);
        let (_, _, port) = ranges
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .unwrap_or_else(|| panic!("nobody serves slot {slot}: {ranges:?}"));
        self.nodes
            .iter()
            .find(|node| node.port() == *port)
            .expect("a node of ours")
    }

    /// A fault proxy in front of every node, which the nodes then announce as their address
    /// (`cluster-announce-port`), so that every connection of a cluster client goes through
    /// one; returned once every node's slot map names the proxies. For a private cluster:
    /// [`owner_of`](Self::owner_of) no longer finds the nodes by the ports they announce.
    pub fn behind_proxies(&self) -> Vec<super::proxy::Proxy> {
        let proxies: Vec<_> = self
            .nodes
            .iter()
            .map(|node| super::proxy::Proxy::to_port(node.port()))
            .collect();
        for (node, proxy) in self.nodes.iter().zip(&proxies) {
            let bus = node.bus_port().expect("a cluster node has a bus port");
            let () = node.cmd(&[
                "CONFIG",
                "SET",
                "cluster-announce-bus-port",
                &bus.to_string(),
            ]);
            let port = proxy.addr().port().to_string();
            let () = node.cmd(&["CONFIG", "SET", "cluster-announce-port", &port]);
        }
        let mut wanted: Vec<u16> = proxies.iter().map(|proxy| proxy.addr().port()).collect();
        wanted.sort_unstable();
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        loop {
            let announced = self.nodes.iter().all(|node| {
                let mut ports: Vec<u16> = slot_ranges(node).iter().map(|r| r.2).collect();
                ports.sort_unstable();
                ports.dedup();
                ports == wanted
            });
            if announced {
                return proxies;
            }
            assert!(
                Instant::now() < deadline,
                "the nodes did not announce their proxies within {CONVERGE_TIMEOUT:?}"
            );
            std::thread::sleep(POLL);
        }
    }

    /// Moves `slot` from the node that serves it to `to`, as `redis-cli --cluster reshard`
    /// does: `SETSLOT IMPORTING` on the target, `MIGRATING` on the source, `MIGRATE` of its
    /// keys a few at a time, `SETSLOT NODE` everywhere. `pause` is slept between the steps,
    /// so that clients meet the slot half-moved (`ASK`, `TRYAGAIN`).
    pub fn move_slot(&self, slot: u16, to: &Server, pause: Duration) {
        let from = self.owner_of(slot);
        assert_ne!(from.port(), to.port(), "slot {slot} is already there");
        let id = |node: &Server| -> String {
            redis::cmd("CLUSTER")
                .arg("MYID")
                .query(&mut node.connection())
                .expect("CLUSTER MYID")
        };
        let (from_id, to_id) = (id(from), id(to));
        let setslot = |node: &Server, how: &str, id: &str| {
            let _: () = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(how)
                .arg(id)
                .query(&mut node.connection())
                .unwrap_or_else(|e| panic!("SETSLOT {slot} {how} on {}: {e}", node.url()));
        };
        setslot(to, "IMPORTING", &from_id);
        setslot(from, "MIGRATING", &to_id);
        std::thread::sleep(pause);
        loop {
            let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(1)
                .query(&mut from.connection())
                .expect("GETKEYSINSLOT");
            if keys.is_empty() {
                break;
            }
            // One key at a time, a pause between: a two-key step meets its keys split.
            let _: redis::Value = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(to.port())
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys)
                .query(&mut from.connection())
                .expect("MIGRATE");
            std::thread::sleep(pause);
        }
        setslot(to, "NODE", &to_id);
        setslot(from, "NODE", &to_id);
        for node in &self.nodes {
            if node.port() != from.port() && node.port() != to.port() {
                setslot(node, "NODE", &to_id);
            }
        }
    }

    /// Moves `slot` `times` times, each time to a master that does not serve it, the way a
    /// reshard does (see [`move_slot`](Self::move_slot)), with 300 ms of load before each move,
    /// on a blocking thread so that the test's tasks run meanwhile.
    pub async fn move_slot_around(self: &std::sync::Arc<Self>, slot: u16, times: usize) {
        for _ in 0..times {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let moving = self.clone();
            tokio::task::spawn_blocking(move || {
                let from = moving.owner_of(slot).port();
                let to = moving
                    .nodes()
                    .iter()
                    .find(|node| node.port() != from)
                    .expect("another master");
                moving.move_slot(slot, to, Duration::from_millis(150));
            })
            .await
            .expect("the slot moved");
        }
    }

    /// `count` handles on this cluster (separate connections, as replicas) sharing one fresh
    /// key prefix named after `test`.
    pub async fn handles(&self, test: &str, count: usize) -> Vec<Coordination> {
        let prefix = super::unique_prefix(test);
        let mut handles = Vec::new();
        for _ in 0..count {
            let backend = RedisBackend::cluster(self.urls())
                .key_prefix(&prefix)
                .connect()
                .await
                .expect("connect");
            handles.push(backend.into());
        }
        handles
    }

    /// Two tasks per limiter ask one permit of `key` back to back while `slot` moves from
    /// master to master twice (see [`move_slot_around`](Self::move_slot_around)), and 300 ms
    /// after: every answer must be a grant, and none an error. Returns the grants.
    pub async fn grants_while_moving(
        self: &Arc<Self>,
        slot: u16,
        limiters: &[RateLimiter],
        key: &'static [u8],
    ) -> u64 {
        let stop = Arc::new(AtomicBool::new(false));
        let granted = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = limiters
            .iter()
            .flat_map(|limiter| [limiter.clone(), limiter.clone()])
            .map(|limiter| {
                let (stop, granted) = (stop.clone(), granted.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let decision = limiter.try_acquire(key, 1).await.expect("no error");
                        assert!(decision.is_granted());
                        granted.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        self.move_slot_around(slot, 2).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        stop.store(true, Ordering::Relaxed);
        for task in tasks {
            task.await.expect("every request granted");
        }
        granted.load(Ordering::Relaxed)
    }

    /// The holders take turns at one exclusive thing (see [`super::turns::exclusive_turns`])
    /// while `slot` moves from master to master three times, as a reshard moves it. A slot
    /// move loses nothing: every release finds its holding.
    pub async fn exclusive_turns_while_moving<F, Fut>(
        self: &Arc<Self>,
        slot: u16,
        holders: &[Coordination],
        turn: F,
    ) where
        F: Fn(Coordination, Arc<super::turns::Occupancy>) -> Fut + Clone + Send + 'static,
        Fut: std::future::Future<Output = Result<(), String>> + Send,
    {
        let occupancy =
            super::turns::exclusive_turns(holders, turn, self.move_slot_around(slot, 3)).await;
        for lost in [
            super::turns::ReleaseFound::Lost,
            super::turns::ReleaseFound::Uncertain,
        ] {
            assert_eq!(occupancy.count(lost), 0, "{lost:?} releases");
        }
    }

    /// Waits (bounded) until every node reports `cluster_state:ok` and its CLUSTER NODES view
    /// shows exactly our 3 nodes as connected masters that each own slots.
    pub fn wait_converged(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let problems: Vec<String> = self
                .nodes
                .iter()
                .filter_map(|node| {
                    self.node_problem(node)
                        .map(|p| format!("{}: {p}", node.url()))
                })
                .collect();
            if problems.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "cluster did not converge within {timeout:?}: {}\nlog of node 0:\n{}",
                    problems.join("; "),
                    self.nodes[0].log_tail(20)
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// `None` when `node` sees a healthy cluster of our 3 masters, else what is wrong.
    fn node_problem(&self, node: &Server) -> Option<String> {
        let mut con = match node.try_connection(Duration::from_secs(1)) {
            Ok(con) => con,
            Err(e) => return Some(format!("connect: {e}")),
        };
        let info: String = match redis::cmd("CLUSTER").arg("INFO").query(&mut con) {
            Ok(info) => info,
            Err(e) => return Some(format!("CLUSTER INFO: {e}")),
        };
        for expected in [
            "cluster_state:ok",
            "cluster_slots_assigned:16384",
            "cluster_known_nodes:3",
        ] {
            if !info.lines().any(|l| l.trim() == expected) {
                return Some(format!("no {expected}"));
            }
        }
        let view: String = match redis::cmd("CLUSTER").arg("NODES").query(&mut con) {
            Ok(view) => view,
            Err(e) => return Some(format!("CLUSTER NODES: {e}")),
        };
        let mut ports: Vec<u16> = Vec::new();
        for line in view.lines().filter(|l| !l.trim().is_empty()) {
            // <id> <ip:port@cport> <flags> <master> <ping-sent> <pong-recv> <epoch> <link> <slot>...
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 {
                return Some(format!("node without slots: {line}"));
            }
            let flags = fields[2];
            if !flags.split(',').any(|f| f == "master")
                || flags
                    .split(',')
                    .any(|f| matches!(f, "fail" | "fail?" | "handshake" | "noaddr"))
                || fields[7] != "connected"
            {
                return Some(format!("node not a healthy master: {line}"));
            }
            let port = fields[1]
                .split('@')
                .next()
                .and_then(|addr| addr.rsplit(':').next())
                .and_then(|p| p.parse().ok());
            match port {
                Some(port) => ports.push(port),
                None => return Some(format!("bad address: {line}")),
            }
        }
        ports.sort_unstable();
        let mut expected: Vec<u16> = self.nodes.iter().map(Server::port).collect();
        expected.sort_unstable();
        if ports != expected {
            return Some(format!("sees masters on {ports:?}, expected {expected:?}"));
        }
        let slots: Vec<redis::Value> = match redis::cmd("CLUSTER").arg("SLOTS").query(&mut con) {
            Ok(slots) => slots,
            Err(e) => return Some(format!("CLUSTER SLOTS: {e}")),
        };
        if slots.len() != 3 {
            return Some(format!("CLUSTER SLOTS has {} ranges", slots.len()));
        }
        None
    }
}

/// `node`'s slot map (`CLUSTER SLOTS`): each range's first and last slot and its master's
/// port.
fn slot_ranges(node: &Server) -> Vec<(u16, u16, u16)> {
    let mut con = node.connection();
    redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query::<Vec<redis::Value>>(&mut con)
        .expect("CLUSTER SLOTS")
        .into_iter()
        .map(|range| {
            let redis::Value::Array(fields) = range else {
                panic!("a slot range: {range:?}");
            };
            let first: u16 = redis::from_redis_value(fields[0].clone()).expect("first");
            let last: u16 = redis::from_redis_value(fields[1].clone()).expect("last");
            let port: u16 = match &fields[2] {
                redis::Value::Array(master) => {
                    redis::from_redis_value(master[1].clone()).expect("port")
                }
                other => panic!("a master: {other:?}"),
            };
            (first, last, port)
        })
        .collect()
}

/// The Redis 7.0 cluster shared by every test of this binary.
pub fn cluster() -> &'static Cluster {
    static CELL: OnceLock<Result<Cluster, String>> = OnceLock::new();
    get_or_start(&CELL, "the cluster", || Cluster::start(ServerKind::Redis7))
}
