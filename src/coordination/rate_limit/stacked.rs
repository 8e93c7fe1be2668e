//! Several fixed-window policies on one client key, decided together.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::decision::PolicyState;
use super::key::LimiterKeys;
use super::policy::Policies;
use super::{RateLimitDecision, RateLimitPolicy};
use crate::Coordination;
use crate::backend::steps::stacked_window::StackedWindowStep;
use crate::error::{Error, Result};

/// The most policies one limiter stacks. Every step reads and answers one window per policy,
/// and every HTTP response lists each of them in two fields: 16 keeps a step's hash a small
/// listpack, its script arguments and reply short, and the fields within common header size
/// limits, while covering any sensible ladder of windows (second, minute, hour, day, …).
pub const MAX_STACKED_POLICIES: usize = 16;
/// The largest limit: counts and requests (at most the smallest limit + 1) then add up below
/// 2^53, which the script's Lua numbers (doubles) hold exactly.
pub(crate) const MAX_LIMIT: u64 = (1 << 52) - 1;
/// The longest window, 2^40 ms (about 34 years): window ends on the server's clock stay far
/// below 2^53 ms.
pub(crate) const MAX_WINDOW_MS: u64 = 1 << 40;

/// Several fixed-window policies on each client key (for example 10 per second **and** 1000
/// per day), checked and counted together: a request is granted only if every policy admits
/// it, and then counts in every window; otherwise it counts in none.
///
/// Each policy is a [`FixedWindow`](super::FixedWindow) of [`quota`](RateLimitPolicy::quota)
/// permits per [`window`](RateLimitPolicy::window): the first counted request starts that
/// policy's window, which then ends for every request of the key however many come after,
/// and a window that ends frees only its own policy. A rejected request consumes nothing in
/// any window; a probe (0 permits) consumes and creates nothing. A request of more permits
/// than the smallest limit can never succeed: it is rejected without a retry time. The
/// decision and every time in it come from the backend's clock.
///
/// A policy in [shadow mode](RateLimitPolicy::shadow) never rejects: a request it alone
/// would reject is granted and counted in the other windows, not in its own (it counts
/// what it would admit), and the decision says so
/// ([`is_shadow_rejection`](RateLimitDecision::is_shadow_rejection)); "the smallest limit"
/// above is the smallest enforced one. The layer does not show shadow policies in the
/// `RateLimit` fields, where clients would hold back for them.
///
/// # Decision
///
/// The [`RateLimitDecision`] carries one [`PolicyState`] per policy, in the order given
/// ([`policy_states`](RateLimitDecision::policy_states)). Its top-level
/// [`remaining`](RateLimitDecision::remaining), [`reset_after`](RateLimitDecision::reset_after)
/// and [`limit`](RateLimitDecision::limit) are those of the binding policy (the fewest
/// permits left; on a tie, the longest reset), and a rejection's
/// [`retry_after`](RateLimitDecision::retry_after) is the **longest** wait among the
/// policies that rejected: once every one of their windows has ended, the same request fits.
///
/// # Storage
///
/// One Redis key per (limiter, client key): `<prefix>rl:st:<name length>:<name>:<client key>`,
/// a hash with one field per policy, named by the policy's index (`"0"`, `"1"`, …) and
/// holding `"<count>:<window end>"`, the end in milliseconds since the Unix epoch on the
/// server's clock. One key means one cluster slot without hash tags, and one atomic script
/// reads every window, checks every policy and writes them all or none. The key is created by
/// the first granted request; every grant rewrites each field (starting a new window for a
/// policy whose window ended) and sets the key to expire when its last window ends
/// (`PEXPIREAT`), so nothing outlives the longest window. Probes and rejections write nothing,
/// except to give back an expiry removed from outside. A key of another type or a field of
/// another shape is reported as [`ErrorKind::CorruptState`](crate::ErrorKind::CorruptState)
/// and left as it is.
///
/// Fields are named by position: changing a limiter's list of policies (their order, or
/// windows) while keys are live mixes old windows into new policies until they end; give the
/// new list a new name to start afresh.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::Coordination;
/// use leasehold::coordination::rate_limit::{RateLimitPolicy, Stacked};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> leasehold::Result<()> {
/// let coordination = Coordination::memory();
/// let limiter = Stacked::new(
///     &coordination,
///     "api",
///     [
///         RateLimitPolicy::new("minute", 5, Duration::from_secs(60)),
///         RateLimitPolicy::new("day", 7, Duration::from_secs(86_400)),
///     ],
/// )?;
///
/// assert!(limiter.try_acquire(b"alice", 5).await?.is_granted());
/// // The minute is spent: rejected, and the day's window counts nothing more.
/// let rejected = limiter.try_acquire(b"alice", 1).await?;
/// assert!(!rejected.is_granted());
/// assert!(rejected.retry_after().is_some_and(|wait| wait <= Duration::from_secs(60)));
/// let [minute, day] = rejected.policy_states() else { unreachable!() };
/// assert_eq!((minute.remaining(), day.remaining()), (0, 2));
///
/// // More than the smallest limit can never succeed: no retry time.
/// let impossible = limiter.try_acquire(b"bob", 6).await?;
/// assert_eq!(impossible.retry_after(), None);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Stacked {
    coordination: Coordination,
    /// Its own name, as given (its policies are named under it).
    name: Arc<str>,
    keys: LimiterKeys,
    policies: Arc<[RateLimitPolicy]>,
    /// Per policy: (limit, window in ms), as the step takes them.
    windows: Box<[(u64, u64)]>,
    /// The shadow policies, bit `i` for policy `i`.
    shadows: u32,
    smallest_limit: u64,
}

impl Stacked {
    /// Creates a limiter of the given fixed-window `policies`, named `name` (which separates
    /// its keys from other limiters'). Each policy is named `<name>/<policy name>` from then
    /// on ([`policies`](Self::policies), and the `RateLimit` fields HTTP clients see: `api`'s
    /// `second` is `api/second`); its quota is its limit and its window its window.
    ///
    /// Fails with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) unless
    /// there are 1 to [`MAX_STACKED_POLICIES`] policies with distinct names (clients tell
    /// them apart by name) counting the same unit (every policy counts the same permits), each
    /// with a limit from 1 to 2^52 − 1 (counts stay exact in the script's Lua numbers) and a
    /// window from 1 ms to 2^40 ms (about 34 years). Sub-millisecond parts of a window are
    /// dropped, as by [`FixedWindow::new`](super::FixedWindow::new).
    pub fn new(
        coordination: &Coordination,
        name: impl Into<String>,
        policies: impl IntoIterator<Item = RateLimitPolicy>,
    ) -> Result<Self> {
        super::named("stacked limiter", name.into(), |name| {
            Self::checked(coordination, name, policies)
        })
    }

    /// [`new`](Self::new), its arguments checked.
    fn checked(
        coordination: &Coordination,
        name: String,
        policies: impl IntoIterator<Item = RateLimitPolicy>,
    ) -> Result<Self> {
        let given: Vec<RateLimitPolicy> = policies.into_iter().collect();
        if given.is_empty() || given.len() > MAX_STACKED_POLICIES {
            return Err(Error::invalid_argument(format!(
                "a stacked limiter needs between 1 and {MAX_STACKED_POLICIES} policies, not {}",
                given.len()
            )));
        }
        let mut names = HashSet::new();
        let mut policies = Vec::with_capacity(given.len());
        let mut windows = Vec::with_capacity(given.len());
        let mut shadows = 0u32;
        for policy in given {
            let limit = policy.quota();
            if limit == 0 || limit > MAX_LIMIT {
                return Err(Error::invalid_argument(format!(
                    "the limit of the stacked policy {:?} must be between 1 and {MAX_LIMIT}, \
                     not {limit}",
                    policy.name()
                )));
            }
            let window = policy.window();
            let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
            if window_ms == 0 || window_ms > MAX_WINDOW_MS {
                return Err(Error::invalid_argument(format!(
                    "the window of the stacked policy {:?} must last between 1 ms and \
                     2^40 ms (about 34 years), not {window:?}",
                    policy.name()
                )));
            }
            if !names.insert(policy.name().to_owned()) {
                return Err(Error::invalid_argument(format!(
                    "two stacked policies are named {:?}: clients tell them apart by name",
                    policy.name()
                )));
            }
            if policies
                .first()
                .is_some_and(|first: &RateLimitPolicy| first.unit() != policy.unit())
            {
                return Err(Error::invalid_argument(format!(
                    "the stacked policy {:?} counts {}, not {} as the first one does: every \
                     policy counts the same permits",
                    policy.name(),
                    policy.unit().as_str(),
                    policies[0].unit().as_str()
                )));
            }
            windows.push((limit, window_ms));
            // Named by the limiter too, so that its name stays in the headers beside another
            // stacked layer's policy of the same name.
            let shown = format!("{name}/{}", policy.name());
            let mut kept = RateLimitPolicy::new(shown, limit, Duration::from_millis(window_ms))
                .with_unit(policy.unit());
            if policy.is_shadow() {
                shadows |= 1 << (policies.len());
                kept = kept.shadow();
            }
            policies.push(kept);
        }
        // A request beyond the smallest enforced limit can never be granted (beyond a shadow
        // policy's alone, it is granted: shadow policies never reject).
        let enforced = || {
            windows
                .iter()
                .enumerate()
                .filter(|&(index, _)| shadows >> index & 1 == 0)
                .map(|(_, &(limit, _))| limit)
        };
        let smallest_limit = enforced()
            .min()
            .or_else(|| windows.iter().map(|&(limit, _)| limit).max())
            .unwrap_or(1);
        Ok(Stacked {
            coordination: coordination.clone(),
            keys: LimiterKeys::new(b"st", name.as_bytes()),
            name: name.into(),
            policies: policies.into(),
            windows: windows.into(),
            shadows,
            smallest_limit,
        })
    }

    /// The same limiter shown as `name` (a plan's): its own name and each policy's first
    /// part (`<name>/<policy>`); its keys stay the limiter's.
    pub(super) fn shown_as(mut self, name: Arc<str>) -> Self {
        let old = format!("{}/", self.name);
        let renamed: Vec<RateLimitPolicy> = (self.policies.iter())
            .map(|policy| {
                let own = policy.name().strip_prefix(&old).unwrap_or(policy.name());
                policy.clone().renamed(Arc::from(format!("{name}/{own}")))
            })
            .collect();
        self.policies = renamed.into();
        self.name = name;
        self
    }

    /// The policies, in the order given (and of every decision's
    /// [`policy_states`](RateLimitDecision::policy_states)).
    pub fn policies(&self) -> &[RateLimitPolicy] {
        &self.policies
    }

    /// Its name, as given (its policies are named `<name>/<policy name>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The first policy, for code that shows one policy.
    pub fn policy(&self) -> &RateLimitPolicy {
        &self.policies[0]
    }

    /// The handle its decisions are asked of.
    pub(crate) fn coordination(&self) -> &Coordination {
        &self.coordination
    }

    /// The policies as the layer hands them to each request.
    pub(crate) fn shared_policies(&self) -> Policies {
        match &*self.policies {
            [one] => Policies::One(one.clone()),
            _ => Policies::Many(self.policies.clone()),
        }
    }

    /// Asks for `permits` permits for `key` under every policy, in one atomic step: granted
    /// (and counted in every window) only if every enforced policy admits them (see shadow
    /// policies on [`Stacked`]).
    ///
    /// `permits` = 0 probes the current state without consuming or creating anything.
    /// A request for more permits than the smallest limit is rejected (consuming nothing)
    /// without a retry time, since it can never succeed. A rejection's retry time is the
    /// longest wait among the policies that rejected it.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: if the future is dropped after the request was sent, the permits may
    /// have been consumed (in every window) although no decision is returned. An error whose
    /// [`is_outcome_uncertain`](crate::Error::is_outcome_uncertain) is true means the same.
    /// Either way the windows move together: the script runs whole or not at all.
    pub async fn try_acquire(&self, key: &[u8], permits: u64) -> Result<RateLimitDecision> {
        // An impossible request still reads the state (for the response fields) but must
        // never be counted; the smallest limit + 1 keeps it impossible and exact in Lua.
        let asked = permits.min(self.smallest_limit + 1);
        let storage_key = self.keys.for_client(key);
        let reply = self
            .coordination
            .backend()
            .run(StackedWindowStep {
                key: &storage_key,
                permits: asked,
                windows: &self.windows,
                shadows: self.shadows,
            })
            .await?;
        let mut retry_after = None;
        let states = reply
            .windows
            .iter()
            .zip(self.windows.iter())
            .enumerate()
            .map(|(index, (window, &(limit, window_ms)))| {
                let reset_after = Duration::from_millis(window.ttl_ms.unwrap_or(window_ms));
                // A policy that rejected has a window under way (its count is above 0); a
                // shadow policy rejects nothing.
                let shadow = self.shadows >> index & 1 == 1;
                if !reply.granted && !shadow && window.count.saturating_add(asked) > limit {
                    retry_after = retry_after.max(Some(reset_after));
                }
                PolicyState::new(limit, limit.saturating_sub(window.count), reset_after)
            })
            .collect();
        let retry_after = retry_after.filter(|_| permits <= self.smallest_limit);
        Ok(
            RateLimitDecision::with_states(reply.granted, states, retry_after)
                .shadow_rejected(reply.shadow_rejected != 0),
        )
    }
}

impl fmt::Debug for Stacked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stacked")
            .field("policies", &self.policies)
            .finish_non_exhaustive()
    }
}
