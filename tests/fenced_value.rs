//! Fenced values on every server kind, the cluster and the memory backend: writes with a
//! lower token refused with nothing changed, equal tokens accepted, binary values, corrupt
//! state, and a stale lock holder refused after the next holder wrote.

mod support;

use std::time::Duration;

use leasehold::ErrorKind;
use leasehold::coordination::fenced_value::{FencedRead, FencedValue, FencedWrite};
use leasehold::coordination::lock::FencedLock;
use support::target::{Target, scenario};

scenario!(a_lower_token_changes_nothing);

/// The highest token wins; an equal one is the same holder writing again; a lower one is
/// refused with the highest, and the value stays as the higher write left it.
async fn a_lower_token_changes_nothing(target: Target) {
    let coordination = target.coordination("fenced-value").await;
    let value = FencedValue::named(&coordination, "doc");
    assert_eq!(value.read().await.expect("read"), None);
    assert_eq!(
        value.write(5, b"five").await.expect("write"),
        FencedWrite::Written
    );
    assert_eq!(
        value.write(3, b"three").await.expect("write"),
        FencedWrite::Stale { highest: 5 }
    );
    assert_eq!(
        value.write(5, b"again").await.expect("write"),
        FencedWrite::Written
    );
    // Binary, and above 2^53: exact.
    let big = (1u64 << 53) + 1;
    let bytes = [0u8, 255, b'\n', 0];
    assert_eq!(
        value.write(big, bytes).await.expect("write"),
        FencedWrite::Written
    );
    assert_eq!(
        value.write(big - 1, b"just below").await.expect("write"),
        FencedWrite::Stale { highest: big }
    );
    assert_eq!(
        value.read().await.expect("read"),
        Some(FencedRead {
            token: big,
            value: bytes.to_vec()
        })
    );
    for token in [0, u64::MAX] {
        let err = value.write(token, b"x").await.expect_err("no such token");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    }
}

scenario!(a_stale_lock_holder_is_refused_at_the_value);

/// The check a protected resource makes, done at the value: a holder whose lease was taken
/// over writes after the next holder did, and is refused.
async fn a_stale_lock_holder_is_refused_at_the_value(target: Target) {
    let coordination = target.coordination("fenced-value-lock").await;
    let lock = FencedLock::named(&coordination, "invoice");
    let invoice = FencedValue::named(&coordination, "invoice");
    let mut stale = lock
        .acquire(Duration::from_secs(10))
        .await
        .expect("acquire");
    let old = stale.fencing_token();
    stale.release().await.expect("release");
    let mut next = lock
        .acquire(Duration::from_secs(10))
        .await
        .expect("acquire");
    assert_eq!(
        invoice
            .write(next.fencing_token(), b"paid")
            .await
            .expect("write"),
        FencedWrite::Written
    );
    assert_eq!(
        invoice.write(old, b"draft").await.expect("write"),
        FencedWrite::Stale {
            highest: next.fencing_token()
        }
    );
    assert_eq!(
        invoice.read().await.expect("read").map(|read| read.value),
        Some(b"paid".to_vec())
    );
    next.release().await.expect("release");
}

scenario!(corrupt_state_changes_nothing redis);

/// A key of another type, or a hash without a valid token, is corrupt state: neither a
/// write nor a read changes it.
async fn corrupt_state_changes_nothing(target: Target) {
    let coordination = target.coordination("fenced-value-corrupt").await;
    let value = FencedValue::named(&coordination, "corrupt");
    let key = coordination.backend().physical_key(value.key());
    let shapes: [&[&[u8]]; 6] = [
        &[b"SET", b"plain"],
        &[b"HSET", b"value", b"no token"],
        &[b"HSET", b"token", b"07", b"value", b"x"],
        &[b"HSET", b"token", b"9223372036854775808", b"value", b"x"],
        &[b"HSET", b"token", b"5"],
        &[b"HSET", b"token", b"5", b"value", b"x"],
    ];
    for (index, shape) in shapes.into_iter().enumerate() {
        let _: redis::Value = target.query(&[b"DEL", &key]);
        let mut setup = vec![shape[0], &key];
        setup.extend_from_slice(&shape[1..]);
        let _: redis::Value = target.query(&setup);
        if index == 5 {
            // A valid value, but one that expires: it would forget its highest token.
            let _: redis::Value = target.query(&[b"PEXPIRE", &key, b"60000"]);
        }
        let before: redis::Value = target.query(&[b"DUMP", &key]);
        let err = value.write(9, b"new").await.expect_err("corrupt");
        assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
        let err = value.read().await.expect_err("corrupt");
        assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
        let after: redis::Value = target.query(&[b"DUMP", &key]);
        assert_eq!(before, after, "nothing changed");
    }
}

/// A write delivered twice (the network sends it again later), after the holder wrote
/// again with the same token: once the first write's deadline has passed on the server, the
/// late copy changes nothing, and the later write stands.
#[tokio::test]
async fn a_write_delivered_late_cannot_overwrite_a_later_one() {
    let behind = support::Behind::start("fenced-value-late");
    // Short bounds: the write's deadline is the server's clock plus about these.
    let coordination = behind
        .through_proxy(|builder| {
            builder
                .response_timeout(Duration::from_millis(200))
                .connection_timeout(Duration::from_millis(200))
                .transient_retry(Duration::from_millis(100))
        })
        .await;
    let value = FencedValue::named(&coordination, "late");
    behind.proxy.take_delivered();
    assert_eq!(
        value.write(5, b"first").await.expect("write"),
        FencedWrite::Written
    );
    let first = behind.proxy.take_delivered();
    assert_eq!(
        value.write(5, b"second").await.expect("write"),
        FencedWrite::Written
    );
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let reply = support::proxy::replay_last_script(&behind.server, &first);
    assert_eq!(
        reply,
        redis::Value::Array(vec![redis::Value::BulkString(b"late".to_vec())]),
        "the late copy is a no-op"
    );
    let read = value.read().await.expect("read").expect("written");
    assert_eq!(read.value, b"second");
}
