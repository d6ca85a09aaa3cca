//! Talking to a cluster: connection, discovery, apply, diff, readiness, inventory, preflight.
//!
//! [`Cluster::connect`] finds the kubeconfig like kubectl (`--kubeconfig`, else `KUBECONFIG`,
//! else `~/.kube/config`; the in-cluster config when there is none and `KUBERNETES_SERVICE_HOST`
//! is set), picks the context (`--context`, else its `current-context`) and its cluster, says in
//! one line what it looked for and what to do when one is missing, and builds one client for the
//! whole run: one HTTP/2 connection (see `http2`), a QPS limit, a bound on requests in flight and
//! request counters.

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
    /// The kubeconfig could not be read or used.
    #[error("cannot load kubeconfig{}: {source}", .path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
    Kubeconfig {
        /// The file, when one was given.
        path: Option<PathBuf>,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// No kubeconfig was found where one was looked for, and no in-cluster config either.
    #[error("{looked}")]
    NoKubeconfig {
        /// What was looked for, and what to do, in one line.
        looked: String,
    },
    /// The kubeconfig names no context to use: none asked for and no `current-context`, or the
    /// one asked for (or its `current-context`) is not one of its contexts.
    #[error(
        "{kubeconfig} {}",
        match (.context, .current) {
            (None, _) => format!("sets no current-context and no context was asked for (its contexts: {}); give --context NAME, or set one with `kubectl config use-context NAME`", list(.available)),
            (Some(c), true) => format!("has no context {c:?}, which its current-context names (its contexts: {}); give --context NAME, or set one with `kubectl config use-context NAME`", list(.available)),
            (Some(c), false) => format!("has no context {c:?} (its contexts: {})", list(.available)),
        }
    )]
    NoContext {
        /// The kubeconfig, as [`Found`] says where it came from.
        kubeconfig: Box<str>,
        /// The context asked for (`--context`, a fleet's) or its `current-context`; `None`:
        /// neither.
        context: Option<String>,
        /// Whether `context` is the kubeconfig's `current-context`, not one asked for.
        current: bool,
        /// The contexts it has.
        available: Vec<String>,
    },
    /// The context names a cluster the kubeconfig does not define, or one without a server.
    #[error(
        "{kubeconfig}: context {context:?} {}; add the cluster with its server to the kubeconfig (`kubectl config set-cluster {cluster} --server URL`), or use another context",
        if .defined.contains(.cluster) { format!("names cluster {cluster:?}, which has no server URL") }
        else { format!("names cluster {cluster:?}, which it does not define (its clusters: {})", list(.defined)) }
    )]
    NoCluster {
        /// The kubeconfig, as [`Found`] says where it came from.
        kubeconfig: Box<str>,
        /// The context that names the cluster.
        context: String,
        /// The cluster it names.
        cluster: String,
        /// The clusters the kubeconfig defines.
        defined: Box<[String]>,
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

/// Names for a message: `a, b`, or `none`.
fn list(names: &[String]) -> String {
    if names.is_empty() { "none".to_owned() } else { names.join(", ") }
}

/// A kubeconfig that cannot be read or used (`path`: the file given, when one was).
fn unreadable(path: Option<&PathBuf>, e: KubeconfigError) -> ClusterError {
    match e {
        // kube's text quotes the path in debug form: say it plainly.
        KubeconfigError::ReadConfig(io, path) => ClusterError::Kubeconfig { path: Some(path), source: Box::new(io) },
        e => ClusterError::Kubeconfig { path: path.cloned(), source: Box::new(e) },
    }
}

/// Where the kubeconfig was found, in kubectl's order.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// Given by name (`--kubeconfig`, or a fleet cluster's `kubeconfig`).
    Given(PathBuf),
    /// `KUBECONFIG` (its value: one file, or several merged).
    Env(std::ffi::OsString),
    /// The default path, `~/.kube/config`.
    Default(PathBuf),
    /// None (not at this default path), but this runs in a pod of a cluster
    /// (`KUBERNETES_SERVICE_HOST`).
    InCluster(String),
}

impl Found {
    /// Look for a kubeconfig where kubectl does when none is given: `KUBECONFIG` (`env`, empty
    /// entries ignored), else `~/.kube/config` under `home`, else the in-cluster config when
    /// `in_cluster`.
    ///
    /// # Errors
    /// [`ClusterError::NoKubeconfig`], saying each place looked at and what to do.
    fn search(env: Option<std::ffi::OsString>, home: Option<PathBuf>, in_cluster: bool) -> Result<Self, ClusterError> {
        let default = home.map(|h| h.join(".kube").join("config"));
        let shown = default.as_ref().map_or_else(|| "~/.kube/config".to_owned(), |d| d.display().to_string());
        if let Some(env) = env.filter(|e| std::env::split_paths(e).any(|p| !p.as_os_str().is_empty())) {
            if std::env::split_paths(&env).any(|p| !p.as_os_str().is_empty() && p.exists()) {
                return Ok(Self::Env(env));
            }
            return Err(ClusterError::NoKubeconfig {
                looked: format!(
                    "no kubeconfig: --kubeconfig is not given and KUBECONFIG={} names no file that exists; set KUBECONFIG to your kubeconfig file (or unset it to use {shown}), or give --kubeconfig FILE",
                    env.to_string_lossy()
                ),
            });
        }
        match default {
            Some(default) if default.exists() => Ok(Self::Default(default)),
            _ if in_cluster => Ok(Self::InCluster(shown)),
            default => Err(ClusterError::NoKubeconfig {
                looked: format!(
                    "no kubeconfig: --kubeconfig is not given, KUBECONFIG is not set, {} and this is not a pod in a cluster (KUBERNETES_SERVICE_HOST is not set); give --kubeconfig FILE, set KUBECONFIG=FILE, or write your cluster's kubeconfig to {shown}",
                    if default.is_some() {
                        format!("{shown} does not exist,")
                    } else {
                        "the default ~/.kube/config has no home directory (HOME is not set),".to_owned()
                    }
                ),
            }),
        }
    }

    /// Read it (every file of `KUBECONFIG`, merged), with the one path errors name.
    fn read(&self) -> Result<(Kubeconfig, Option<PathBuf>), ClusterError> {
        let path = match self {
            Self::Given(p) | Self::Default(p) => p.clone(),
            Self::Env(_) => return Ok((Kubeconfig::read().map_err(|e| unreadable(None, e))?, None)),
            Self::InCluster(_) => unreachable!("the in-cluster config is not a kubeconfig"),
        };
        if let Self::Given(p) = self
            && !p.exists()
        {
            return Err(ClusterError::NoKubeconfig {
                looked: format!("kubeconfig {} does not exist; give the path of your kubeconfig file", p.display()),
            });
        }
        Ok((Kubeconfig::read_from(&path).map_err(|e| unreadable(Some(&path), e))?, Some(path)))
    }

    /// The context to use (`asked`, else the kubeconfig's `current-context`), checked to exist
    /// and to name a cluster with a server.
    ///
    /// # Errors
    /// [`ClusterError::NoContext`] or [`ClusterError::NoCluster`], naming the kubeconfig.
    fn context(&self, kc: &Kubeconfig, asked: Option<&str>) -> Result<String, ClusterError> {
        let name = asked.map(str::to_owned).or_else(|| kc.current_context.clone().filter(|c| !c.is_empty()));
        let found = name.as_ref().and_then(|n| kc.contexts.iter().find(|c| c.name == *n));
        let Some((name, named)) = name.clone().zip(found) else {
            return Err(ClusterError::NoContext {
                kubeconfig: self.to_string().into(),
                current: asked.is_none(),
                context: name,
                available: kc.contexts.iter().map(|c| c.name.clone()).collect(),
            });
        };
        let cluster = named.context.as_ref().map(|c| c.cluster.clone()).unwrap_or_default();
        let served = kc.clusters.iter().any(|c| {
            c.name == cluster && c.cluster.as_ref().is_some_and(|c| c.server.as_ref().is_some_and(|s| !s.is_empty()))
        });
        if !served {
            return Err(ClusterError::NoCluster {
                kubeconfig: self.to_string().into(),
                context: name,
                cluster,
                defined: kc.clusters.iter().map(|c| c.name.clone()).collect(),
            });
        }
        Ok(name)
    }
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Given(p) => write!(f, "kubeconfig {}", p.display()),
            Self::Env(v) => write!(f, "kubeconfig {} (from KUBECONFIG)", v.to_string_lossy()),
            Self::Default(p) => {
                write!(f, "kubeconfig {} (the default: no --kubeconfig, KUBECONFIG not set)", p.display())
            }
            Self::InCluster(_) => f.write_str("the in-cluster config"),
        }
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
        let found = match &opts.kubeconfig {
            Some(path) => Found::Given(path.clone()),
            None => Found::search(
                std::env::var_os("KUBECONFIG"),
                std::env::home_dir(),
                std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
            )?,
        };
        let config = match found {
            Found::InCluster(default) => Config::incluster().map_err(|e| ClusterError::NoKubeconfig {
                looked: format!(
                    "no kubeconfig (--kubeconfig is not given, KUBECONFIG is not set, {default} does not exist), and KUBERNETES_SERVICE_HOST is set but this pod's in-cluster config cannot be read ({e}); give --kubeconfig FILE or set KUBECONFIG=FILE"
                ),
            })?,
            found => {
                let (kc, path) = found.read()?;
                let context = found.context(&kc, opts.context.as_deref())?;
                let kc_opts = KubeConfigOptions { context: Some(context), ..KubeConfigOptions::default() };
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
