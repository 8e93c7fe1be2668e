//! The Redis backend through Sentinel: it finds the primary, and finds the new one after a
//! failover without a new handle.

mod support;

use std::time::Duration;

use leasehold::ErrorKind;
use leasehold::backend::redis::{RedisBackend, Script};
use support::{sentinel, unique_prefix};

#[tokio::test]
async fn follows_the_primary_across_a_failover() {
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
    let old_primary = setup.master_port();

    setup.failover();
    assert_ne!(setup.master_port(), old_primary);
    // Until Sentinel demotes it, the old primary still takes writes (and loses them when it
    // resyncs): no client can tell. Once it is a replica, it answers READONLY.
    let old = setup
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

    // Commands may fail while the old primary demotes itself (READONLY, dropped connection);
    // the backend then asks the sentinels again and reaches the new primary.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut failures = Vec::new();
    let value = loop {
        match backend
            .eval::<i64, _, _>(&script, &["n"], &[] as &[&str; 0])
            .await
        {
            Ok(value) => break value,
            Err(err) => {
                assert!(
                    matches!(
                        err.kind(),
                        ErrorKind::Io | ErrorKind::Timeout | ErrorKind::Server
                    ),
                    "unexpected error during failover: {err}"
                );
                failures.push(err.to_string());
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "never reached the new primary: {failures:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert!(value >= 1);
    // The write landed on the node the sentinels now name as primary.
    let key = format!("{prefix}n");
    let stored: Option<i64> = setup.current_master().cmd(&["GET", &key]);
    assert_eq!(stored, Some(value));
}
