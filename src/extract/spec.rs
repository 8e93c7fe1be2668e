//! What a lease extractor takes for a request: the spec an application writes, and the
//! request it answers with.

use std::future::Future;
use std::time::Duration;

use axum::response::Response;
use bytes::Bytes;
use http::request::Parts;

use crate::coordination::ManagedOptions;
use crate::coordination::redlock::RedlockGroup;
use crate::layer::Rejection;
use crate::layer::key::KeyError;

/// Which lease a request needs, and how it is taken and kept: implement it for a type of
/// your own and take [`Lease<YourType>`](super::Lease),
/// [`ReadLease<YourType>`](super::ReadLease) or [`WriteLease<YourType>`](super::WriteLease)
/// in a handler.
///
/// Generic over the router's state `S`, as axum's `FromRequestParts<S>` is: a spec that
/// needs nothing from the state is written for every `S`; one that reads its settings (lease
/// names, durations, waits) from the application's configuration takes them through
/// [`FromRef`](axum::extract::FromRef), as the extractor takes its
/// [`Coordination`](crate::Coordination).
///
/// # Example
///
/// A spec for every state, named by the path:
///
/// ```
/// use std::time::Duration;
/// use axum::http::request::Parts;
/// use leasehold::extract::{LeaseRequest, LeaseSpec};
/// use leasehold::layer::key::KeyError;
///
/// /// One import at a time per tenant, named by the `/tenants/{tenant}/import` path.
/// struct TenantImport;
///
/// impl<S: Sync> LeaseSpec<S> for TenantImport {
///     async fn lease(parts: &mut Parts, _state: &S) -> Result<LeaseRequest, KeyError> {
///         let tenant = parts
///             .uri
///             .path()
///             .strip_prefix("/tenants/")
///             .and_then(|rest| rest.split('/').next())
///             .filter(|tenant| !tenant.is_empty())
///             .ok_or_else(|| KeyError::new("no tenant in the path"))?;
///         Ok(LeaseRequest::named(format!("import:{tenant}")).max_wait(Duration::from_secs(2)))
///     }
/// }
/// ```
///
/// Settings from the application's state, read through `FromRef` (the router's state holds
/// both the [`Coordination`](crate::Coordination) and them):
///
/// ```
/// use std::time::Duration;
/// use axum::extract::FromRef;
/// use axum::http::request::Parts;
/// use axum::{Router, routing::post};
/// use leasehold::Coordination;
/// use leasehold::coordination::ManagedOptions;
/// use leasehold::extract::{Lease, LeaseRequest, LeaseSpec};
/// use leasehold::layer::key::KeyError;
///
/// /// Read from the configuration at start-up.
/// #[derive(Clone)]
/// struct ReportSettings {
///     lease_name: String,
///     lease: Duration,
/// }
///
/// #[derive(Clone)]
/// struct AppState {
///     coordination: Coordination,
///     reports: ReportSettings,
/// }
///
/// impl FromRef<AppState> for Coordination {
///     fn from_ref(state: &AppState) -> Self {
///         state.coordination.clone()
///     }
/// }
///
/// impl FromRef<AppState> for ReportSettings {
///     fn from_ref(state: &AppState) -> Self {
///         state.reports.clone()
///     }
/// }
///
/// struct Report;
///
/// impl<S: Sync> LeaseSpec<S> for Report
/// where
///     ReportSettings: FromRef<S>,
/// {
///     async fn lease(_parts: &mut Parts, state: &S) -> Result<LeaseRequest, KeyError> {
///         let settings = ReportSettings::from_ref(state);
///         Ok(LeaseRequest::named(settings.lease_name)
///             .options(ManagedOptions::new().lease(settings.lease))
///             // A 409 tells clients to come back within 2 s, not after the whole lease.
///             .retry_after_at_most(Duration::from_secs(2)))
///     }
/// }
///
/// async fn report(lease: Lease<Report>) -> String {
///     format!("token {}", lease.fencing_token())
/// }
///
/// let state = AppState {
///     coordination: Coordination::memory(),
///     reports: ReportSettings { lease_name: "report".into(), lease: Duration::from_secs(60) },
/// };
/// let app: Router = Router::new().route("/report", post(report)).with_state(state);
/// # let _ = app;
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `LeaseSpec<{S}>` for this router's state",
    note = "implement `LeaseSpec<S>` for every state (`impl<S: Sync> LeaseSpec<S> for {Self}`), \
            or for the states it reads its settings from through `FromRef` (see the \
            `LeaseSpec` docs)",
    note = "the router's state must also give a `Coordination` through `FromRef`"
)]
pub trait LeaseSpec<S>: Send + Sync + 'static {
    /// The lease this request needs, and how it is taken and kept. An error rejects the
    /// request as a key error does on the layers: with its [status](KeyError::status)
    /// (`400 Bad Request` for [`KeyError::new`]) and its message as one line of text.
    fn lease(
        parts: &mut Parts,
        state: &S,
    ) -> impl Future<Output = Result<LeaseRequest, KeyError>> + Send;

    /// The application's own answers to the requests refused for want of the lease: as for
    /// the layers' `rejection_response`, `Some` response, or `None` (the default) for the
    /// extractor's. It sees the refused request's parts, and is asked when the rejection is
    /// made (so also for a handler that takes `Result<Lease<R>, LeaseRejection>`).
    /// `Retry-After` is added when the response has none. A function written for the layers
    /// serves here as is.
    fn rejection_response(rejection: &Rejection<'_>, request: &Parts) -> Option<Response<Bytes>> {
        let _ = (rejection, request);
        None
    }
}

/// The default of [`LeaseRequest::timeout`] and [`PermitRequest::timeout`](super::PermitRequest::timeout):
/// the layers' decision timeout.
pub const DEFAULT_LEASE_TIMEOUT: Duration = Duration::from_millis(500);

/// How an extractor takes and keeps what a request needs: what every
/// [`LeaseRequest`] and [`PermitRequest`](super::PermitRequest) shares.
#[derive(Debug, Clone)]
pub(super) struct Taking {
    pub(super) options: ManagedOptions,
    pub(super) max_wait: Duration,
    pub(super) timeout: Duration,
    pub(super) retry_after_at_most: Option<Duration>,
}

impl Default for Taking {
    fn default() -> Self {
        Taking {
            options: ManagedOptions::new(),
            max_wait: Duration::ZERO,
            timeout: DEFAULT_LEASE_TIMEOUT,
            retry_after_at_most: None,
        }
    }
}

/// The setters of how a request is taken ([`Taking`]), the same on [`LeaseRequest`] and
/// [`PermitRequest`](super::PermitRequest), written once: `$what` names what is taken,
/// `$waits` when the request waits, `$refused` what the longest `Retry-After` caps.
macro_rules! taking_setters {
    ($what:literal, $waits:literal, $refused:literal) => {
        #[doc = concat!("How the ", $what, " is kept while the handler runs (renewed at half its lease).")]
        /// Options that cannot be kept are a `500` before anything is sent.
        pub fn options(mut self, options: crate::coordination::ManagedOptions) -> Self {
            self.taking.options = options;
            self
        }

        #[doc = concat!("How long the request waits ", $waits, ", before it is refused.")]
        /// Default: no wait.
        pub fn max_wait(mut self, max_wait: std::time::Duration) -> Self {
            self.taking.max_wait = max_wait;
            self
        }

        /// How long the backend may take to answer an attempt before the request is answered
        /// `503`, as the layers bound their decisions: the immediate try when there is no
        /// wait, and the last try after waiting otherwise. A request is so answered within
        /// `max_wait + timeout`, whatever the backend does. Default
        /// [`DEFAULT_LEASE_TIMEOUT`](crate::extract::DEFAULT_LEASE_TIMEOUT); zero is a `500`
        /// before anything is sent. An acquisition cut short may still have taken what it
        /// asked for: it is released in the background once its deadline on the server has
        /// passed, so a request that gave up waiting may find, in its last try, what its own
        /// earlier attempt took (a refusal).
        pub fn timeout(mut self, timeout: std::time::Duration) -> Self {
            self.taking.timeout = timeout;
            self
        }

        #[doc = concat!("The longest `Retry-After` of a refusal ", $refused, ". At least a second.")]
        pub fn retry_after_at_most(mut self, longest: std::time::Duration) -> Self {
            self.taking.retry_after_at_most = Some(longest);
            self
        }
    };
}
pub(super) use taking_setters;

/// The lease a request needs: its name, and how it is taken and kept. Built by a
/// [`LeaseSpec`] for each request.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use leasehold::coordination::ManagedOptions;
/// use leasehold::extract::LeaseRequest;
///
/// let request = LeaseRequest::named("nightly-report")
///     .options(ManagedOptions::new().lease(Duration::from_secs(30)))
///     .max_wait(Duration::from_secs(1))
///     .retry_after_at_most(Duration::from_secs(5));
/// assert_eq!(request.name(), b"nightly-report");
/// ```
#[derive(Debug, Clone)]
pub struct LeaseRequest {
    name: Vec<u8>,
    taking: Taking,
    waiting_bound: Option<Duration>,
    redlock: Option<RedlockGroup>,
}

impl LeaseRequest {
    /// The lease named `name` (any bytes; a name longer than
    /// [`MAX_NAME_LEN`](crate::coordination::MAX_NAME_LEN) is stored as its digest), taken
    /// at once (no wait), within [`DEFAULT_LEASE_TIMEOUT`], and kept as
    /// [`ManagedOptions::new`] says.
    pub fn named(name: impl Into<Vec<u8>>) -> Self {
        LeaseRequest {
            name: name.into(),
            taking: Taking::default(),
            waiting_bound: None,
            redlock: None,
        }
    }

    /// For a [`ReadLease`](super::ReadLease) and a [`WriteLease`](super::WriteLease) that
    /// wait (see [`max_wait`](Self::max_wait)): how long a request that stops waiting can
    /// still hold the others back in the phase-fair order (see
    /// [`ReadWriteLock::waiting_bound`](crate::coordination::rw_lease::ReadWriteLock::waiting_bound),
    /// whose default it is otherwise). The other extractors ignore it. A bound under 100 ms
    /// or over an hour is a `500`, as any setting that cannot be kept.
    pub fn waiting_bound(mut self, bound: Duration) -> Self {
        self.waiting_bound = Some(bound);
        self
    }

    /// For a [`Lease`](super::Lease): takes the lease on a quorum of `group`'s nodes (a
    /// [`RedlockLease`](crate::coordination::redlock::RedlockLease), kept as a
    /// [`ManagedRedlockLease`](crate::coordination::redlock::ManagedRedlockLease) with the
    /// group's fencing token: [`HeldLease::Redlock`](super::HeldLease::Redlock)) rather than as a fenced lock on the router's
    /// [`Coordination`](crate::Coordination). A request that waits tries a round every 50 ms at most. The
    /// other extractors ignore it.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold::Coordination;
    /// use leasehold::coordination::redlock::RedlockGroup;
    /// use leasehold::extract::LeaseRequest;
    ///
    /// # fn main() -> leasehold::Result<()> {
    /// let group = RedlockGroup::new([Coordination::memory(), Coordination::memory(), Coordination::memory()])?;
    /// let request = LeaseRequest::named("ledger").redlock(group);
    /// # let _ = request;
    /// # Ok(()) }
    /// ```
    pub fn redlock(mut self, group: RedlockGroup) -> Self {
        self.redlock = Some(group);
        self
    }

    /// The lease's name.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    taking_setters!(
        "lease",
        "when the lease is held elsewhere",
        "because the lease is held: by default it is the holder's whole time left (30 s for a 30 s lease, however short the job), which can keep clients away long after the lease is free"
    );

    pub(super) fn into_parts(self) -> (Vec<u8>, Taking) {
        (self.name, self.taking)
    }

    /// The Redlock group asked for, if any.
    pub(super) fn redlock_group(&self) -> Option<&RedlockGroup> {
        self.redlock.as_ref()
    }

    /// The waiting bound asked for, if any.
    pub(super) fn waiting_bound_asked(&self) -> Option<Duration> {
        self.waiting_bound
    }
}
