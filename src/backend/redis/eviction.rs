//! Whether the server may evict keys when full. An evicted key frees what it held (a
//! lease, a permit) before its time; a session space's keys are evicted one at a time,
//! which breaks the invariant its steps rely on without any step noticing, so a session is
//! refused on such a server.

use std::sync::atomic::Ordering;

use super::RedisBackend;
use crate::error::Result;

impl RedisBackend {
    /// The server's `maxmemory-policy` when it may evict keys: `maxmemory` is set and the
    /// policy is not `noeviction`. `None` when it evicts nothing, or when it does not tell
    /// (`CONFIG` refused by a managed service or an ACL: one `WARN` per handle, and trusted
    /// from then on), or does not answer (asked again next time). Only "evicts nothing" and
    /// "does not tell" are kept for the handle: a server that evicts is asked again each
    /// time, so a policy changed to `noeviction` is seen at once. On a cluster, one node
    /// answers (the client picks it).
    pub(crate) async fn eviction_policy(&self) -> Option<String> {
        let trusted = &self.shared.evicts_nothing;
        if trusted.load(Ordering::Relaxed) {
            return None;
        }
        match self.evicts().await {
            Ok(None) => {
                trusted.store(true, Ordering::Relaxed);
                None
            }
            Ok(Some(policy)) => Some(policy),
            Err(err) if err.is_unavailable() => {
                tracing::debug!(
                    endpoint = %self.shared.endpoint,
                    error = %err,
                    "cannot tell whether Redis evicts keys; asking again next time"
                );
                None
            }
            Err(err) => {
                // Once per handle (trusted from then on; of two first asks at once, one
                // tells): managed services that refuse `CONFIG` often default to an evicting
                // policy (`volatile-lru`), which the operator must set to `noeviction` for
                // sessions to hold.
                if !trusted.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        endpoint = %self.shared.endpoint,
                        error = %err,
                        "cannot tell whether Redis evicts keys (the server refused to say); \
                         sessions need maxmemory-policy noeviction: an evicted session key lets \
                         a held name be taken silently"
                    );
                }
                None
            }
        }
    }

    async fn evicts(&self) -> Result<Option<String>> {
        let maxmemory = self.config_setting("maxmemory").await?;
        if maxmemory.trim().is_empty() || maxmemory.trim() == "0" {
            return Ok(None);
        }
        let policy = self.config_setting("maxmemory-policy").await?;
        Ok((!policy.is_empty() && policy != "noeviction").then_some(policy))
    }
}
