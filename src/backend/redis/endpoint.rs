//! How a deployment is named in errors and logs: its URLs with any password masked.

use super::target::Target;

/// What a password is shown as.
const MASK: &str = "***";

/// `url` with its password (`redis://user:secret@host`, or `?pass=` / `?password=` of a
/// `redis+unix://` URL) replaced by `***`, and a user name given without a password too
/// (`redis://secret@host` may be a password in the wrong place). A URL that does not parse,
/// or has credentials but no host (`redis:/:secret@host`), is not shown at all: it may hold
/// a password where none is expected.
pub(crate) fn redact(url: &str) -> String {
    const UNSHOWN: &str = "<a URL that does not parse as a Redis URL>";
    let Ok(mut parsed) = url::Url::parse(url) else {
        return UNSHOWN.to_owned();
    };
    if !parsed.has_host() && url.contains('@') {
        return UNSHOWN.to_owned();
    }
    // Both fail only for URLs that cannot have credentials, which have none.
    if parsed.password().is_some() {
        _ = parsed.set_password(Some(MASK));
    } else if !parsed.username().is_empty() {
        _ = parsed.set_username(MASK);
    }
    let secret = |name: &str| matches!(name, "pass" | "password");
    if parsed.query_pairs().any(|(name, _)| secret(&name)) {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(name, value)| {
                let value = if secret(&name) { MASK.into() } else { value };
                (name.into_owned(), value.into_owned())
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    parsed.to_string()
}

/// The deployment a target names, passwords masked: `redis://host:6379`, `cluster
/// redis://a:7000, redis://b:7001`, `primary "mymaster" of sentinels redis://s:26379`.
pub(crate) fn describe(target: &Target) -> String {
    let list = |urls: &[String]| {
        urls.iter()
            .map(|url| redact(url))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match target {
        Target::Standalone(url) => redact(url),
        Target::Cluster(urls) => format!("cluster {}", list(urls)),
        Target::Sentinel {
            sentinels,
            service_name,
            ..
        } => format!("primary {service_name:?} of sentinels {}", list(sentinels)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked_and_the_rest_kept() {
        assert_eq!(
            redact("redis://127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
        assert_eq!(
            redact("redis://app:s3cret@10.0.0.1:6380"),
            "redis://app:***@10.0.0.1:6380"
        );
        assert_eq!(
            redact("rediss://:s3cret@cache.internal"),
            "rediss://:***@cache.internal"
        );
        assert_eq!(
            redact("redis+unix:///run/redis.sock?db=2&pass=s3cret&user=app"),
            "redis+unix:///run/redis.sock?db=2&pass=***&user=app"
        );
        assert!(!redact("redis://app:s3cret@[::1").contains("s3cret"));
        assert!(!redact("redis:/:s3cret@host:6379").contains("s3cret"));
        assert!(!redact("redis:user:s3cret@host").contains("s3cret"));
        assert_eq!(redact("redis://s3cret@host:6379"), "redis://***@host:6379");
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(
            redact("rediss://app:p%40ss@[::1]:6380"),
            "rediss://app:***@[::1]:6380"
        );
        assert_eq!(
            describe(&Target::Cluster(vec![
                "redis://:pw@a:7000".into(),
                "redis://b:7001".into()
            ])),
            "cluster redis://:***@a:7000, redis://b:7001"
        );
    }
}
