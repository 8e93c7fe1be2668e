//! The Redis backend through Sentinel: it finds the primary, and finds the new one after a
//! failover without a new handle.

mod support;

use std::time::Duration;

use leasehold::backend::redis::{RedisBackend, Script};
use leasehold::coordination::lock::FencedLock;
use leasehold::{Coordination, ErrorKind};
use support::sentinel::SetupOptions;
use support::{SentinelSetup, Server, sentinel, unique_prefix};

/// The tests fail over one shared setup, and one counts the commands its primary took: one
/// at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Fails over, then waits (bounded) until the node that was primary serves as a replica.
/// Until Sentinel demotes it, the old primary still takes writes (and loses them when it
/// resyncs): no client can tell. Once it is a replica, it answers writes with READONLY.
fn fail_over(setup: &SentinelSetup) {
    let old_primary = setup.master_port();
    setup.failover();
    assert_ne!(setup.master_port(), old_primary);
    let old: &Server = setup
        .data_nodes()
        .into_iter()
        .find(|node| node.port() == old_primary)
        .expect("the old primary is a data node");
    support::wait_until(
        Duration::from_secs(15),
        "the old primary to become a replica",
        || match old.info_field("replication", "role").as_deref() {
            Some("slave") => Ok(()),
            other => Err(format!("role {other:?}")),
        },
    );
}

#[tokio::test]
async fn follows_the_primary_across_a_failover() {
    let _serial = SERIAL.lock().await;
    let setup = sentinel();
    let prefix = unique_prefix("sentinel");
    let backend = RedisBackend::sentinel(setup.sentinel_urls(), setup.service_name())
        .key_prefix(&prefix)
        .connect()
        .await
        .expect("connect through sentinel");
    let script = Script::new("incr", "return redis.call('INCR', KEYS[1])");
    let first: i64 = backend
        .eval(&script, &["n"], &[] as &[&str; 0])
        .await
        .expect("first");
    assert_eq!(first, 1);

    // Commands run throughout the failover, one after another. They may fail while the old
    // primary demotes itself (READONLY, a dropped connection), as unavailability only; the
    // backend then asks the sentinels again and reaches the new primary.
    let started = tokio::time::Instant::now();
    let switched = std::sync::Arc::new(std::sync::OnceLock::new());
    let load = tokio::spawn({
        let (backend, script, switched) = (backend.clone(), script.clone(), switched.clone());
        async move {
            let mut outcomes = Vec::new();
            loop {
                let sent = tokio::time::Instant::now();
                let outcome = backend
                    .eval::<i64, _, _>(&script, &["n"], &[] as &[&str; 0])
                    .await;
                let done = switched.get().is_some_and(|at| sent > *at) && outcome.is_ok();
                outcomes.push((sent, outcome));
                if done || sent > started + Duration::from_secs(60) {
                    return outcomes;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    tokio::task::spawn_blocking(move || fail_over(setup))
        .await
        .expect("the failover");
    let switched_at = tokio::time::Instant::now();
    let _ = switched.set(switched_at);
    let outcomes = load.await.expect("the load");
    let during = outcomes
        .iter()
        .filter(|(sent, _)| *sent < switched_at)
        .count();
    assert!(during >= 1, "no command in flight during the failover");
    for (sent, outcome) in &outcomes {
        if let Err(err) = outcome {
            // A failover is unavailability (a lost connection, a timeout, a failover reply
            // outlasting the retry bound), never a refusal.
            assert!(
                err.is_unavailable(),
                "{:?} into the failover: {err}",
                *sent - started
            );
        }
    }
    let (served_at, value) = match outcomes.last() {
        Some((sent, Ok(value))) => (*sent, *value),
        other => panic!("never reached the new primary: {other:?}"),
    };
    assert!(
        served_at - switched_at < Duration::from_secs(5),
        "served {:?} after the old primary was demoted",
        served_at - switched_at
    );
    assert!(value >= 1);
    // The write landed on the node the sentinels now name as primary.
    let key = format!("{prefix}|n");
    let stored: Option<i64> = setup.current_master().cmd(&["GET", &key]);
    assert_eq!(stored, Some(value));
}

/// Acquisitions carry a deadline on the server's clock: the first one after a failover reads
/// the new primary's clock first, whose `TIME` its command statistics show, rather than
/// counting on the old primary's (a new primary behind the old one could otherwise take an
/// acquisition after its cleanup).
#[tokio::test]
async fn the_first_acquisition_after_a_failover_reads_the_new_primarys_clock() {
    let _serial = SERIAL.lock().await;
    let setup = sentinel();
    let coordination: Coordination =
        RedisBackend::sentinel(setup.sentinel_urls(), setup.service_name())
            .key_prefix(unique_prefix("sentinel-clock"))
            .connect()
            .await
            .expect("connect through sentinel")
            .into();
    let lock = FencedLock::new(&coordination, "{job}:lease", "{job}:fence").expect("valid");
    let mut lease = lock
        .try_acquire(Duration::from_secs(30))
        .await
        .expect("acquire")
        .acquired()
        .expect("free");
    lease.release().await.expect("release");

    fail_over(setup);
    // The new primary logs every command it runs, in order.
    let new_primary = setup.current_master();
    let () = new_primary.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    let () = new_primary.cmd(&["CONFIG", "SET", "slowlog-max-len", "10000"]);
    let () = new_primary.cmd(&["SLOWLOG", "RESET"]);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut lease = loop {
        match lock.try_acquire(Duration::from_secs(30)).await {
            Ok(attempt) => break attempt.acquired().expect("free"),
            Err(err) => {
                assert!(err.is_unavailable(), "during the failover: {err}");
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "never reached the new primary: {err}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let log: Vec<(u64, Vec<String>)> = new_primary
        .cmd::<Vec<redis::Value>>(&["SLOWLOG", "GET", "-1"])
        .into_iter()
        .filter_map(|entry| {
            let redis::Value::Array(fields) = entry else {
                return None;
            };
            let id: u64 = redis::from_redis_value(fields.first()?.clone()).ok()?;
            let args: Vec<String> = redis::from_redis_value(fields.get(3)?.clone()).ok()?;
            Some((id, args))
        })
        .collect();
    let () = new_primary.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "10000"]);
    let () = new_primary.cmd(&["CONFIG", "SET", "slowlog-max-len", "128"]);
    let first = |command: &str| {
        log.iter()
            .filter(|(_, args)| {
                args.first()
                    .is_some_and(|c| c.eq_ignore_ascii_case(command))
            })
            .map(|(id, _)| *id)
            .min()
    };
    let script = [first("evalsha"), first("eval")]
        .into_iter()
        .flatten()
        .min();
    let script = script.unwrap_or_else(|| panic!("no acquisition ran there: {log:?}"));
    let time = first("time").unwrap_or_else(|| panic!("no TIME on the new primary: {log:?}"));
    assert!(
        time < script,
        "the first acquisition ran before the new primary's clock was read: {log:?}"
    );
    lease.release().await.expect("release");
}

/// A primary that asks for credentials: given with `primary_credentials` (the sentinels ask
/// for none), the handle's connections to it, the steps' and the watches', are the ACL
/// user's, on the first primary and on the one elected after it; a wrong password is a
/// refusal at `connect` that says so.
#[tokio::test]
async fn the_primary_is_reached_with_its_own_credentials() {
    let setup = std::sync::Arc::new(SentinelSetup::start_with(
        support::ServerKind::Redis7,
        SetupOptions {
            data_args: "--user billing on >primary-secret ~* &* +@all"
                .split(' ')
                .map(str::to_owned)
                .collect(),
            ..SetupOptions::default()
        },
    ));
    let connect = |password: &'static str| {
        RedisBackend::sentinel(setup.sentinel_urls(), setup.service_name())
            .primary_credentials(Some("billing"), password)
            .key_prefix(unique_prefix("primary-credentials"))
            .transient_retry(Duration::from_secs(10))
            .connect()
    };
    let redis = connect("primary-secret").await.expect("connected");
    let coordination = Coordination::from(redis.clone());
    let users_on = |node: &Server| -> Vec<String> {
        let clients: String = node.cmd(&["CLIENT", "LIST"]);
        clients
            .lines()
            .filter_map(|line| line.split(' ').find_map(|f| f.strip_prefix("user=")))
            .map(str::to_owned)
            .collect()
    };
    for round in ["first primary", "after a failover"] {
        // A lock of each round's own: the first one's release may be lost with its primary.
        let lease = FencedLock::named(&coordination, round)
            .try_acquire(Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("{round}: {e}"))
            .acquired()
            .unwrap_or_else(|| panic!("{round}: the lock is free"));
        drop(lease);
        let _watch = redis
            .watch_key(b"watched")
            .await
            .unwrap_or_else(|e| panic!("{round}: a watch: {e}"));
        // The steps' connection and the watches' tracking one.
        let primary = setup.current_master();
        support::eventually("both connections are the ACL user's", async || {
            users_on(primary)
                .iter()
                .filter(|user| *user == "billing")
                .count()
                >= 2
        })
        .await;
        if round == "first primary" {
            setup.kill_primary().await;
        }
    }

    let err = connect("wrong").await.expect_err("a wrong password");
    assert_eq!(err.kind(), ErrorKind::Authentication, "{err:?}");
    assert!(
        !err.to_string().contains("wrong"),
        "no password shown: {err}"
    );
    let standalone = RedisBackend::standalone(setup.data_nodes()[1].url())
        .primary_credentials(None, "secret")
        .key_prefix(unique_prefix("primary-credentials-standalone"))
        .connect()
        .await
        .expect_err("primary credentials are for Sentinel");
    assert_eq!(
        standalone.kind(),
        ErrorKind::InvalidArgument,
        "{standalone:?}"
    );
}
