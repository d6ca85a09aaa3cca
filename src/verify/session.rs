//! One verify run from start to cleanup: the API key, the Lifecycle API endpoint, the probe
//! namespace (after sweeping what interrupted runs left), the checks under an overall deadline,
//! and cleanup however the run ends. `osbx verify` and `osbx apply --verify` both use it.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::{CheckResult, Ctx, Endpoint, Selection, checks, probe};
use crate::cluster::need::Need;
use crate::cluster::preflight::{self, PreflightError};
use crate::cluster::{Cluster, ClusterError};
use crate::components::opensandbox::OpenSandbox;
use crate::object::{Gvk, ObjectRef};
use crate::profile::Profile;
use crate::progress::Progress;
use crate::verify::ApiKeyValue;
use crate::verify::endpoint::Limits;

/// How to run the checks.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Which checks.
    pub selection: Selection,
    /// The Lifecycle API's URL (default: through the API server's service proxy).
    pub server_url: Option<String>,
    /// The API key given to this run (`--api-key-file`, `OSBX_API_KEY`); else the profile's.
    pub api_key: ApiKeyValue,
    /// The whole run's time limit.
    pub timeout: Duration,
}

impl Settings {
    /// Whether the Lifecycle API is reached through the API server's service proxy (no
    /// `--server-url`).
    #[must_use]
    pub fn through_proxy(&self) -> bool {
        self.server_url.is_none()
    }
}

/// Why a verify run could not finish.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The cluster refused or failed a request the run needs.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The user may not do everything the run needs (nothing was created).
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    /// The Lifecycle API client could not be built.
    #[error("cannot reach the Lifecycle API at {url}: {reason}")]
    Endpoint {
        /// The URL given.
        url: String,
        /// Why.
        reason: String,
    },
    /// Interrupted (Ctrl-C, SIGTERM); what the run created was removed.
    #[error("interrupted: removed the probe namespace {0} and everything the run created")]
    Interrupted(String),
    /// The overall time limit passed; what the run created was removed.
    #[error("the verify run did not finish within {0:?}")]
    TimedOut(Duration),
}

/// A run whose probe namespace exists.
pub struct Session {
    ctx: Ctx,
    settings: Settings,
    flux_objects: Vec<ObjectRef>,
    /// Namespaces outside the run's own where it creates probes (the SPIFFE smoke namespace).
    extra_namespaces: Vec<String>,
    /// What earlier interrupted runs left and this one removed.
    pub swept: Vec<String>,
}

impl Session {
    /// Prepare a run: review every permission the selected checks need (before anything is
    /// created), find the API key, sweep what interrupted runs left, create the probe namespace.
    /// `flux_objects` are the Flux objects the profile renders.
    ///
    /// # Errors
    /// [`VerifyError`] when a permission is missing, the namespace cannot be created or the
    /// endpoint is unusable.
    pub async fn start(
        cluster: &Cluster,
        profile: &Profile,
        flux_objects: Vec<ObjectRef>,
        settings: Settings,
    ) -> Result<Self, VerifyError> {
        preflight::review(cluster, &needs(profile, &flux_objects, &settings), "this verify run").await?;
        let key = api_key(cluster, profile, &settings.api_key).await;
        let os = &profile.opensandbox;
        let endpoint = match &settings.server_url {
            Some(url) => {
                Endpoint::direct(url, key, Duration::from_secs(300), Limits::new(cluster.qps, cluster.concurrency))
                    .map_err(|e| VerifyError::Endpoint { url: url.clone(), reason: e.to_string() })?
            }
            None => Endpoint::proxy(
                cluster.client.clone(),
                &os.namespaces.control_plane,
                OpenSandbox::SERVER_SERVICE,
                OpenSandbox::SERVER_PORT,
                key,
            ),
        };
        let run = probe::Run::new(profile.verify.probe_deadline_seconds, settings.timeout);
        let extra_namespaces = extra_namespaces(profile);
        let probe::Swept { removed: mut swept, live_runs } = probe::sweep(cluster, &run, &extra_namespaces).await;
        swept.extend(checks::sweep_sandboxes(cluster, profile, &live_runs).await);
        run.create_namespace(cluster).await?;
        let ctx = Ctx { cluster: cluster.clone(), profile: profile.clone(), run, endpoint };
        Ok(Self { ctx, settings, flux_objects, extra_namespaces, swept })
    }

    /// This run's id.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.ctx.run.id
    }

    /// Where this run reaches the Lifecycle API (a clone shares its request counts).
    #[must_use]
    pub fn endpoint(&self) -> &Endpoint {
        &self.ctx.endpoint
    }

    /// This run's probe namespace.
    #[must_use]
    pub fn namespace(&self) -> &str {
        &self.ctx.run.namespace
    }

    /// Run the selected checks concurrently until they finish, the run's time limit passes, or
    /// `interrupted` resolves; then delete everything the run created.
    ///
    /// # Errors
    /// [`VerifyError::Interrupted`] or [`VerifyError::TimedOut`].
    pub async fn run(
        self,
        progress: &dyn Progress,
        interrupted: impl Future<Output = ()>,
    ) -> Result<Vec<CheckResult>, VerifyError> {
        let catalogue = checks::catalogue(&self.ctx.profile, self.flux_objects.clone());
        let timeout = self.settings.timeout;
        let checks = super::run(&self.ctx, &catalogue, &self.settings.selection, progress);
        let outcome = tokio::select! {
            results = tokio::time::timeout(timeout, checks) => Some(results),
            () = interrupted => None,
        };
        self.ctx.run.cleanup(&self.ctx.cluster, &self.extra_namespaces).await;
        match outcome {
            None => Err(VerifyError::Interrupted(self.ctx.run.namespace.clone())),
            Some(Err(_)) => Err(VerifyError::TimedOut(timeout)),
            Some(Ok(results)) => Ok(results),
        }
    }
}

/// Namespaces outside the run's own where it creates probes (the SPIFFE smoke namespace).
fn extra_namespaces(profile: &Profile) -> Vec<String> {
    profile.spiffe_smoke().into_iter().map(|s| s.namespace).collect()
}

/// Every permission a run with `settings` needs: its namespace, sweep and cleanup, and what each
/// selected check declares ([`super::Check::needs`]).
#[must_use]
pub fn needs(profile: &Profile, flux_objects: &[ObjectRef], settings: &Settings) -> Vec<Need> {
    let mut out: BTreeSet<Need> = probe::run_needs(&extra_namespaces(profile)).into_iter().collect();
    out.extend(checks::sweep_sandboxes_needs(profile));
    for check in checks::catalogue(profile, flux_objects.to_vec()) {
        if check.ids().iter().any(|id| settings.selection.selects(id)) {
            out.extend(check.needs(profile, settings));
        }
    }
    out.into_iter().collect()
}

/// What requests to the Lifecycle API with `methods` need: through the service proxy, the
/// verbs those methods are authorized as ([`Endpoint::proxy_need`]); at a URL, nothing.
#[must_use]
pub fn lifecycle_api_needs(profile: &Profile, settings: &Settings, methods: &[http::Method]) -> Vec<Need> {
    if !settings.through_proxy() {
        return Vec::new();
    }
    let ns = &profile.opensandbox.namespaces.control_plane;
    let (service, port) = (OpenSandbox::SERVER_SERVICE, OpenSandbox::SERVER_PORT);
    methods.iter().map(|m| Endpoint::proxy_need(ns, service, port, m)).collect()
}

/// What reading the API key needs ([`api_key`]): `get` on the Secret the profile names, unless
/// the run was given a key or the profile has an inline one.
#[must_use]
pub fn api_key_needs(profile: &Profile, given: &ApiKeyValue) -> Vec<Need> {
    let os = &profile.opensandbox;
    match &os.server.api_key.secret_ref {
        Some(secret_ref) if given.value().is_none() && os.server.api_key.inline.is_none() => {
            let secret = Gvk::new("", "v1", "Secret").object(Some(&os.namespaces.control_plane), &secret_ref.name);
            vec![Need::on("get", &secret)]
        }
        _ => Vec::new(),
    }
}

/// The API key: the one given to the run, else the profile's inline key, else the Secret the
/// profile names (unreadable or missing: none, and the checks that need it say so).
async fn api_key(cluster: &Cluster, profile: &Profile, given: &ApiKeyValue) -> ApiKeyValue {
    if given.value().is_some() {
        return given.clone();
    }
    let os = &profile.opensandbox;
    if let Some(inline) = &os.server.api_key.inline {
        return ApiKeyValue::new(Some(inline.clone()));
    }
    let Some(secret_ref) = &os.server.api_key.secret_ref else { return ApiKeyValue::default() };
    let secret =
        Api::<Secret>::namespaced(cluster.client.clone(), &os.namespaces.control_plane).get_opt(&secret_ref.name).await;
    ApiKeyValue::new(
        secret
            .ok()
            .flatten()
            .and_then(|s| s.data)
            .and_then(|d| d.get(&secret_ref.key).map(|v| String::from_utf8_lossy(&v.0).trim().to_owned())),
    )
}
