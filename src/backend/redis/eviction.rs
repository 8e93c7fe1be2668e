//! Whether the server may evict keys when full: asked once per handle. An evicted key frees
//! what it held (a lease, a permit) before its time; a session space's keys are evicted one
//! at a time, which breaks the invariant its steps rely on without any step noticing, so a
//! session is refused on such a server.

use redis::Cmd;

use super::RedisBackend;
use crate::error::Result;

impl RedisBackend {
    /// The server's `maxmemory-policy` when it may evict keys: `maxmemory` is set and the
    /// policy is not `noeviction`. `None` when it evicts nothing, or when it does not tell
    /// (`CONFIG` refused by a managed service or an ACL, a cluster answering for several
    /// nodes: logged at `DEBUG`). Asked once per handle (and its clones); an unanswered
    /// question is asked again next time.
    pub(crate) async fn eviction_policy(&self) -> Option<String> {
        let asked = self
            .shared
            .eviction
            .get_or_try_init(|| async {
                match self.evicts().await {
                    Ok(policy) => Ok(policy),
                    Err(err) if err.is_unavailable() => Err(err),
                    Err(err) => {
                        tracing::debug!(
                            endpoint = %self.shared.endpoint,
                            error = %err,
                            "cannot tell whether Redis evicts keys"
                        );
                        Ok(None)
                    }
                }
            })
            .await;
        match asked {
            Ok(policy) => policy.clone(),
            Err(err) => {
                tracing::debug!(
                    endpoint = %self.shared.endpoint,
                    error = %err,
                    "cannot tell whether Redis evicts keys"
                );
                None
            }
        }
    }

    async fn evicts(&self) -> Result<Option<String>> {
        let setting = async |name: &str| -> Result<String> {
            let mut cmd = Cmd::new();
            cmd.arg("CONFIG").arg("GET").arg(name);
            let reply: Vec<String> = self.query(&cmd).await?;
            Ok(match reply.as_slice() {
                [key, value] if key == name => value.clone(),
                _ => String::new(),
            })
        };
        let maxmemory = setting("maxmemory").await?;
        if maxmemory.trim().is_empty() || maxmemory.trim() == "0" {
            return Ok(None);
        }
        let policy = setting("maxmemory-policy").await?;
        Ok((!policy.is_empty() && policy != "noeviction").then_some(policy))
    }
}
