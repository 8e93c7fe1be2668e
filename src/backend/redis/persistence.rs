//! Whether the server keeps its data across a restart, and whether it evicts keys when
//! full: asked once per handle, so that a fenced lock on a server that keeps nothing, or
//! evicts, is told of once.

use std::sync::atomic::Ordering;

use redis::Cmd;

use super::RedisBackend;
use crate::error::Result;

impl RedisBackend {
    /// Warns once per handle (and its clones) when the server keeps nothing across a
    /// restart: no RDB snapshots (`save` empty) and no AOF. A restart then frees every lease
    /// and permit while its holder may still be working; the fencing tokens still never go
    /// back. Warns too when the server may evict keys (see
    /// [`RedisBackend::eviction_policy`]). Asked in the background at the first acquisition
    /// of any held primitive, so that it costs no acquisition a round trip; a server that
    /// does not tell (`CONFIG` refused by a managed service or an ACL, or a reply that is
    /// not one setting) is not asked again, and is logged at `DEBUG`. On a cluster, one
    /// node answers (the client picks it).
    pub(crate) fn check_persistence_once(&self) {
        // A load first: on the hot path of every acquisition, a swap would write the
        // shared flag each time.
        let checked = &self.shared.persistence_checked;
        if checked.load(Ordering::Relaxed) || checked.swap(true, Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let backend = self.clone();
        runtime.spawn(async move {
            match backend.keeps_nothing().await {
                Ok(true) => tracing::warn!(
                    endpoint = %backend.shared.endpoint,
                    "Redis keeps nothing across a restart (no RDB snapshots, no AOF): a restart \
                     frees every lease and permit while its holder may still be working; \
                     fencing tokens still never go back, so a resource that checks them \
                     refuses a stale holder"
                ),
                Ok(false) => {}
                Err(err) => tracing::debug!(
                    endpoint = %backend.shared.endpoint,
                    error = %err,
                    "cannot tell whether Redis keeps its data across a restart"
                ),
            }
            if let Some(policy) = backend.eviction_policy().await {
                tracing::warn!(
                    endpoint = %backend.shared.endpoint,
                    policy = %policy,
                    "Redis evicts keys when full (maxmemory-policy {policy}): an evicted \
                     lease frees its lock or permit while its holder may still be working; \
                     set maxmemory-policy noeviction"
                );
            }
        });
    }

    /// Whether the server has neither RDB snapshots nor an AOF.
    async fn keeps_nothing(&self) -> Result<bool> {
        let snapshots = self.config_setting("save").await?;
        let append_only = self.config_setting("appendonly").await?;
        Ok(snapshots.trim().is_empty() && append_only == "no")
    }

    /// The server's setting `name` (`CONFIG GET`, one setting per call, as Redis 6.2
    /// takes); empty when the reply is not that one setting.
    pub(super) async fn config_setting(&self, name: &str) -> Result<String> {
        let mut cmd = Cmd::new();
        cmd.arg("CONFIG").arg("GET").arg(name);
        let reply: Vec<String> = self.query(&cmd).await?;
        Ok(match reply.as_slice() {
            [key, value] if key == name => value.clone(),
            _ => String::new(),
        })
    }
}
