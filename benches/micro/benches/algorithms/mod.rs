//! The five rate-limit algorithms as the benchmarks drive them: how each limiter is built,
//! and the exact `EVALSHA` its Lua step sends (script, KEYS, ARGV) with how to tell a grant
//! from its reply. `../rate_limit.rs` and `examples/load_limiter.rs` (and through it
//! `scripts/bench.sh`) take both from here, so a limiter and its raw ceiling always run the
//! same script with the same arguments. (The fixed window sends its script for steps of
//! more than one permit only, on a server without `INCREX`: steps of one go as plain
//! commands.)
//!
//! Every limit is so large that every call of a run is granted: the benchmarks measure the
//! grant path. Limits stay below 2^20, as real policies do, so that the scripts that pack a
//! small grant into one integer (all but the stacked one) take that path. Windows are short
//! (1 s) so that the state a hot key reaches stays the same however long a run lasts: the
//! sliding window holds all its segments after one second.
// The bench and the load generator each use part of this.
#![allow(dead_code)]

use std::time::Duration;

use leasehold::coordination::rate_limit::{
    FixedWindow, Gcra, RateLimitPolicy, Refill, SlidingWindow, Stacked, TokenBucket,
};
use leasehold::{Coordination, Result};
use redis::Value;

/// Every limiter's name (it is part of the storage key).
pub const NAME: &str = "api";
/// Permits per window, per bucket or per stacked policy: more than any run takes in one
/// window (a few hundred thousand calls a second at most), and below 2^20.
const LIMIT: u64 = 1_000_000;
const WINDOW_MS: u64 = 1_000;
const SEGMENTS: u32 = 10;
/// Refill of the token bucket, per `WINDOW_MS`.
const TOKENS_PER_PERIOD: u64 = 1_000_000;
/// GCRA: 100 permits a second (an emission interval of 10 ms) with a burst of 10^6, a
/// tolerance of 10,000 s that no run uses up, and a TAT that stays less than 2^32 µs ahead
/// through a run (fewer than 400,000 calls), so that grants take the packed reply. Each
/// grant moves the TAT 10 ms ahead, faster than a run's clock moves, so the key outlives the
/// gap between two calls, as it does for any client that uses its burst.
const GCRA_INTERVAL_US: u64 = 10_000;
const GCRA_BURST: u64 = 1_000_000;
/// Calls a limiter takes before its key is checked and a run starts: enough for the GCRA's
/// key to live half a second, so that the check cannot race its expiry.
pub const WARM_UP_CALLS: usize = 50;
/// The stacked limiter's second policy: a minute, next to the first one's second.
const STACKED_LONG_WINDOW_MS: u64 = 60_000;
/// Its permits: more than a minute of runs takes (the limiter's and its raw `EVALSHA`'s,
/// which count on one key), where `LIMIT` would run out within the minute. The stacked
/// script packs no grant, so no bound of 2^20 applies.
const STACKED_LONG_LIMIT: u64 = 1_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    FixedWindow,
    SlidingWindow,
    TokenBucket,
    Gcra,
    Stacked,
}

impl Algorithm {
    pub const ALL: [Algorithm; 5] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::Stacked,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Gcra => "gcra",
            Algorithm::Stacked => "stacked",
        }
    }

    pub fn parse(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The limiter's Lua script, byte for byte (so its SHA-1 is the one the limiter sends).
    pub fn lua(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => {
                include_str!("../../../../src/backend/steps/fixed_window/fixed_window.lua")
            }
            Algorithm::SlidingWindow => {
                include_str!("../../../../src/backend/steps/sliding_window/sliding_window.lua")
            }
            Algorithm::TokenBucket => {
                include_str!("../../../../src/backend/steps/token_bucket/token_bucket.lua")
            }
            Algorithm::Gcra => include_str!("../../../../src/backend/steps/gcra/gcra.lua"),
            Algorithm::Stacked => {
                include_str!("../../../../src/backend/steps/stacked_window/stacked_window.lua")
            }
        }
    }

    /// The limiter named [`NAME`], with the settings [`Algorithm::evalsha_args`] mirrors.
    pub fn limiter(self, coordination: &Coordination) -> Result<Limiter> {
        let window = Duration::from_millis(WINDOW_MS);
        Ok(match self {
            Algorithm::FixedWindow => {
                Limiter::FixedWindow(FixedWindow::new(coordination, NAME, LIMIT, window)?)
            }
            Algorithm::SlidingWindow => Limiter::SlidingWindow(SlidingWindow::new(
                coordination,
                NAME,
                LIMIT,
                window,
                SEGMENTS,
            )?),
            Algorithm::TokenBucket => Limiter::TokenBucket(TokenBucket::new(
                coordination,
                NAME,
                LIMIT,
                Refill::new(TOKENS_PER_PERIOD, window),
            )?),
            Algorithm::Gcra => Limiter::Gcra(Gcra::new(
                coordination,
                NAME,
                1,
                Duration::from_micros(GCRA_INTERVAL_US),
                GCRA_BURST,
            )?),
            Algorithm::Stacked => Limiter::Stacked(Stacked::new(
                coordination,
                NAME,
                [
                    RateLimitPolicy::new("second", LIMIT, window),
                    RateLimitPolicy::new(
                        "minute",
                        STACKED_LONG_LIMIT,
                        Duration::from_millis(STACKED_LONG_WINDOW_MS),
                    ),
                ],
            )?),
        })
    }

    /// The Redis key the limiter keeps `client_key`'s state under, on a backend whose key
    /// prefix is `prefix`: `<prefix>|rl:<algorithm>:<name length>:<name>:<client key>`.
    pub fn key(self, prefix: &str, client_key: &str) -> String {
        let tag = match self {
            Algorithm::FixedWindow => "fw",
            Algorithm::SlidingWindow => "sw",
            Algorithm::TokenBucket => "tb",
            Algorithm::Gcra => "gcra",
            Algorithm::Stacked => "st",
        };
        // The backend ends every prefix with `|` (see `docs/deploying-redis.md`, Key prefixes).
        format!("{prefix}|rl:{tag}:{}:{NAME}:{client_key}", NAME.len())
    }

    /// What follows `EVALSHA <sha>` when the limiter takes one permit for `client_key`:
    /// numkeys, KEYS, ARGV, as the Rust side in `src/backend/redis/<algorithm>.rs` writes them
    /// (integers in decimal, which is how redis-rs sends a `u64`).
    pub fn evalsha_args(self, prefix: &str, client_key: &str) -> Vec<String> {
        let argv: &[u64] = match self {
            // permits, limit, window ms
            Algorithm::FixedWindow => &[1, LIMIT, WINDOW_MS],
            // permits, limit, window ms, segment ms
            Algorithm::SlidingWindow => &[1, LIMIT, WINDOW_MS, WINDOW_MS / u64::from(SEGMENTS)],
            // permits, capacity, refill tokens, refill interval ms
            Algorithm::TokenBucket => &[1, LIMIT, TOKENS_PER_PERIOD, WINDOW_MS],
            // permits, emission interval µs, burst
            Algorithm::Gcra => &[1, GCRA_INTERVAL_US, GCRA_BURST],
            // permits, then (limit, window ms) per policy
            // Permits, no shadow policy, then each policy's limit and window.
            Algorithm::Stacked => &[
                1,
                0,
                LIMIT,
                WINDOW_MS,
                STACKED_LONG_LIMIT,
                STACKED_LONG_WINDOW_MS,
            ],
        };
        let mut args = vec!["1".to_owned(), self.key(prefix, client_key)];
        args.extend(argv.iter().map(u64::to_string));
        args
    }

    /// The limiter's `EVALSHA` for one permit, as a command to send as is.
    pub fn evalsha(self, sha: &str, prefix: &str, client_key: &str) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(sha).arg(self.evalsha_args(prefix, client_key));
        cmd
    }

    /// Whether the script's reply is a grant.
    pub fn is_grant(self, reply: &Value) -> bool {
        match (self, reply) {
            // Every script but the stacked one packs a grant into one integer (of either
            // sign: see `script_reply.rs`), and answers nothing else as one.
            (Algorithm::Stacked, Value::Int(_)) => false,
            (_, Value::Int(_)) => true,
            // Every other reply is a table whose first field is its status.
            (_, Value::Array(fields)) => matches!(
                fields.first(),
                Some(Value::BulkString(status)) if status == b"granted"
            ),
            _ => false,
        }
    }
}

/// One of the five limiters, behind one `acquire`.
#[derive(Clone)]
pub enum Limiter {
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    TokenBucket(TokenBucket),
    Gcra(Gcra),
    Stacked(Stacked),
}

impl Limiter {
    /// Asks for one permit for `client_key`; true when granted.
    pub async fn acquire(&self, client_key: &[u8]) -> Result<bool> {
        let decision = match self {
            Limiter::FixedWindow(l) => l.try_acquire(client_key, 1).await?,
            Limiter::SlidingWindow(l) => l.try_acquire(client_key, 1).await?,
            Limiter::TokenBucket(l) => l.try_acquire(client_key, 1).await?,
            Limiter::Gcra(l) => l.try_acquire(client_key, 1).await?,
            Limiter::Stacked(l) => l.try_acquire(client_key, 1).await?,
        };
        Ok(decision.is_granted())
    }
}

/// Takes [`WARM_UP_CALLS`] steps for `client_key`, which loads the script and settles the
/// fixed window's `INCREX` probe (Redis 7.0 rejects it once); false if one was denied.
pub async fn warm_up(limiter: &Limiter, client_key: &[u8]) -> Result<bool> {
    for _ in 0..WARM_UP_CALLS {
        if !limiter.acquire(client_key).await? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Checks, after a limiter's [warm-up](warm_up) for `client_key`, that [`Algorithm::key`]
/// names the key it wrote: the raw `EVALSHA` then works on the same kind of key as the
/// limiter.
pub async fn check_key(
    connection: &mut redis::aio::ConnectionManager,
    algorithm: Algorithm,
    prefix: &str,
    client_key: &str,
) -> std::result::Result<(), String> {
    let key = algorithm.key(prefix, client_key);
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&key)
        .query_async(connection)
        .await
        .map_err(|err| format!("EXISTS {key}: {err}"))?;
    if exists == 1 {
        Ok(())
    } else {
        Err(format!(
            "the {} limiter wrote no key {key:?}: the key layout here is out of date",
            algorithm.name()
        ))
    }
}
