//! The test `INCREX` module answers per the documented contract (see
//! `tests/support/increx/increx.c`), so the fast path is tested against a faithful stand-in.

mod support;

use support::unique_prefix;

fn increx(args: &[&str]) -> redis::RedisResult<(i64, i64)> {
    let mut cmd = redis::cmd("INCREX");
    for arg in args {
        cmd.arg(*arg);
    }
    cmd.query(&mut support::increx().connection())
}

fn pttl(key: &str) -> i64 {
    support::increx().cmd(&["PTTL", key])
}

#[test]
fn first_hit_fixes_the_window_and_rejections_change_nothing() {
    let key = format!("{}k", unique_prefix("increx"));
    let window = ["UBOUND", "5", "PX", "60000", "ENX"];
    let hit = |n: &str| {
        let mut args = vec![key.as_str(), "BYINT", n];
        args.extend(window);
        increx(&args).expect("INCREX")
    };
    assert_eq!(hit("3"), (3, 3));
    let ttl = pttl(&key);
    assert!((59_000..=60_000).contains(&ttl), "{ttl}");
    // Over the bound: skipped, value and TTL untouched.
    assert_eq!(hit("3"), (3, 0));
    assert_eq!(hit("2"), (5, 2));
    assert!(pttl(&key) <= ttl, "ENX must not move the window's end");
    assert_eq!(hit("1"), (5, 0));
}

#[test]
fn a_rejected_first_hit_creates_nothing() {
    let key = format!("{}k", unique_prefix("increx"));
    assert_eq!(
        increx(&[&key, "BYINT", "6", "UBOUND", "5", "PX", "1000", "ENX"]).expect("INCREX"),
        (0, 0)
    );
    let exists: i64 = support::increx().cmd(&["EXISTS", &key]);
    assert_eq!(exists, 0);
}

#[test]
fn wrong_types_are_errors() {
    let key = format!("{}k", unique_prefix("increx"));
    let () = support::increx().cmd(&["SET", &key, "not a number"]);
    let err = increx(&[&key]).expect_err("not an integer");
    assert!(err.to_string().contains("not an integer"), "{err}");
    let err = increx(&[&key, "SATURATE"]).expect_err("outside the stand-in's subset");
    assert!(err.to_string().contains("syntax error"), "{err}");
}

#[test]
fn servers_without_the_module_reject_increx_as_unknown() {
    let err = redis::cmd("INCREX")
        .arg("k")
        .query::<(i64, i64)>(&mut support::shared(support::ServerKind::Redis8).connection())
        .expect_err("Redis 8.2 has no INCREX");
    assert!(err.to_string().contains("unknown command"), "{err}");
}
