//! The deployment a handle reaches: one server, a cluster, or the primary Sentinel names.

/// Not `Debug`: its URLs may hold passwords (see [`describe`](super::endpoint::describe)).
#[derive(Clone)]
pub(super) enum Target {
    Standalone(String),
    Cluster(Vec<String>),
    Sentinel {
        sentinels: Vec<String>,
        service_name: String,
        /// What the primary asks for (the sentinels' URLs carry their own).
        primary: Option<PrimaryCredentials>,
    },
}

/// What a primary found through Sentinel asks for: a password, an ACL user's when a user
/// name is given. Not `Debug`, like the target.
#[derive(Clone)]
pub(super) struct PrimaryCredentials {
    pub(super) username: Option<String>,
    pub(super) password: String,
}

impl Target {
    /// `"standalone"`, `"cluster"` or `"sentinel"`.
    pub(super) fn topology(&self) -> &'static str {
        match self {
            Target::Standalone(_) => "standalone",
            Target::Cluster(_) => "cluster",
            Target::Sentinel { .. } => "sentinel",
        }
    }
}
