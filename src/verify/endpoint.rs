//! Reaching the OpenSandbox Lifecycle API: through the API server's service proxy (default; no
//! port-forward needed) or at a URL. The API key is sent as `OPEN-SANDBOX-API-KEY` and never
//! shown: [`ApiKeyValue`] prints as `***`.

use std::sync::Arc;

use http_body_util::BodyExt;
use kube::Client;
use serde_json::Value;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::settings::{ApiKeyValue, Reach};
use crate::cluster::meter::RequestStats;
use crate::cluster::operation::{Objects, Operation};
use crate::cluster::{Cluster, RequestCounts};
use crate::components::opensandbox::OpenSandbox;
use crate::object::{KnownKind, ObjectRef};
use crate::profile::Profile;

/// Where the Lifecycle API is.
#[derive(Clone)]
pub enum Endpoint {
    /// `/api/v1/namespaces/<ns>/services/<service>:<port>/proxy` on the API server.
    Proxy {
        /// The cluster client.
        client: Client,
        /// The proxy path prefix.
        base: String,
        /// The API key sent with every request (`OPEN-SANDBOX-API-KEY`).
        key: ApiKeyValue,
    },
    /// A URL (`--server-url`).
    Direct {
        /// HTTP client.
        http: reqwest::Client,
        /// Base URL without a trailing slash.
        base: String,
        /// The API key sent with every request (`OPEN-SANDBOX-API-KEY`).
        key: ApiKeyValue,
        /// The run's client limits, which requests to the URL keep too.
        limits: Arc<Limits>,
    },
}

/// `--qps` and `--concurrency` for requests that do not go through the cluster client (whose
/// own stack keeps them there), and their counts.
pub struct Limits {
    /// Requests in flight at most.
    slots: tokio::sync::Semaphore,
    /// One tick per request: `qps` per second (none: no limit).
    ticks: Option<tokio::sync::Mutex<tokio::time::Interval>>,
    /// Counts and the peak in flight.
    stats: Arc<RequestStats>,
}

impl Limits {
    /// At most `concurrency` in flight and `qps` per second (`None`: no limit per second).
    #[must_use]
    pub fn new(qps: Option<std::num::NonZeroU32>, concurrency: usize) -> Self {
        let ticks = qps.map(|qps| {
            let mut ticks = tokio::time::interval(std::time::Duration::from_secs(1) / qps.get());
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tokio::sync::Mutex::new(ticks)
        });
        Self { slots: tokio::sync::Semaphore::new(concurrency.max(1)), ticks, stats: Arc::default() }
    }
}

/// The service name in a service proxy path: `<service>:<port>`.
fn proxied(service: &str, port: u16) -> String {
    format!("{service}:{port}")
}

/// The requests with `methods` a run that reaches the platform as `reach` makes to the Lifecycle
/// API: through the service proxy, each a [`Operation::Proxy`] (the service named
/// `<service>:<port>` as in the request path); at a URL, none against the cluster.
#[must_use]
pub(crate) fn requests(profile: &Profile, reach: &Reach, methods: &[http::Method]) -> Vec<Operation> {
    if reach.direct {
        return Vec::new();
    }
    let server = profile.sections.opensandbox.server_service();
    let service =
        KnownKind::SERVICE.object(server.namespace.as_deref(), &proxied(&server.name, OpenSandbox::SERVER_PORT));
    methods.iter().map(|method| Operation::Proxy { service: service.clone(), method: method.clone() }).collect()
}

/// Reading the API key ([`api_key`]): the Secret the profile names, unless the run was given a
/// key or the profile has an inline one.
#[must_use]
pub(crate) fn reading_key(profile: &Profile, reach: &Reach) -> Vec<Operation> {
    let os = &profile.sections.opensandbox;
    match os.api_key_secret() {
        Some(s) if !reach.key_given && os.server.api_key.inline.is_none() => {
            vec![Operation::Get(Objects::Named(s.secret))]
        }
        _ => Vec::new(),
    }
}

/// The API key: the one given to the run, else the profile's inline key, else the Secret the
/// profile names (unreadable or missing: none, and the checks that need it say so).
pub(super) async fn api_key(cluster: &Cluster, profile: &Profile, given: &ApiKeyValue) -> ApiKeyValue {
    if given.value().is_some() {
        return given.clone();
    }
    let os = &profile.sections.opensandbox;
    if let Some(inline) = &os.server.api_key.inline {
        return ApiKeyValue::new(Some(inline.clone()));
    }
    let Some(supplied) = os.api_key_secret() else { return ApiKeyValue::default() };
    let namespace = supplied.secret.namespace.as_deref().unwrap_or_default();
    let secret = Api::<Secret>::namespaced(cluster.client.clone(), namespace).get_opt(&supplied.secret.name).await;
    ApiKeyValue::new(
        secret
            .ok()
            .flatten()
            .and_then(|s| s.data)
            .and_then(|d| d.get(&supplied.key).map(|v| String::from_utf8_lossy(&v.0).trim().to_owned())),
    )
}

/// A response: status code and body (JSON when it parses).
#[derive(Debug, Clone)]
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// Parsed body (`Null` when empty or not JSON).
    pub json: Value,
    /// Raw body text.
    pub text: String,
}

impl Endpoint {
    /// Through the service proxy of `service`, at `port`.
    #[must_use]
    pub fn proxy(client: Client, service: &ObjectRef, port: u16, key: ApiKeyValue) -> Self {
        let (namespace, name) = (service.namespace.as_deref().unwrap_or_default(), proxied(&service.name, port));
        Endpoint::Proxy { client, base: format!("/api/v1/namespaces/{namespace}/services/{name}/proxy"), key }
    }

    /// At a URL; requests time out after `timeout` and keep the run's client limits (`--qps`,
    /// `--concurrency`).
    ///
    /// # Errors
    /// When the HTTP client cannot be built.
    pub fn direct(
        url: &str,
        key: ApiKeyValue,
        timeout: std::time::Duration,
        limits: Limits,
    ) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder().timeout(timeout).build()?;
        Ok(Endpoint::Direct { http, base: url.trim_end_matches('/').to_owned(), key, limits: Arc::new(limits) })
    }

    /// The requests made to a URL so far (`None` through the service proxy, where the cluster
    /// client counts them).
    #[must_use]
    pub fn requests(&self) -> Option<RequestCounts> {
        match self {
            Endpoint::Proxy { .. } => None,
            Endpoint::Direct { limits, .. } => Some(limits.stats.snapshot()),
        }
    }

    /// Whether requests go through the API server's service proxy (the in-cluster server).
    #[must_use]
    pub fn is_proxy(&self) -> bool {
        matches!(self, Endpoint::Proxy { .. })
    }

    /// Where requests go, for messages (never includes the key).
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Endpoint::Proxy { base, .. } => format!("API server proxy {base}"),
            Endpoint::Direct { base, .. } => base.clone(),
        }
    }

    /// Send a request; `with_key: false` leaves the API key out (to prove auth is on).
    ///
    /// # Errors
    /// A readable transport error (the key is never part of it).
    pub async fn request(
        &self,
        method: http::Method,
        path: &str,
        body: Option<&Value>,
        with_key: bool,
    ) -> Result<Response, String> {
        let text_body = body.map(|b| serde_json::to_vec(b).unwrap_or_default());
        let (status, text) = match self {
            Endpoint::Proxy { client, base, key } => {
                let mut req = http::Request::builder().method(method).uri(format!("{base}{path}"));
                if let (true, Some(k)) = (with_key, key.value()) {
                    req = req.header("OPEN-SANDBOX-API-KEY", k);
                }
                if text_body.is_some() {
                    req = req.header("content-type", "application/json");
                }
                let req =
                    req.body(kube::client::Body::from(text_body.unwrap_or_default())).map_err(|e| e.to_string())?;
                let resp = client.send(req).await.map_err(|e| crate::cluster::describe(&e))?;
                let status = resp.status().as_u16();
                let bytes = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
                (status, String::from_utf8_lossy(&bytes).into_owned())
            }
            Endpoint::Direct { http, base, key, limits } => {
                let _slot = limits.slots.acquire().await.map_err(|e| e.to_string())?;
                if let Some(ticks) = &limits.ticks {
                    ticks.lock().await.tick().await;
                }
                let url = format!("{base}{path}");
                limits
                    .stats
                    .record(&http::Request::builder().method(method.clone()).uri(path).body(()).unwrap_or_default());
                let _in_flight = limits.stats.enter();
                let mut req = http.request(method, url);
                if let (true, Some(k)) = (with_key, key.value()) {
                    req = req.header("OPEN-SANDBOX-API-KEY", k);
                }
                if let Some(b) = text_body {
                    req = req.header("content-type", "application/json").body(b);
                }
                let resp = req.send().await.map_err(|e| e.to_string())?;
                let status = resp.status().as_u16();
                (status, resp.text().await.map_err(|e| e.to_string())?)
            }
        };
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok(Response { status, json, text })
    }
}
