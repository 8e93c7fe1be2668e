//! Redis Sentinel: a master, one replica and 3 sentinels (quorum 2), all of one server kind
//! (Redis 7.0 for the shared setup).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::server::{
    Server, ServerKind, Spec, free_port, get_or_start, info_field, launch_all, wait_until,
};

/// The service name the sentinels monitor.
pub const SERVICE_NAME: &str = "leasehold-master";
/// How long a replica may take to sync, and a failover to complete.
pub const SENTINEL_TIMEOUT: Duration = Duration::from_secs(30);

/// The flags that make a process of a setup listen for TLS on a port, and speak it to the
/// others (`tls-replication yes`).
pub type TlsFlags = fn(u16) -> Vec<String>;

/// How a private setup differs from the shared one.
#[derive(Default)]
pub struct SetupOptions {
    /// Every process also listens for TLS with these flags, and they speak it to each other:
    /// the sentinels then name the nodes by their TLS ports, and the harness keeps to the
    /// plain ones.
    pub tls: Option<TlsFlags>,
    /// Flags for both data nodes besides (an ACL user, say).
    pub data_args: Vec<String>,
}

/// A master, a replica and 3 sentinels watching them.
pub struct SentinelSetup {
    master: Server,
    replica: Server,
    sentinels: Vec<Server>,
    /// With TLS, each process's TLS port: the master's, the replica's, then the sentinels'.
    tls_ports: Option<Vec<u16>>,
    failover_lock: Mutex<()>,
}

impl SentinelSetup {
    /// Starts a new private setup of `kind` (master, replica in sync, 3 sentinels) and waits
    /// until it is healthy ([`Self::wait_healthy`]).
    pub fn start(kind: ServerKind) -> SentinelSetup {
        SentinelSetup::start_with(kind, SetupOptions::default())
    }

    /// [`start`](Self::start), as `options` say.
    pub fn start_with(kind: ServerKind, options: SetupOptions) -> SentinelSetup {
        let SetupOptions { tls, data_args } = options;
        let tls_ports: Option<Vec<u16>> = tls.map(|_| (0..5).map(|_| free_port()).collect());
        let tls_args = |process: usize| match (tls, &tls_ports) {
            (Some(flags), Some(ports)) => flags(ports[process]),
            _ => Vec::new(),
        };
        let spec = |label: &str, mut args: Vec<String>, process: usize| {
            args.extend(["--repl-diskless-sync-delay".to_owned(), "0".to_owned()]);
            args.extend(tls_args(process));
            let mut spec = Spec::new(kind, label, &[]);
            spec.extra_args = args;
            spec
        };
        let master = Server::launch(spec("sentinel-master", data_args.clone(), 0));
        let master_port = match &tls_ports {
            Some(ports) => ports[0],
            None => master.port(),
        }
        .to_string();
        let mut replicaof = vec![
            "--replicaof".to_owned(),
            "127.0.0.1".to_owned(),
            master_port.clone(),
        ];
        replicaof.extend(data_args);
        let replica = Server::launch(spec("sentinel-replica", replicaof, 1));
        // Sentinels learn replicas from the master's INFO, which they poll every 10 s: start
        // them once the replica is online, so their first INFO already lists it.
        wait_until(SENTINEL_TIMEOUT, "the replica to sync", || {
            let link = replica.info_field("replication", "master_link_status");
            (link.as_deref() == Some("up"))
                .then_some(())
                .ok_or_else(|| {
                    format!(
                        "master_link_status {link:?}; replica log:\n{}",
                        replica.log_tail(20)
                    )
                })
        });
        let conf = format!(
            "sentinel resolve-hostnames no\n\
             sentinel monitor {SERVICE_NAME} 127.0.0.1 {master_port} 2\n\
             sentinel down-after-milliseconds {SERVICE_NAME} 1000\n\
             sentinel failover-timeout {SERVICE_NAME} 5000\n"
        );
        let sentinels = launch_all(
            (0..3)
                .map(|i| {
                    let mut spec = Spec::new(kind, format!("sentinel{i}"), &[]);
                    spec.extra_args = tls_args(2 + i);
                    spec.sentinel_conf = Some(conf.clone());
                    spec
                })
                .collect(),
        );
        for sentinel in &sentinels {
            speed_up(sentinel);
        }
        let setup = SentinelSetup {
            master,
            replica,
            sentinels,
            tls_ports,
            failover_lock: Mutex::new(()),
        };
        setup.wait_healthy();
        setup
    }

    /// The monitored service's name: `leasehold-master`.
    pub fn service_name(&self) -> &str {
        SERVICE_NAME
    }

    /// `redis://127.0.0.1:<port>` of every sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Server::url).collect()
    }

    /// `rediss://127.0.0.1:<TLS port>` of every sentinel, for a setup started with TLS.
    pub fn tls_sentinel_urls(&self) -> Vec<String> {
        let ports = self.tls_ports.as_ref().expect("a setup started with TLS");
        ports[2..]
            .iter()
            .map(|port| format!("rediss://127.0.0.1:{port}"))
            .collect()
    }

    /// The data node the sentinels name by `port` (its plain port, or its TLS one).
    fn data_node_at(&self, port: u16) -> Option<usize> {
        (0..2).find(|&i| {
            self.data_nodes()[i].port() == port
                || self
                    .tls_ports
                    .as_ref()
                    .is_some_and(|ports| ports[i] == port)
        })
    }

    /// The sentinel processes.
    pub fn sentinels(&self) -> &[Server] {
        &self.sentinels
    }

    /// The two data nodes (initial master first).
    pub fn data_nodes(&self) -> [&Server; 2] {
        [&self.master, &self.replica]
    }

    /// The port of the current master, as a sentinel reports it.
    pub fn master_port(&self) -> u16 {
        let mut errors = Vec::new();
        for sentinel in &self.sentinels {
            match master_addr(sentinel) {
                Ok(port) => return port,
                Err(e) => errors.push(e),
            }
        }
        panic!("no sentinel resolves {SERVICE_NAME}: {errors:?}")
    }

    /// The data node that is currently master (per the sentinels).
    pub fn current_master(&self) -> &Server {
        let port = self.master_port();
        let node = self
            .data_node_at(port)
            .unwrap_or_else(|| panic!("sentinels name an unknown master port {port}"));
        self.data_nodes()[node]
    }

    /// A sentinel client for the master, as an application would build it.
    pub fn client(&self) -> redis::sentinel::SentinelClient {
        // Without redis-rs' TLS feature the name is taken as a `String`.
        #[allow(clippy::unnecessary_to_owned)]
        redis::sentinel::SentinelClient::build(
            self.sentinel_urls(),
            SERVICE_NAME.to_string(),
            None,
            redis::sentinel::SentinelServerType::Master,
        )
        .expect("valid sentinel urls")
    }

    /// Forces a failover and waits (bounded) until every sentinel names the other node and it
    /// acts as master, then until the setup is healthy again ([`Self::wait_healthy`]: the old
    /// master, demoted by the sentinels, replicates from the new one).
    /// Serialized: concurrent callers fail over one after the other.
    pub fn failover(&self) {
        let _serial = self.failover_lock.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.master_port();
        let leader = &self.sentinels[0];
        // A forced failover answers NOGOODSLAVE until the sentinel knows a healthy replica.
        wait_until(
            SENTINEL_TIMEOUT,
            "a sentinel to see a healthy replica",
            || healthy_replica(leader),
        );
        wait_until(SENTINEL_TIMEOUT, "SENTINEL FAILOVER to be accepted", || {
            sentinel_query::<()>(leader, &["FAILOVER", SERVICE_NAME])
        });
        wait_until(
            SENTINEL_TIMEOUT,
            "every sentinel to name the new master",
            || {
                let ports: Vec<Result<u16, String>> =
                    self.sentinels.iter().map(master_addr).collect();
                if ports.iter().all(|p| matches!(p, Ok(p) if *p != old)) {
                    Ok(())
                } else {
                    Err(format!("old master {old}, sentinels say {ports:?}"))
                }
            },
        );
        let new_master = self.current_master();
        wait_until(
            SENTINEL_TIMEOUT,
            "the new master to take writes",
            || match role(new_master)?.as_str() {
                "master" => Ok(()),
                other => Err(format!("role {other}")),
            },
        );
        self.wait_healthy();
    }

    /// `count` handles through these sentinels (separate connections, as replicas) sharing
    /// one fresh key prefix named after `test`, each sending a step again for as long as a
    /// failover takes here (10 s): a failover within that bound must cost latency, not errors.
    pub async fn handles(&self, test: &str, count: usize) -> Vec<leasehold::Coordination> {
        let prefix = super::unique_prefix(test);
        let mut handles = Vec::new();
        for _ in 0..count {
            let backend = leasehold::backend::redis::RedisBackend::sentinel(
                self.sentinel_urls(),
                self.service_name(),
            )
            .key_prefix(&prefix)
            .transient_retry(Duration::from_secs(10))
            .connect()
            .await
            .expect("connect through sentinel");
            handles.push(backend.into());
        }
        handles
    }

    /// The holders take turns at one exclusive thing (see [`super::turns::exclusive_turns`])
    /// while the primary fails over: killed ([`kill_primary`](Self::kill_primary)), as a
    /// crash would, the sentinels elect its replica. Replication is asynchronous: a grant the
    /// primary acknowledged but had not yet sent to its replica is lost with it, and its
    /// release says so ([`super::turns::ReleaseFound::Lost`]); only such a grant may overlap
    /// another.
    pub async fn exclusive_turns_across_failover<F, Fut>(
        self: &std::sync::Arc<Self>,
        holders: &[leasehold::Coordination],
        turn: F,
    ) -> std::sync::Arc<super::turns::Occupancy>
    where
        F: Fn(leasehold::Coordination, std::sync::Arc<super::turns::Occupancy>) -> Fut
            + Clone
            + Send
            + 'static,
        Fut: std::future::Future<Output = Result<(), String>> + Send,
    {
        let failover = async move {
            // Some turns before, and after.
            tokio::time::sleep(Duration::from_millis(300)).await;
            self.kill_primary().await;
        };
        super::turns::exclusive_turns(holders, turn, failover).await
    }

    /// Kills the current primary (SIGKILL), as a crash would, and waits (bounded, off the
    /// async runtime) until the sentinels name another.
    pub async fn kill_primary(self: &std::sync::Arc<Self>) {
        let primary = self.master_port();
        let dead = self
            .data_node_at(primary)
            .expect("the primary is a data node");
        self.data_nodes()[dead].stop();
        let waiting = self.clone();
        tokio::task::spawn_blocking(move || {
            wait_until(Duration::from_secs(20), "a new primary", || {
                let port = waiting.master_port();
                (port != primary)
                    .then_some(())
                    .ok_or_else(|| format!("still {port}"))
            })
        })
        .await
        .expect("the sentinels elect a new primary");
    }

    /// Waits (bounded) until every sentinel sees the master, a healthy replica and its 2 peers.
    /// Both data nodes must be running.
    pub fn wait_healthy(&self) {
        for sentinel in &self.sentinels {
            wait_until(SENTINEL_TIMEOUT, "a healthy sentinel setup", || {
                let master: HashMap<String, String> =
                    sentinel_query(sentinel, &["MASTER", SERVICE_NAME])?;
                let field = |name: &str| master.get(name).map(String::as_str).unwrap_or("");
                if field("flags") != "master" || field("num-other-sentinels") != "2" {
                    return Err(format!("{}: master {master:?}", sentinel.url()));
                }
                healthy_replica(sentinel)
            });
        }
    }
}

/// Shortens a sentinel's periods (Redis 7.0+ `SENTINEL DEBUG`; lost when it restarts): INFO
/// every 100 ms instead of 10 s (how soon it sees a replica, or a replica's link come up) and
/// hello messages every 200 ms instead of 2 s (how soon sentinels find each other, and the
/// demotion of a returning old master after 4 hello periods instead of 8 s).
pub fn speed_up(sentinel: &Server) {
    let _: () = sentinel.cmd(&[
        "SENTINEL",
        "DEBUG",
        "info-period",
        "100",
        "publish-period",
        "200",
    ]);
}

/// Runs `SENTINEL <args>` on `sentinel` over a fresh connection.
fn sentinel_query<T: redis::FromRedisValue>(sentinel: &Server, args: &[&str]) -> Result<T, String> {
    let mut cmd = redis::cmd("SENTINEL");
    for arg in args {
        cmd.arg(*arg);
    }
    sentinel
        .try_connection(Duration::from_secs(1))
        .and_then(|mut con| cmd.query(&mut con))
        .map_err(|e| format!("{}: SENTINEL {args:?}: {e}", sentinel.url()))
}

/// `Ok` when `sentinel` knows a replica that is up and in sync.
fn healthy_replica(sentinel: &Server) -> Result<(), String> {
    let replicas: Vec<HashMap<String, String>> =
        sentinel_query(sentinel, &["REPLICAS", SERVICE_NAME])?;
    let healthy = replicas.iter().any(|r| {
        let flags = r.get("flags").map(String::as_str).unwrap_or("");
        flags.split(',').any(|f| f == "slave")
            && !flags
                .split(',')
                .any(|f| matches!(f, "s_down" | "o_down" | "disconnected"))
            && r.get("master-link-status").map(String::as_str) == Some("ok")
    });
    healthy
        .then_some(())
        .ok_or_else(|| format!("{}: replicas {replicas:?}", sentinel.url()))
}

/// The `role` field of a data node's `INFO replication`.
fn role(server: &Server) -> Result<String, String> {
    let info: String = server
        .try_connection(Duration::from_secs(1))
        .and_then(|mut con| redis::cmd("INFO").arg("replication").query(&mut con))
        .map_err(|e| format!("{}: {e}", server.url()))?;
    info_field(&info, "role").ok_or_else(|| format!("{}: no role in INFO", server.url()))
}

fn master_addr(sentinel: &Server) -> Result<u16, String> {
    let addr: Vec<String> = sentinel
        .try_connection(Duration::from_secs(1))
        .and_then(|mut con| {
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(SERVICE_NAME)
                .query(&mut con)
        })
        .map_err(|e| format!("{}: {e}", sentinel.url()))?;
    addr.get(1)
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| format!("{}: bad reply {addr:?}", sentinel.url()))
}

/// The Redis 7.0 sentinel setup shared by every test of this binary.
pub fn sentinel() -> &'static SentinelSetup {
    static CELL: OnceLock<Result<SentinelSetup, String>> = OnceLock::new();
    get_or_start(&CELL, "the sentinel setup", || {
        SentinelSetup::start(ServerKind::Redis7)
    })
}
