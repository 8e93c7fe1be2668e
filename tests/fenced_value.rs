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
    for setup in [
        vec![&b"SET"[..], &key, b"plain"],
        vec![&b"HSET"[..], &key, b"value", b"no token"],
        vec![&b"HSET"[..], &key, b"token", b"07", b"value", b"x"],
    ] {
        let _: redis::Value = target.query(&[b"DEL", &key]);
        let _: redis::Value = target.query(&setup);
        let before: redis::Value = target.query(&[b"DUMP", &key]);
        let err = value.write(9, b"new").await.expect_err("corrupt");
        assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
        let err = value.read().await.expect_err("corrupt");
        assert_eq!(err.kind(), ErrorKind::CorruptState, "{err}");
        let after: redis::Value = target.query(&[b"DUMP", &key]);
        assert_eq!(before, after, "nothing changed");
    }
}
