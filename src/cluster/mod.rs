//! Talking to a cluster: connection, discovery, apply, diff, readiness, inventory, preflight.
//!
//! [`Cluster::connect`] reads the kubeconfig like kubectl (`--kubeconfig`, `KUBECONFIG`,
//! `~/.kube/config`, `--context`; in-cluster config when there is no kubeconfig) and builds one
//! client for the whole run: one HTTP/2 connection (see `http2`), a QPS limit, a bound on
//! requests in flight and request counters.

pub(crate) mod diff;
pub(crate) mod flux_applier;
mod http2;
pub(crate) mod inventory;
pub(crate) mod meter;
pub mod need;
pub(crate) mod operation;
pub(crate) mod preflight;
mod resolve;
pub(crate) mod ssa;
pub(crate) mod wait;

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Client, Config};

pub use meter::{RequestCounts, RequestStats};
pub use resolve::Resolver;

/// How to reach the cluster.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Kubeconfig file (default: `KUBECONFIG`, then `~/.kube/config`, then in-cluster).
    pub kubeconfig: Option<PathBuf>,
    /// Context name (default: the current context).
    pub context: Option<String>,
    /// Requests per second (client-side limit; `None`: no limit, the server's Priority and
    /// Fairness queues what exceeds the client's share).
    pub qps: Option<NonZeroU32>,
    /// Requests in flight at most.
    pub concurrency: usize,
    /// Per-request timeout.
    pub request_timeout: Duration,
}

/// Why the cluster cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The kubeconfig could not be read or has no usable context.
    #[error("cannot load kubeconfig{}: {source}", .path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
    Kubeconfig {
        /// The file, when one was given.
        path: Option<PathBuf>,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The kubeconfig has no context of the name asked for.
    #[error(
        "kubeconfig{} has no context {context:?} (its contexts: {})",
        .path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default(),
        if .available.is_empty() { "none".to_owned() } else { .available.join(", ") }
    )]
    NoContext {
        /// The file, when one was given.
        path: Option<PathBuf>,
        /// The context asked for.
        context: String,
        /// The contexts it has.
        available: Vec<String>,
    },
    /// The API server did not answer.
    #[error("cannot reach the cluster at {server}: {reason}")]
    Unreachable {
        /// The server URL.
        server: String,
        /// Why, in words (certificate, connection refused, …).
        reason: String,
    },
    /// An API call failed, said whole in one line: the server's message, or the transport's
    /// chain ([`describe`]). The client error is kept but not given as the source, whose own
    /// text (the server's `Status` in debug form) would only repeat it.
    #[error("{subject}: {}", describe(.error))]
    Api {
        /// What the call was about (`Kind/ns/name`, `discovery`, …).
        subject: String,
        /// The client error.
        error: kube::Error,
    },
    /// A read-modify-write kept losing to other writers.
    #[error(
        "{subject}: changed by another writer {attempts} times while this run tried to update it; another osbx apply of this profile is running: let it finish, then rerun"
    )]
    Contended {
        /// The object.
        subject: String,
        /// How many times the write was tried.
        attempts: usize,
    },
}

/// A kubeconfig that cannot be read or used (`path`: the file given, when one was).
fn unreadable(path: Option<&PathBuf>, e: KubeconfigError) -> ClusterError {
    match e {
        // kube's text quotes the path in debug form: say it plainly.
        KubeconfigError::ReadConfig(io, path) => ClusterError::Kubeconfig { path: Some(path), source: Box::new(io) },
        e => ClusterError::Kubeconfig { path: path.cloned(), source: Box::new(e) },
    }
}

/// One connection for a run.
#[derive(Clone)]
pub struct Cluster {
    /// The client (rate-limited, counted).
    pub client: Client,
    /// The server URL.
    pub server: String,
    /// Request counters of this client.
    pub stats: Arc<RequestStats>,
    /// The resource resolver (discovery once per run, refreshed on demand).
    pub resolver: Resolver,
    /// Bound on concurrent operations (mirrors the client's limit, for fan-out).
    pub concurrency: usize,
    /// Requests per second (the client's limit, for other clients of the same run).
    pub qps: Option<NonZeroU32>,
}

impl Cluster {
    /// Connect (no request is made yet).
    ///
    /// # Errors
    /// [`ClusterError::Kubeconfig`] when no usable configuration is found.
    pub async fn connect(opts: &ConnectOptions) -> Result<Self, ClusterError> {
        let kc_opts = KubeConfigOptions { context: opts.context.clone(), ..KubeConfigOptions::default() };
        let config = match (&opts.kubeconfig, &opts.context) {
            (None, None) => {
                Config::infer().await.map_err(|e| ClusterError::Kubeconfig { path: None, source: Box::new(e) })?
            }
            (path, context) => {
                let kc = match path {
                    Some(path) => Kubeconfig::read_from(path).map_err(|e| unreadable(Some(path), e))?,
                    None => Kubeconfig::read().map_err(|e| unreadable(None, e))?,
                };
                if let Some(context) = context
                    && !kc.contexts.iter().any(|c| c.name == *context)
                {
                    let available = kc.contexts.iter().map(|c| c.name.clone()).collect();
                    return Err(ClusterError::NoContext { path: path.clone(), context: context.clone(), available });
                }
                Config::from_custom_kubeconfig(kc, &kc_opts).await.map_err(|e| unreadable(path.as_ref(), e))?
            }
        };
        Self::from_config(config, opts)
    }

    fn from_config(mut config: Config, opts: &ConnectOptions) -> Result<Self, ClusterError> {
        config.read_timeout = Some(opts.request_timeout);
        config.connect_timeout = Some(Duration::from_secs(10));
        let server = config.cluster_url.to_string().trim_end_matches('/').to_owned();
        let stats = Arc::new(RequestStats::default());
        let builder = http2::builder(config, opts.request_timeout)
            .map_err(|e| ClusterError::Kubeconfig { path: None, source: Box::new(e) })?;
        let rate = opts.qps.map(|q| tower::limit::RateLimitLayer::new(u64::from(q.get()), Duration::from_secs(1)));
        let client = builder
            .with_layer(&meter::CountLayer(stats.clone()))
            .with_layer(&tower::limit::ConcurrencyLimitLayer::new(opts.concurrency.max(1)))
            .with_layer(&tower::util::option_layer(rate))
            .build();
        let resolver = Resolver::new(client.clone());
        crate::timing::mark("config");
        Ok(Self { client, server, stats, resolver, concurrency: opts.concurrency.max(1), qps: opts.qps })
    }

    /// Request counts so far.
    #[must_use]
    pub fn requests(&self) -> RequestCounts {
        self.stats.snapshot()
    }

    /// Read any object as JSON (`None` when it does not exist or its kind is not served).
    ///
    /// # Errors
    /// [`ClusterError::Api`] when discovery or the read fails.
    pub async fn get(&self, id: &crate::object::ObjectRef) -> Result<Option<serde_json::Value>, ClusterError> {
        let Some(api) = self.resolver.api(id).await? else { return Ok(None) };
        let obj = api
            .get_opt(&id.name)
            .await
            .map_err(|source| ClusterError::Api { subject: id.to_string(), error: source })?;
        Ok(obj.map(|o| serde_json::to_value(o).unwrap_or(serde_json::Value::Null)))
    }

    /// List objects of a kind as JSON, in a namespace when given and the kind is namespaced,
    /// with a label selector when given; empty when the kind is not served.
    ///
    /// # Errors
    /// [`ClusterError::Api`] when discovery or the list fails.
    pub async fn list(
        &self,
        kind: &crate::object::Gvk,
        ns: Option<&str>,
        labels: Option<&str>,
    ) -> Result<Vec<serde_json::Value>, ClusterError> {
        let Some((ar, scope)) = self.resolver.resolve(&kind.object(ns, "")).await? else { return Ok(Vec::new()) };
        let api: kube::Api<kube::api::DynamicObject> = match (scope, ns) {
            (kube::discovery::Scope::Namespaced, Some(ns)) => kube::Api::namespaced_with(self.client.clone(), ns, &ar),
            _ => kube::Api::all_with(self.client.clone(), &ar),
        };
        let mut lp = kube::api::ListParams::default();
        if let Some(l) = labels {
            lp = lp.labels(l);
        }
        let items = api
            .list(&lp)
            .await
            .map_err(|source| ClusterError::Api { subject: format!("{} list", kind.kind), error: source })?;
        Ok(items.into_iter().map(|o| serde_json::to_value(o).unwrap_or(serde_json::Value::Null)).collect())
    }
}

/// A one-line reason for a client error, without the debug noise of nested hyper errors.
#[must_use]
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 401 => {
            "the server rejected the credentials (401 Unauthorized): is the kubeconfig expired or for another cluster?"
                .into()
        }
        kube::Error::Api(s) if s.code == 403 => format!("forbidden (403): {}", s.message),
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => {
            let mut parts = vec![other.to_string()];
            let mut cur = std::error::Error::source(other);
            while let Some(s) = cur {
                let text = s.to_string();
                if !parts.iter().any(|p| p.contains(&text)) {
                    parts.push(text);
                }
                cur = s.source();
            }
            parts.join(": ")
        }
    }
}
