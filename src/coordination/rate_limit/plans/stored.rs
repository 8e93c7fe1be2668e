//! Plans stored in the backend and followed by every process: the plan set's fields, the
//! first write that seeds it, and the task that reads it again at each change.
//!
//! The plan set is one hash (`<prefix>rl:plans:<name length>:<name>`; a held entry on the
//! memory backend) with the fields `version` (a count of its writes), `default` and
//! `plan:<name>`, each quota as configuration writes it (`100/min`); the customers'
//! overrides are another (`<prefix>rl:plan-overrides:<name length>:<name>`), with `version`
//! and `c:<customer>` fields, read one customer at a time (see `overrides`). Neither has an
//! expiry: they are configuration, as a fenced value is the user's data. Overrides lost
//! (a restart without persistence) are stored again from the configured ones; those set at
//! runtime since are lost with them.
//!
//! A process follows it through a watch of its key (client tracking on Redis: the server
//! pushes an invalidation at every write), reading the whole set once the watch is set and
//! again at each change; on the memory backend, which announces nothing, it reads the
//! version every [`MEMORY_POLL`]. While the backend cannot be reached, the last plans read
//! stay in force; once it answers, the set is read again before anything else. A set that is
//! gone (deleted, or lost with a server restarted without persistence) is stored again from
//! the plans in force, so that no runtime change is lost to it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::watch;

use super::overrides::OverrideCache;
use super::table::{Kit, Spec, Table, check_name};
use super::{Inner, RateLimitPlans};
use crate::backend::delivery::Delivery;
use crate::backend::steps::rate_limit_plans::{
    FieldChange, PlanSetFieldReadStep, PlanSetReadStep, PlanSetWriteStep, PlanSetWritten,
    VERSION_FIELD,
};
use crate::coordination::name;
use crate::coordination::rate_limit::Quotas;
use crate::error::{Error, ErrorKind, Result};

/// How often a process on the memory backend reads the plan set (which announces nothing).
pub(crate) const MEMORY_POLL: Duration = Duration::from_millis(50);
/// How often the plan set is read where the server refuses a watch of it.
const POLL_WITHOUT_WATCH: Duration = Duration::from_millis(250);
/// How long a server that refused a watch is read without one before it is asked again.
const WATCH_RETRY: Duration = Duration::from_secs(30);
/// The shortest round of the follower once rounds come that fast: a watch that fires at
/// once again and again costs no more.
const MIN_ROUND: Duration = Duration::from_millis(10);
/// The longest pause between two attempts to follow the plan set while the backend fails.
const MOST_PAUSE: Duration = Duration::from_secs(2);

const DEFAULT_FIELD: &[u8] = b"default";
const PLAN_PREFIX: &[u8] = b"plan:";
const CUSTOMER_PREFIX: &[u8] = b"c:";

/// Where a set of plans is stored, what this process holds of its overrides, and the end
/// of its follower.
pub(crate) struct Store {
    pub(crate) key: Vec<u8>,
    /// The customers' overrides: a set of the same shape, a quota per customer (its field
    /// `c:<customer>`, apart from `version`).
    pub(crate) overrides_key: Vec<u8>,
    pub(crate) overrides: OverrideCache,
    /// The overrides this process was configured with: stored where none are, and standing
    /// in while the store cannot be read.
    pub(crate) configured: BTreeMap<Vec<u8>, Quotas>,
    /// Whether the configured overrides were stored (or found stored ones).
    overrides_seeded: AtomicBool,
    /// Dropped with the plans: ends the follower.
    _stop: watch::Sender<()>,
}

/// The plan set's key for the limit `name`.
pub(crate) fn key(limit: &str) -> Vec<u8> {
    name::length_prefixed(b"rl:plans", limit.as_bytes())
}

/// The key of the customers' overrides of the limit `name`.
pub(crate) fn overrides_key(limit: &str) -> Vec<u8> {
    name::length_prefixed(b"rl:plan-overrides", limit.as_bytes())
}

/// The fields that store `spec` whole.
pub(crate) fn fields(spec: &Spec) -> Vec<FieldChange> {
    let mut fields = Vec::with_capacity(1 + spec.plans.len() + spec.overrides.len());
    if let Some(default) = spec.default_name() {
        fields.push((DEFAULT_FIELD.to_vec(), Some(default.as_bytes().to_vec())));
    }
    for (name, quota) in &spec.plans {
        fields.push((plan_field(name), Some(quota.to_string().into_bytes())));
    }
    fields
}

/// The fields that store `overrides`: a quota per customer.
pub(crate) fn override_fields(overrides: &BTreeMap<Vec<u8>, Quotas>) -> Vec<FieldChange> {
    (overrides.iter())
        .map(|(customer, quota)| {
            (
                customer_field(customer),
                Some(quota.to_string().into_bytes()),
            )
        })
        .collect()
}

/// A customer's field in the overrides: prefixed, so that no customer's name is the set's
/// `version`.
fn customer_field(customer: &[u8]) -> Vec<u8> {
    [CUSTOMER_PREFIX, customer].concat()
}

pub(crate) fn plan_field(name: &str) -> Vec<u8> {
    [PLAN_PREFIX, name.as_bytes()].concat()
}

pub(crate) fn default_field(name: &str) -> FieldChange {
    (DEFAULT_FIELD.to_vec(), Some(name.as_bytes().to_vec()))
}

/// The spec and version the stored `fields` say. An entry that cannot be read (a quota
/// or a name written by hand, say) is left out with an error in the log, and a default that
/// names no plan gives way to the first plan by name: a request never meets a stored mistake.
fn spec_of(limit: &str, fields: &[(Vec<u8>, Vec<u8>)]) -> (Spec, u64) {
    let mut spec = Spec::default();
    let mut version = 0;
    let mut default = None;
    for (field, value) in fields {
        let text = std::str::from_utf8(value).unwrap_or_default();
        let quota = || {
            let quota = text.parse::<Quotas>();
            if let Err(err) = &quota {
                tracing::error!(limit, field = %String::from_utf8_lossy(field), error = %err, "a stored rate-limit plan cannot be read; it is left out");
            }
            quota.ok()
        };
        if field == VERSION_FIELD {
            version = text.parse().unwrap_or(0);
        } else if field == DEFAULT_FIELD {
            default = Some(text.to_owned());
        } else if let Some(name) = field.strip_prefix(PLAN_PREFIX) {
            let name = String::from_utf8_lossy(name).into_owned();
            if let Err(err) = check_name(&name) {
                tracing::error!(limit, error = %err, "a stored rate-limit plan cannot be read; it is left out");
            } else if let Some(quota) = quota() {
                spec.plans.push((name, quota));
            }
        }
    }
    spec.plans.sort_by(|a, b| a.0.cmp(&b.0));
    spec.default = default.filter(|name| spec.plans.iter().any(|(known, _)| known == name));
    (spec, version)
}

impl RateLimitPlans {
    /// Stores the plans in force where there is no plan set yet, and takes the stored ones
    /// where there is.
    pub(crate) async fn seed_or_adopt(&self, key: &[u8]) -> Result<()> {
        let spec = self.inner.table.load().spec.clone();
        match self.seed(key, &spec).await? {
            Some(version) => {
                self.adopt_built(spec, version);
                Ok(())
            }
            None => self.reload(key).await,
        }
    }

    /// Stores `spec` whole where there is no plan set: its version, or `None` when there is
    /// one already.
    async fn seed(&self, key: &[u8], spec: &Spec) -> Result<Option<u64>> {
        let seed = PlanSetWriteStep {
            key,
            changes: &fields(spec),
            seed: true,
        };
        match self.inner.kit.coordination.backend().run(seed).await? {
            PlanSetWritten::Written(version) => Ok(Some(version)),
            PlanSetWritten::Exists(_) | PlanSetWritten::Gone => Ok(None),
        }
    }

    /// Reads the plan set and takes it, unless it is what is in force; stores the plans in
    /// force again when it is gone. One reload at a time, so that an older read never
    /// replaces a newer one. Fails with the backend's error, or
    /// [`InvalidArgument`](crate::ErrorKind::InvalidArgument) when no stored plan can be
    /// used (the plans in force stay).
    pub(crate) async fn reload(&self, key: &[u8]) -> Result<()> {
        let _reloading = self.inner.reloading.lock().await;
        let read = PlanSetReadStep { key };
        let Some(fields) = self
            .inner
            .kit
            .coordination
            .backend()
            .run_idempotent(read)
            .await?
        else {
            tracing::warn!(limit = %self.inner.kit.name, "the stored rate-limit plans are gone; storing this process's again");
            let spec = self.inner.table.load().spec.clone();
            if let Some(version) = self.seed(key, &spec).await? {
                self.adopt_built(spec, version);
            }
            return Ok(());
        };
        let (spec, version) = spec_of(&self.inner.kit.name, &fields);
        // The content too: a set stored again after a loss counts its versions anew.
        let current = self.inner.table.load_full();
        if current.version == version && current.spec == spec {
            return Ok(());
        }
        let previous = current.default_plan().name.clone();
        match Table::build_lenient(&self.inner.kit, spec, version, Some(&previous)) {
            Ok(table) => {
                tracing::info!(limit = %self.inner.kit.name, version, "rate-limit plans changed");
                self.inner.table.store(Arc::new(table));
                Ok(())
            }
            Err(err) => {
                tracing::error!(limit = %self.inner.kit.name, version, error = %err, "no stored rate-limit plan can be used; the plans in force stay");
                Err(err)
            }
        }
    }

    /// Takes `spec`, checked already, as the stored set's `version`: what this process has
    /// just stored.
    fn adopt_built(&self, spec: Spec, version: u64) {
        if let Ok(table) = Table::build(&self.inner.kit, spec, version) {
            self.inner.table.store(Arc::new(table));
        }
    }

    /// Writes `changes` to the stored plan set, then reads it back (with what other processes
    /// wrote meanwhile); `checked`: the plans in force with the changes, stored whole if the
    /// set is gone, and taken if the read fails.
    pub(crate) async fn write(
        &self,
        key: &[u8],
        changes: &[FieldChange],
        checked: Spec,
    ) -> Result<()> {
        let whole = fields(&checked);
        let written = write_or_store_whole(&self.inner.kit, key, changes, &whole).await?;
        let version = written.ok_or_else(|| lost_meanwhile("plans"))?;
        match self.reload(key).await {
            Ok(()) => Ok(()),
            // Stored, and what is stored now cannot be used (with another process's change).
            Err(err) if err.kind() == ErrorKind::InvalidArgument => Err(err),
            // Stored; the read back failed: this process takes its own change.
            Err(_) => {
                self.adopt_built(checked, version);
                Ok(())
            }
        }
    }
}

/// A store for the plans of `kit`, holding up to `customers` overrides, and its follower's
/// end.
pub(crate) fn store(
    kit: &Kit,
    customers: usize,
    configured: BTreeMap<Vec<u8>, Quotas>,
) -> (Store, watch::Receiver<()>) {
    let (stop, stopped) = watch::channel(());
    let store = Store {
        key: key(&kit.name),
        overrides_key: overrides_key(&kit.name),
        overrides: OverrideCache::new(customers),
        overrides_seeded: AtomicBool::new(configured.is_empty()),
        configured,
        _stop: stop,
    };
    (store, stopped)
}

/// Stores the configured overrides where there are none stored (none configured: nothing).
pub(crate) async fn seed_overrides(kit: &Kit, store: &Store) -> Result<()> {
    if store.configured.is_empty() {
        return Ok(());
    }
    let seed = PlanSetWriteStep {
        key: &store.overrides_key,
        changes: &override_fields(&store.configured),
        seed: true,
    };
    kit.coordination.backend().run(seed).await?;
    store.overrides_seeded.store(true, Ordering::Release);
    Ok(())
}

/// `customer`'s stored override, if any; one that cannot be read is none, with an error in
/// the log.
pub(crate) async fn read_override(
    kit: &Kit,
    key: &[u8],
    customer: &[u8],
) -> Result<Option<Quotas>> {
    let field = customer_field(customer);
    let read = PlanSetFieldReadStep { key, field: &field };
    let Some(value) = kit.coordination.backend().run_idempotent(read).await? else {
        return Ok(None);
    };
    let text = std::str::from_utf8(&value).unwrap_or_default();
    match text.parse::<Quotas>() {
        Ok(quota) => Ok(Some(quota)),
        Err(err) => {
            tracing::error!(limit = %kit.name, customer = %String::from_utf8_lossy(customer), error = %err, "a stored rate-limit override cannot be read; the customer's plan decides");
            Ok(None)
        }
    }
}

/// Stores `customer`'s override (`None`: removes it), then forgets every customer here, as
/// every other process does when it hears of the change.
pub(crate) async fn write_override(
    kit: &Kit,
    store: &Store,
    customer: &[u8],
    quota: Option<Quotas>,
) -> Result<()> {
    let changes = [(
        customer_field(customer),
        quota.map(|quota| quota.to_string().into_bytes()),
    )];
    // No override stored yet (or all lost): this one is the whole set.
    let written = write_or_store_whole(kit, &store.overrides_key, &changes, &changes).await?;
    store.overrides.clear();
    written.map(drop).ok_or_else(|| lost_meanwhile("overrides"))
}

/// Writes `changes` to the set at `key`, where there is one: the version written. Where it
/// is gone (never stored, or lost to a restart without persistence or a deletion), stores
/// `whole` instead, the set as it is to be with the changes, since the changes alone would
/// make a set of their fields; where another process stored it meanwhile, writes the changes
/// to that one. `None` when it was lost again meanwhile.
async fn write_or_store_whole(
    kit: &Kit,
    key: &[u8],
    changes: &[FieldChange],
    whole: &[FieldChange],
) -> Result<Option<u64>> {
    let backend = kit.coordination.backend();
    let write = PlanSetWriteStep {
        key,
        changes,
        seed: false,
    };
    if let PlanSetWritten::Written(version) = backend.run(write).await? {
        return Ok(Some(version));
    }
    let seed = PlanSetWriteStep {
        key,
        changes: whole,
        seed: true,
    };
    if let PlanSetWritten::Written(version) = backend.run(seed).await? {
        return Ok(Some(version));
    }
    match backend.run(write).await? {
        PlanSetWritten::Written(version) => Ok(Some(version)),
        PlanSetWritten::Gone | PlanSetWritten::Exists(_) => Ok(None),
    }
}

/// A change whose set was lost and stored again while it was written: to send again.
fn lost_meanwhile(what: &str) -> Error {
    Error::new(
        ErrorKind::Transient,
        format!(
            "the stored {what} were lost and stored again while this change was written; try again"
        ),
    )
}

/// The stored overrides' version (0: none stored).
async fn overrides_version(kit: &Kit, store: &Store) -> Result<u64> {
    let read = PlanSetFieldReadStep {
        key: &store.overrides_key,
        field: VERSION_FIELD,
    };
    let version = kit.coordination.backend().run_idempotent(read).await?;
    Ok(version
        .and_then(|digits| std::str::from_utf8(&digits).ok()?.parse().ok())
        .unwrap_or(0))
}

/// Follows the plan set of `plans` until they are dropped: a watch of its key, then a read;
/// again at each change (see the module's docs). A server that refuses the watch (no RESP3,
/// an ACL without `CLIENT`) is read every [`POLL_WITHOUT_WATCH`] instead, and asked for a
/// watch again every [`WATCH_RETRY`].
pub(crate) async fn follow(plans: Weak<Inner>, mut stopped: watch::Receiver<()>) {
    let mut pause = MEMORY_POLL;
    let mut polling_since: Option<tokio::time::Instant> = None;
    let mut quick_rounds = 0_u32;
    let mut overrides_seen: Option<u64> = None;
    loop {
        let started = tokio::time::Instant::now();
        let Some(inner) = plans.upgrade() else {
            return;
        };
        let plans_now = RateLimitPlans { inner };
        let Some(store) = plans_now.inner.store.as_ref() else {
            return;
        };
        let limit = plans_now.inner.kit.name.clone();
        let backend = plans_now.inner.kit.coordination.backend().clone();
        let polling = polling_since.is_some_and(|since| since.elapsed() < WATCH_RETRY);
        let (watched, watched_overrides) = if polling {
            (Ok(None), Ok(None))
        } else {
            (
                backend.watch_key(&store.key).await,
                backend.watch_key(&store.overrides_key).await,
            )
        };
        // Either watch refused is both refused: the same server, the same rules.
        let watched = match (watched, watched_overrides) {
            (Ok(Some(plans)), Ok(Some(overrides))) => Ok(Some((plans, overrides))),
            (Err(err), _) | (_, Err(err)) => Err(err),
            _ => Ok(None),
        };
        let watched = match watched {
            Err(err) if err.is_refused() => {
                if polling_since.is_none() {
                    tracing::warn!(%limit, error = %err, "the stored rate-limit plans cannot be watched; reading them every {POLL_WITHOUT_WATCH:?}");
                }
                polling_since = Some(tokio::time::Instant::now());
                Ok(None)
            }
            other => other,
        };
        let reloaded = plans_now.reload(&store.key).await;
        // The overrides' version, whatever became of the plans: their changes are their own.
        let version = overrides_version(&plans_now.inner.kit, store).await;
        let read = match (reloaded, version) {
            (Ok(()), Ok(version)) => {
                // The overrides changed, or were never read here: every customer is looked
                // up again.
                if overrides_seen.replace(version) != Some(version) {
                    store.overrides.clear();
                }
                // Stored where none are: at start during an outage, or lost since.
                let unseeded = !store.overrides_seeded.load(Ordering::Acquire);
                if (unseeded || version == 0) && !store.configured.is_empty() {
                    seed_overrides(&plans_now.inner.kit, store).await
                } else {
                    Ok(())
                }
            }
            (Err(err), _) | (_, Err(err)) => {
                // Changes may go unheard until the next round: nothing held is trusted.
                store.overrides.clear();
                overrides_seen = None;
                Err(err)
            }
        };
        drop(plans_now);
        let poll = if polling_since.is_some() {
            POLL_WITHOUT_WATCH
        } else {
            MEMORY_POLL
        };
        let waited = match (watched, read) {
            (Ok(Some((mut watch, mut overrides))), Ok(())) => {
                pause = MEMORY_POLL;
                // A watch that fires at once again and again (a connection that keeps
                // failing) is asked no more often than every MIN_ROUND once two rounds in a
                // row were that short; a change is followed at once.
                let floor = quick_rounds >= 2;
                tokio::select! {
                    () = async {
                        tokio::select! {
                            () = watch.changed() => {}
                            () = overrides.changed() => {}
                        }
                        if floor {
                            tokio::time::sleep_until(started + MIN_ROUND).await;
                        }
                    } => {
                        quick_rounds = if started.elapsed() < MIN_ROUND { quick_rounds + 1 } else { 0 };
                        continue;
                    }
                    stopped = stopped.changed() => stopped,
                }
            }
            (Ok(None), Ok(())) => {
                pause = MEMORY_POLL;
                tokio::select! {
                    () = tokio::time::sleep(poll) => continue,
                    stopped = stopped.changed() => stopped,
                }
            }
            (Err(err), _) | (_, Err(err)) => {
                if err.is_unavailable() {
                    tracing::debug!(%limit, error = %err, ?pause, "cannot follow the stored rate-limit plans; the plans in force stay");
                } else {
                    tracing::warn!(%limit, error = %err, ?pause, "cannot follow the stored rate-limit plans; the plans in force stay");
                }
                let waited = tokio::select! {
                    () = tokio::time::sleep(pause) => Ok(()),
                    stopped = stopped.changed() => stopped,
                };
                pause = (pause * 2).min(MOST_PAUSE);
                waited
            }
        };
        // The plans were dropped.
        if waited.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordination::rate_limit::Quota;

    #[test]
    fn the_fields_of_a_spec_read_back_as_it() {
        let mut spec = Spec::default();
        spec.set_plan("pro", Quota::per_minute(50).into());
        spec.set_plan("free", Quota::per_second(1).with_burst(5).into());
        spec.default = Some("pro".into());
        spec.overrides
            .insert(b"acme".to_vec(), Quota::per_day(5000).into());
        let mut stored: Vec<(Vec<u8>, Vec<u8>)> = fields(&spec)
            .into_iter()
            .filter_map(|(field, value)| Some((field, value?)))
            .collect();
        stored.push((VERSION_FIELD.to_vec(), b"7".to_vec()));
        let (read, version) = spec_of("api", &stored);
        assert_eq!(version, 7);
        assert_eq!(read.default.as_deref(), Some("pro"));
        // Stored plans come back in the order of their names.
        assert_eq!(
            read.plans,
            [
                ("free".to_owned(), Quota::per_second(1).with_burst(5).into()),
                ("pro".to_owned(), Quota::per_minute(50).into())
            ]
        );
        assert!(
            read.overrides.is_empty(),
            "overrides are stored beside the plans"
        );
        let overrides = override_fields(&spec.overrides);
        assert_eq!(
            overrides,
            [(b"c:acme".to_vec(), Some(b"5000/day".to_vec()))]
        );
    }

    #[test]
    fn a_stored_mistake_is_left_out_not_met_by_a_request() {
        let stored = [
            (b"version".to_vec(), b"3".to_vec()),
            (b"default".to_vec(), b"gone".to_vec()),
            (b"plan:free".to_vec(), b"10/min".to_vec()),
            (b"plan:bad".to_vec(), b"lots".to_vec()),
            (b"plan:a b".to_vec(), b"1/s".to_vec()),
        ];
        let (spec, version) = spec_of("api", &stored);
        assert_eq!(version, 3);
        assert_eq!(
            spec.plans,
            [("free".to_owned(), Quota::per_minute(10).into())]
        );
        assert_eq!(spec.default, None, "a default that names no plan gives way");
    }
}
