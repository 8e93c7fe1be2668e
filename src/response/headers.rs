//! The HTTP fields of a rate-limit answer.
//!
//! A client learns the limits it is under from two fields of
//! [draft-ietf-httpapi-ratelimit-headers-11], both Structured Field Lists with one member
//! per policy, named by an sf-string:
//!
//! - `RateLimit-Policy` describes each policy and rarely changes: its quota `q`, in units
//!   `qu` (absent for the default, requests), per window `w` seconds;
//! - `RateLimit` is the live state: `r` units are still available, and within the next `t`
//!   seconds the client can use no more than those.
//!
//! A rejection adds `Retry-After`, in seconds, and an `application/problem+json` body
//! ([RFC 9457]). Clients that predate the draft read the `X-RateLimit-*` fields instead.
//!
//! ```text
//! RateLimit-Policy: "default";q=100;w=60
//! RateLimit: "default";r=0;t=17
//! Retry-After: 17
//! ```
//!
//! [draft-ietf-httpapi-ratelimit-headers-11]: https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/11/
//! [RFC 9457]: https://www.rfc-editor.org/rfc/rfc9457

use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use sfv::{Integer, KeyRef, ListSerializer, StringRef, key_ref};

use crate::coordination::rate_limit::{PolicyState, QuotaUnit, RateLimitPolicy};

/// `RateLimit-Policy`: the policies that apply to the request.
pub(crate) const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`: what is left of each policy's quota.
pub(crate) const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit`: the quota, for clients that predate the draft.
pub(crate) const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`: what is left of the quota.
pub(crate) const X_RATELIMIT_REMAINING: HeaderName =
    HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`: seconds until the quota is fully available again.
pub(crate) const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

const QUOTA: &KeyRef = key_ref("q");
const QUOTA_UNIT: &KeyRef = key_ref("qu");
const WINDOW: &KeyRef = key_ref("w");
#[cfg(test)]
const REMAINING: &KeyRef = key_ref("r");
#[cfg(test)]
const EFFECTIVE_WINDOW: &KeyRef = key_ref("t");

/// The `RateLimit` value through the structured-fields serializer: the reference that
/// [`RateLimitFields`] is checked against.
#[cfg(test)]
pub(crate) fn rate_limit<'a>(
    entries: impl IntoIterator<Item = (&'a RateLimitPolicy, &'a PolicyState)>,
) -> Option<HeaderValue> {
    let mut list = ListSerializer::new();
    for (policy, state) in entries {
        _ = list
            .bare_item(&*sf_string(policy.name()))
            .parameter(REMAINING, sf_integer(state.remaining()))
            .parameter(
                EFFECTIVE_WINDOW,
                sf_integer(seconds_up(state.reset_after())),
            );
    }
    field_value(list)
}

/// The `Retry-After` value in delay-seconds (RFC 9110, section 10.2.3).
///
/// Rounded up, so that any wait at all is at least `1`: a client told `0` would retry at
/// once and be rejected again.
pub(crate) fn retry_after(wait: Duration) -> HeaderValue {
    let seconds = seconds_up(wait);
    // The waits of a flood of refusals are short: written from static text, they cost no
    // formatting and no allocation per response.
    match usize::try_from(seconds)
        .ok()
        .and_then(|at| SHORT_SECONDS.get(at))
    {
        Some(text) => HeaderValue::from_static(text),
        None => HeaderValue::from(seconds),
    }
}

/// The delay-seconds from 0 to 120, as text.
const SHORT_SECONDS: [&str; 121] = [
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
    "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31", "32",
    "33", "34", "35", "36", "37", "38", "39", "40", "41", "42", "43", "44", "45", "46", "47", "48",
    "49", "50", "51", "52", "53", "54", "55", "56", "57", "58", "59", "60", "61", "62", "63", "64",
    "65", "66", "67", "68", "69", "70", "71", "72", "73", "74", "75", "76", "77", "78", "79", "80",
    "81", "82", "83", "84", "85", "86", "87", "88", "89", "90", "91", "92", "93", "94", "95", "96",
    "97", "98", "99", "100", "101", "102", "103", "104", "105", "106", "107", "108", "109", "110",
    "111", "112", "113", "114", "115", "116", "117", "118", "119", "120",
];

/// The `RateLimit-Policy` and `RateLimit` fields of one layer's policies.
///
/// Everything that never changes is serialized once, with the structured-fields library:
/// the whole `RateLimit-Policy` value and each policy's name. Each response then only writes
/// two integers per policy into a `RateLimit` value such as `"default";r=50;t=30`, where `t`
/// is the time until the quota is fully available again, in whole seconds rounded up so that
/// a client waiting it out never comes back early (0 when the quota is already whole).
/// Serializing the whole List per response cost more than the rest of the layer's work.
#[derive(Debug, Clone)]
pub(crate) struct RateLimitFields {
    policy: Option<HeaderValue>,
    /// Each shown policy's index among the limiter's, and its name as a serialized
    /// sf-string, quotes included. A shadow policy is not shown: a client that honours the
    /// fields would hold back for a policy that is only being tried.
    names: Vec<(usize, Box<[u8]>)>,
}

impl RateLimitFields {
    pub(crate) fn new<'a>(policies: impl IntoIterator<Item = &'a RateLimitPolicy> + Clone) -> Self {
        let names = policies
            .clone()
            .into_iter()
            .enumerate()
            .filter(|(_, policy)| !policy.is_shadow())
            .map(|(index, policy)| {
                say_if_rewritten(policy.name());
                let mut list = ListSerializer::new();
                _ = list.bare_item(&*sf_string(policy.name()));
                let name = list
                    .finish()
                    .unwrap_or_default()
                    .into_bytes()
                    .into_boxed_slice();
                (index, name)
            })
            .collect();
        RateLimitFields {
            policy: rate_limit_policy(policies.into_iter().filter(|policy| !policy.is_shadow())),
            names,
        }
    }

    /// The `RateLimit` value for the policies' states, in policy order; `None` for no
    /// policies, since an empty List is not sent at all.
    pub(crate) fn rate_limit(
        &self,
        states: &[PolicyState],
        partition: Option<&[u8]>,
    ) -> Option<HeaderValue> {
        // `;pk=:<tag>:` after each member, where the layer shows partition keys.
        let pk = partition.unwrap_or_default();
        let pk_len = if pk.is_empty() { 0 } else { pk.len() + 6 };
        let members = || {
            self.names.iter().filter_map(|(index, name)| {
                let state = states.get(*index)?;
                Some((name, state.remaining(), seconds_up(state.reset_after())))
            })
        };
        // Sized exactly: a buffer whose length is its capacity becomes the value's bytes as
        // it is, where any other would cost a second allocation to share it.
        let size = members()
            .map(|(name, remaining, reset)| {
                name.len() + 6 + sf_integer_len(remaining) + sf_integer_len(reset) + pk_len
            })
            .sum::<usize>()
            + 2 * members().count().saturating_sub(1);
        let mut value = Vec::with_capacity(size);
        for (name, remaining, reset) in members() {
            if !value.is_empty() {
                value.extend_from_slice(b", ");
            }
            value.extend_from_slice(name);
            value.extend_from_slice(b";r=");
            push_sf_integer(&mut value, remaining);
            value.extend_from_slice(b";t=");
            push_sf_integer(&mut value, reset);
            if !pk.is_empty() {
                value.extend_from_slice(b";pk=:");
                value.extend_from_slice(pk);
                value.push(b':');
            }
        }
        if value.is_empty() {
            return None;
        }
        debug_assert_eq!(value.len(), value.capacity(), "sized exactly");
        // Serialized names, digits and separators: always a valid field value.
        HeaderValue::from_maybe_shared(bytes::Bytes::from(value)).ok()
    }

    /// Adds `RateLimit-Policy` and `RateLimit`.
    ///
    /// The values are appended rather than inserted: a List may be split over several field
    /// lines, so stacked rate-limit layers each add their own policies instead of hiding the
    /// others'.
    pub(crate) fn insert(
        &self,
        headers: &mut HeaderMap,
        states: &[PolicyState],
        partition: Option<&[u8]>,
    ) {
        if let Some(value) = &self.policy {
            headers.append(RATELIMIT_POLICY, value.clone());
        }
        if let Some(value) = self.rate_limit(states, partition) {
            headers.append(RATELIMIT, value);
        }
    }
}

/// The largest sf-integer (15 digits).
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// How many digits [`push_sf_integer`] writes for `n`.
fn sf_integer_len(n: u64) -> usize {
    n.min(SF_INTEGER_MAX)
        .checked_ilog10()
        .map_or(1, |log| log as usize + 1)
}

/// Appends an sf-integer in decimal, capped as [`sf_integer`] caps it.
fn push_sf_integer(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = n.min(SF_INTEGER_MAX);
    loop {
        at -= 1;
        // A digit is below 10: the cast keeps it exactly.
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Sets the `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset` fields of
/// one policy (the binding one, when there are several), for clients that predate the draft.
///
/// `X-RateLimit-Reset` counts the seconds until the quota is fully available again (rounded
/// up), as most API gateways do, rather than giving a Unix timestamp as some APIs do: a
/// delay does not depend on the client's clock agreeing with the server's.
///
/// The fields hold one policy where the draft's fields list each: when a layer nested
/// inside this one already wrote them with no more remaining, they are left as they are, so
/// that a client sees the limit that binds it (an inner layer's 429 keeps its
/// `X-RateLimit-Remaining: 0`).
pub(crate) fn insert_legacy_headers(
    headers: &mut HeaderMap,
    policy: &RateLimitPolicy,
    state: &PolicyState,
) {
    let written = headers
        .get(X_RATELIMIT_REMAINING)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if written.is_some_and(|written| written <= state.remaining()) {
        return;
    }
    headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(policy.quota()));
    headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(state.remaining()));
    headers.insert(
        X_RATELIMIT_RESET,
        HeaderValue::from(seconds_up(state.reset_after())),
    );
}

/// A problem type of draft-ietf-httpapi-ratelimit-headers: its URI and title.
pub(crate) type ProblemType = (&'static str, &'static str);

/// A quota exhausted (`429`).
pub(crate) const QUOTA_EXCEEDED: ProblemType = (
    "https://iana.org/assignments/http-problem-types#quota-exceeded",
    "Quota Exceeded",
);

/// No decision could be made for now (`503`).
pub(crate) const TEMPORARY_REDUCED_CAPACITY: ProblemType = (
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",
    "Temporary Reduced Capacity",
);

/// An RFC 9457 problem: the `Content-Type` value and the JSON body, such as
/// `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota
/// Exceeded","status":429,"detail":"...","violated-policies":["api"]}`.
///
/// `problem` gives the type and title (`about:blank` and `title` without); `violated` the
/// names of the policies the request exceeded, as the draft's `violated-policies` member
/// (none: no member). `retry_after` adds a `retry_after` member in seconds, rounded up like
/// the field, for clients that only read the body.
pub(crate) fn problem_json(
    status: StatusCode,
    title: &str,
    problem: Option<ProblemType>,
    detail: &str,
    violated: &[String],
    retry_after: Option<Duration>,
) -> (HeaderValue, String) {
    let (uri, title) = problem.unwrap_or(("about:blank", title));
    let mut body = String::from(r#"{"type":"#);
    push_json_string(&mut body, uri);
    body.push_str(r#","title":"#);
    push_json_string(&mut body, title);
    // Writing into a String cannot fail.
    _ = write!(body, r#","status":{},"detail":"#, status.as_u16());
    push_json_string(&mut body, detail);
    if !violated.is_empty() {
        body.push_str(r#","violated-policies":["#);
        for (i, name) in violated.iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            push_json_string(&mut body, name);
        }
        body.push(']');
    }
    if let Some(wait) = retry_after {
        _ = write!(body, r#","retry_after":{}"#, seconds_up(wait));
    }
    body.push('}');
    (HeaderValue::from_static("application/problem+json"), body)
}

/// The `RateLimit-Policy` value: one member per policy, such as `"default";q=100;w=60`.
///
/// The window is in whole seconds rounded up, and at least 1: the draft allows no zero or
/// sub-second window, and rounding down would promise the quota over a shorter window than
/// the one enforced. `None` for no policies, since an empty List is not sent at all.
pub(crate) fn rate_limit_policy<'a>(
    policies: impl IntoIterator<Item = &'a RateLimitPolicy>,
) -> Option<HeaderValue> {
    let mut list = ListSerializer::new();
    for policy in policies {
        let mut member = list
            .bare_item(&*sf_string(policy.name()))
            .parameter(QUOTA, sf_integer(policy.quota()));
        if policy.unit() != QuotaUnit::Requests {
            member = member.parameter(QUOTA_UNIT, &*sf_string(policy.unit().as_str()));
        }
        _ = member.parameter(WINDOW, sf_integer(seconds_up(policy.window()).max(1)));
    }
    field_value(list)
}

/// The `RateLimit-Policy` value of concurrency limits: one member per semaphore, such as
/// `"downloads";q=2;qu="concurrent-requests"`. No window: the quota holds at every instant.
/// `None` for no members.
pub(crate) fn concurrency_policy(
    members: impl IntoIterator<Item = (String, u32)>,
) -> Option<HeaderValue> {
    let mut list = ListSerializer::new();
    for (name, quota) in members {
        say_if_rewritten(&name);
        _ = list
            .bare_item(&*sf_string(&name))
            .parameter(QUOTA, Integer::from(quota))
            .parameter(
                QUOTA_UNIT,
                &*sf_string(QuotaUnit::ConcurrentRequests.as_str()),
            );
    }
    field_value(list)
}

/// Warns, once per layer (its fields are made once), when a policy name is not printable
/// ASCII: the headers show it with `?` in place of the rest.
fn say_if_rewritten(name: &str) {
    if let Cow::Owned(shown) = sf_string(name) {
        tracing::warn!(
            policy = name,
            shown = shown.as_str(),
            "a policy name outside printable ASCII is shown with `?` in the RateLimit headers"
        );
    }
}

/// An sf-string holds printable ASCII only: anything else in a policy name becomes `?`, so
/// that an odd name still yields a well-formed field rather than none.
fn sf_string(text: &str) -> Cow<'_, StringRef> {
    match StringRef::from_str(text) {
        Ok(valid) => Cow::Borrowed(valid),
        Err(_) => {
            let printable = text
                .chars()
                .map(|c| if matches!(c, ' '..='~') { c } else { '?' })
                .collect();
            // Every character is now printable ASCII, so the empty fallback is never taken.
            Cow::Owned(sfv::String::from_string(printable).unwrap_or_default())
        }
    }
}

/// Structured Field Integers stop at 15 digits; larger counts are shown as that maximum.
fn sf_integer(n: u64) -> Integer {
    Integer::try_from(n).unwrap_or(Integer::MAX)
}

fn seconds_up(duration: Duration) -> u64 {
    duration
        .as_secs()
        .saturating_add(u64::from(duration.subsec_nanos() > 0))
}

/// A serialized List is printable ASCII, always a valid field value: the conversion's error
/// is as unreachable as an empty List, and both mean there is no field to send.
fn field_value(list: ListSerializer<String>) -> Option<HeaderValue> {
    HeaderValue::try_from(list.finish()?).ok()
}

/// A JSON string (RFC 8259): quotes and backslashes escaped, control characters as
/// `\u00XX`, everything else as is, since the body is UTF-8.
fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str(r#"\""#),
            '\\' => out.push_str(r"\\"),
            // Writing into a String cannot fail.
            c if c < ' ' => _ = write!(out, "\\u{:04x}", u32::from(c)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(remaining: u64, reset_after: Duration) -> PolicyState {
        PolicyState::new(100, remaining, reset_after)
    }

    fn text(value: &HeaderValue) -> &str {
        value.to_str().unwrap()
    }

    #[test]
    fn policy_fields() {
        let default = RateLimitPolicy::new("default", 100, Duration::from_secs(60));
        let bytes = RateLimitPolicy::new("upload", 65_535, Duration::from_millis(9_001))
            .with_unit(QuotaUnit::ContentBytes);
        let burst = RateLimitPolicy::new("burst", 5, Duration::from_millis(1));

        let value = rate_limit_policy([&default, &bytes, &burst]).unwrap();

        assert_eq!(
            text(&value),
            r#""default";q=100;w=60, "upload";q=65535;qu="content-bytes";w=10, "burst";q=5;w=1"#
        );
    }

    #[test]
    fn policy_window_is_at_least_one_second() {
        let instant = RateLimitPolicy::new("instant", 1, Duration::ZERO);
        let value = rate_limit_policy([&instant]).unwrap();
        assert_eq!(text(&value), r#""instant";q=1;w=1"#);
    }

    #[test]
    fn no_policies_no_field() {
        assert_eq!(rate_limit_policy([]), None);
        assert_eq!(rate_limit([]), None);
    }

    #[test]
    fn names_are_escaped_or_replaced() {
        let quoted = RateLimitPolicy::new(r#"a "b" \c"#, 1, Duration::from_secs(1));
        let odd = RateLimitPolicy::new("café\tbar", 1, Duration::from_secs(1));

        let value = rate_limit_policy([&quoted, &odd]).unwrap();

        assert_eq!(text(&value), r#""a \"b\" \\c";q=1;w=1, "caf??bar";q=1;w=1"#);
    }

    #[test]
    fn quotas_beyond_sf_integers_are_capped() {
        let huge = RateLimitPolicy::new("huge", u64::MAX, Duration::MAX);
        let value = rate_limit_policy([&huge]).unwrap();
        assert_eq!(
            text(&value),
            r#""huge";q=999999999999999;w=999999999999999"#
        );
    }

    #[test]
    fn rate_limit_fields() {
        let minute = RateLimitPolicy::new("minute", 100, Duration::from_secs(60));
        let day = RateLimitPolicy::new("day", 1_000, Duration::from_secs(86_400));
        let now = decision(50, Duration::from_millis(29_001));
        let today = decision(0, Duration::ZERO);

        let value = rate_limit([(&minute, &now), (&day, &today)]).unwrap();

        assert_eq!(text(&value), r#""minute";r=50;t=30, "day";r=0;t=0"#);
    }

    #[test]
    fn retry_after_rounds_up() {
        let cases = [(0, "0"), (1, "1"), (999, "1"), (1_000, "1"), (1_001, "2")];
        for (millis, expected) in cases {
            assert_eq!(text(&retry_after(Duration::from_millis(millis))), expected);
        }
        assert_eq!(text(&retry_after(Duration::from_nanos(1))), "1");
    }

    /// Every wait reads as its seconds, from the static table and past it.
    #[test]
    fn retry_after_is_the_seconds_whatever_their_number() {
        for seconds in (0..=130).chain([86_400, u64::MAX]) {
            let value = retry_after(Duration::from_secs(seconds));
            assert_eq!(text(&value), seconds.to_string());
        }
    }

    #[test]
    fn inserts_both_fields() {
        let policy = RateLimitPolicy::new("default", 100, Duration::from_secs(60));
        let decision = decision(99, Duration::from_secs(60));
        let mut headers = HeaderMap::new();

        RateLimitFields::new([&policy]).insert(&mut headers, &[decision], None);

        assert_eq!(headers.len(), 2);
        assert_eq!(text(&headers[RATELIMIT_POLICY]), r#""default";q=100;w=60"#);
        assert_eq!(text(&headers[RATELIMIT]), r#""default";r=99;t=60"#);
    }

    #[test]
    fn rate_limit_values_match_the_serializer() {
        let policies = [
            RateLimitPolicy::new("minute", 100, Duration::from_secs(60)),
            RateLimitPolicy::new(r#"a "b" \c"#, 1, Duration::from_secs(1)),
            RateLimitPolicy::new("café\tbar", u64::MAX, Duration::MAX),
        ];
        let states = [
            decision(50, Duration::from_millis(29_001)),
            decision(0, Duration::ZERO),
            PolicyState::new(u64::MAX, u64::MAX, Duration::MAX),
        ];
        let fields = RateLimitFields::new(&policies);
        for n in 0..=policies.len() {
            let fast = fields.rate_limit(&states[..n], None);
            let reference = rate_limit(policies[..n].iter().zip(&states[..n]));
            assert_eq!(fast, reference, "{n} policies");
        }
        assert_eq!(
            text(&fields.rate_limit(&states, None).unwrap()),
            r#""minute";r=50;t=30, "a \"b\" \\c";r=0;t=0, "caf??bar";r=999999999999999;t=999999999999999"#
        );
    }

    /// The `RateLimit` value is sized before it is written: the length counted for every
    /// integer is the length written, at each power of ten and at the cap.
    #[test]
    fn integer_lengths_are_the_lengths_written() {
        let mut edges = vec![0, u64::MAX, SF_INTEGER_MAX, SF_INTEGER_MAX + 1];
        for power in 0..20 {
            let n = 10u64.pow(power);
            edges.extend([n - 1, n, n + 1]);
        }
        for n in edges {
            let mut written = Vec::new();
            push_sf_integer(&mut written, n);
            assert_eq!(sf_integer_len(n), written.len(), "{n}");
        }
    }

    #[test]
    fn stacked_layers_append() {
        let outer = RateLimitPolicy::new("outer", 10, Duration::from_secs(1));
        let inner = RateLimitPolicy::new("inner", 20, Duration::from_secs(2));
        let decision = decision(5, Duration::from_secs(1));
        let mut headers = HeaderMap::new();

        RateLimitFields::new([&inner]).insert(&mut headers, &[decision], None);
        RateLimitFields::new([&outer]).insert(&mut headers, &[decision], None);

        let policies: Vec<_> = headers.get_all(RATELIMIT_POLICY).iter().map(text).collect();
        assert_eq!(policies, [r#""inner";q=20;w=2"#, r#""outer";q=10;w=1"#]);
        assert_eq!(headers.get_all(RATELIMIT).iter().count(), 2);
    }

    #[test]
    fn concurrency_policy_fields() {
        let value = concurrency_policy([
            ("downloads".to_owned(), 2),
            ("downloads-global".to_owned(), 100),
        ])
        .unwrap();
        assert_eq!(
            text(&value),
            r#""downloads";q=2;qu="concurrent-requests", "downloads-global";q=100;qu="concurrent-requests""#
        );
        assert_eq!(concurrency_policy([]), None);
    }

    #[test]
    fn nothing_to_insert() {
        let mut headers = HeaderMap::new();
        RateLimitFields::new([]).insert(&mut headers, &[], None);
        assert!(headers.is_empty());
    }

    #[test]
    fn legacy_fields() {
        let policy = RateLimitPolicy::new("default", 100, Duration::from_secs(60));
        let decision = decision(7, Duration::from_millis(12_300));
        let mut headers = HeaderMap::new();

        insert_legacy_headers(&mut headers, &policy, &decision);

        assert_eq!(text(&headers[X_RATELIMIT_LIMIT]), "100");
        assert_eq!(text(&headers[X_RATELIMIT_REMAINING]), "7");
        assert_eq!(text(&headers[X_RATELIMIT_RESET]), "13");
    }

    #[test]
    fn problem_body() {
        let (content_type, body) = problem_json(
            StatusCode::TOO_MANY_REQUESTS,
            "Too Many Requests",
            None,
            "quota exceeded",
            &[],
            None,
        );

        assert_eq!(text(&content_type), "application/problem+json");
        assert_eq!(
            body,
            r#"{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"quota exceeded"}"#
        );
    }

    #[test]
    fn problem_body_with_retry_after() {
        let (_, body) = problem_json(
            StatusCode::SERVICE_UNAVAILABLE,
            "Busy",
            None,
            "later",
            &[],
            Some(Duration::from_millis(1_500)),
        );

        assert_eq!(
            body,
            r#"{"type":"about:blank","title":"Busy","status":503,"detail":"later","retry_after":2}"#
        );
    }

    #[test]
    fn a_quota_exceeded_problem_names_its_type_and_the_violated_policies() {
        let (_, body) = problem_json(
            StatusCode::TOO_MANY_REQUESTS,
            "Too Many Requests",
            Some(QUOTA_EXCEEDED),
            "spent",
            &["api/day".to_owned(), "api/second".to_owned()],
            Some(Duration::from_secs(3)),
        );
        assert_eq!(
            body,
            r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"spent","violated-policies":["api/day","api/second"],"retry_after":3}"#
        );
    }

    #[test]
    fn problem_strings_are_escaped() {
        let (_, body) = problem_json(
            StatusCode::TOO_MANY_REQUESTS,
            "say \"hi\"",
            None,
            "C:\\tmp\n\t\u{0}\u{1f} é",
            &[],
            None,
        );

        assert_eq!(
            body,
            r#"{"type":"about:blank","title":"say \"hi\"","status":429,"detail":"C:\\tmp\u000a\u0009\u0000\u001f é"}"#
        );
    }
}
