//! The `opensandbox` section: chart source, HelmRelease, values and `config.toml`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::yes;

/// The OpenSandbox installation.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpenSandbox {
    /// The namespaces the chart uses (it creates none itself).
    #[serde(default)]
    pub namespaces: Namespaces,
    /// The Git repository that holds the chart.
    pub source: ChartSource,
    /// The chart inside the source.
    #[serde(default)]
    pub chart: Chart,
    /// The Flux HelmRelease.
    #[serde(default)]
    pub release: Release,
    /// `opensandbox-controller` values.
    #[serde(default)]
    pub controller: Controller,
    /// `opensandbox-server` values and its `config.toml`.
    pub server: Server,
    /// `opensandbox-node-agent` values.
    #[serde(default)]
    pub node_agent: NodeAgent,
    /// Facts and notes for the layer README.
    #[serde(default)]
    pub readme: Readme,
}

/// The control-plane and sandbox namespaces.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Namespaces {
    /// Where the chart installs the controller and server (hard-coded in the chart).
    #[serde(default = "default_control_plane_ns")]
    pub control_plane: String,
    /// Where sandboxes, BatchSandboxes and Pools live (`[kubernetes].namespace`).
    #[serde(default = "default_sandbox_ns")]
    pub sandbox: String,
}

impl Default for Namespaces {
    fn default() -> Self {
        Self { control_plane: default_control_plane_ns(), sandbox: default_sandbox_ns() }
    }
}

fn default_control_plane_ns() -> String {
    "opensandbox-system".into()
}

fn default_sandbox_ns() -> String {
    "opensandbox".into()
}

/// The chart's Git source (a Flux `GitRepository`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChartSource {
    /// GitRepository name.
    #[serde(default = "default_release_name")]
    pub name: String,
    /// Clone URL (`http`, `https` or `ssh`).
    pub url: String,
    /// The ref to check out.
    #[serde(rename = "ref")]
    pub git_ref: GitRef,
    /// Fetch interval.
    #[serde(default = "default_source_interval")]
    pub interval: String,
    /// Git operation timeout (`ms`, `s` or `m` only).
    #[serde(default)]
    pub timeout: Option<String>,
}

fn default_source_interval() -> String {
    "1h".into()
}

/// A Git reference (Flux precedence: commit > name > semver > tag > branch).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitRef {
    /// Branch name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Tag name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Semver range over tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver: Option<String>,
    /// Full ref name (`refs/pull/1/head`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Commit SHA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// The chart inside the source.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Chart {
    /// Chart path inside the Git source.
    #[serde(default = "default_chart_path")]
    pub path: String,
    /// How often the HelmChart is checked.
    #[serde(default)]
    pub interval: Option<String>,
    /// `ChartVersion` (default in Flux) or `Revision`.
    #[serde(default)]
    pub reconcile_strategy: Option<ReconcileStrategy>,
}

impl Default for Chart {
    fn default() -> Self {
        Self { path: default_chart_path(), interval: None, reconcile_strategy: None }
    }
}

fn default_chart_path() -> String {
    "./kubernetes/charts/opensandbox".into()
}

/// HelmChart reconcile strategy.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
pub enum ReconcileStrategy {
    /// New chart version only.
    ChartVersion,
    /// Every source revision.
    Revision,
}

/// The Flux HelmRelease.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Release {
    /// HelmRelease name (and Helm release name unless `releaseName` is set).
    #[serde(default = "default_release_name")]
    pub name: String,
    /// Helm release name.
    #[serde(default)]
    pub release_name: Option<String>,
    /// Namespace of the HelmRelease object; default the control-plane namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Helm target namespace; default the control-plane namespace.
    #[serde(default)]
    pub target_namespace: Option<String>,
    /// Reconcile interval.
    #[serde(default = "default_release_interval")]
    pub interval: String,
    /// Timeout of each Helm operation.
    #[serde(default)]
    pub timeout: Option<String>,
    /// Install strategy.
    #[serde(default)]
    pub install: Option<ActionStrategy>,
    /// Upgrade strategy.
    #[serde(default)]
    pub upgrade: Option<ActionStrategy>,
    /// Helm drift detection mode.
    #[serde(default)]
    pub drift_detection: Option<DriftDetection>,
    /// Name of the values ConfigMap referenced by `valuesFrom`.
    #[serde(default = "default_values_configmap")]
    pub values_config_map: String,
}

impl Default for Release {
    fn default() -> Self {
        Self {
            name: default_release_name(),
            release_name: None,
            namespace: None,
            target_namespace: None,
            interval: default_release_interval(),
            timeout: None,
            install: None,
            upgrade: None,
            drift_detection: None,
            values_config_map: default_values_configmap(),
        }
    }
}

fn default_release_name() -> String {
    "opensandbox".into()
}

fn default_release_interval() -> String {
    "30m".into()
}

fn default_values_configmap() -> String {
    "opensandbox-values".into()
}

/// Install or upgrade strategy.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActionStrategy {
    /// Strategy name.
    pub strategy: StrategyName,
    /// Retry interval (only with `RetryOnFailure`).
    #[serde(default)]
    pub retry_interval: Option<String>,
}

/// helm-controller remediation strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum StrategyName {
    /// Remediate (rollback/uninstall) on failure.
    RemediateOnFailure,
    /// Retry the action after `retryInterval` (Flux ≥ 2.7).
    RetryOnFailure,
}

/// helm-controller drift detection mode.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DriftDetection {
    /// Detect and correct drift.
    Enabled,
    /// Detect and report drift.
    Warn,
    /// Off.
    Disabled,
}

/// Resource requests and limits; quantities are kept as strings (`"2"`, `500m`, `4Gi`).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resources {
    /// Requests.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Quantity>,
    /// Limits.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, Quantity>,
}

/// A Kubernetes quantity; YAML numbers are accepted and kept as their text.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Quantity(pub String);

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            S(String),
            I(i64),
            F(f64),
        }
        Ok(Quantity(match Raw::deserialize(d)? {
            Raw::S(s) => s,
            Raw::I(i) => i.to_string(),
            Raw::F(f) => f.to_string(),
        }))
    }
}

/// A container image reference split as the chart expects it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageRef {
    /// Repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// `opensandbox-controller.controller` values.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Controller {
    /// Controller image (pin it: the chart's default tags move).
    #[serde(default)]
    pub image: Option<ImageRef>,
    /// `--zap-log-level`.
    #[serde(default)]
    pub log_level: Option<String>,
    /// Replica count.
    #[serde(default)]
    pub replicas: Option<i64>,
    /// Metrics endpoint.
    #[serde(default)]
    pub metrics: Option<Metrics>,
    /// Resources.
    #[serde(default)]
    pub resources: Option<Resources>,
}

/// Controller metrics endpoint.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metrics {
    /// Serve metrics.
    pub enabled: bool,
    /// Serve them over HTTPS.
    #[serde(default)]
    pub secure: bool,
    /// Port.
    #[serde(default = "default_metrics_port")]
    pub port: i64,
}

fn default_metrics_port() -> i64 {
    8080
}

/// `opensandbox-server` values.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Server {
    /// Server image.
    #[serde(default)]
    pub image: Option<ImageRef>,
    /// Replica count.
    #[serde(default)]
    pub replicas: Option<i64>,
    /// Resources (the chart asks for 1 CPU / 4Gi per replica by default).
    #[serde(default)]
    pub resources: Option<Resources>,
    /// Where the server's API key comes from.
    pub api_key: ApiKey,
    /// Extra container env (Kubernetes `EnvVar` objects).
    #[serde(default)]
    pub env: Vec<Value>,
    /// The `config.toml` tables (the chart adds `[ingress]` itself).
    pub config: ServerConfig,
}

/// The OpenSandbox API key source.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiKey {
    /// Written into `config.toml`, i.e. the values ConfigMap, in clear text.
    #[serde(default)]
    pub inline: Option<String>,
    /// Read from a Secret in the control-plane namespace through `OPENSANDBOX_SERVER_API_KEY`.
    #[serde(default)]
    pub secret_ref: Option<SecretKeyRef>,
}

/// A key of a Secret.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretKeyRef {
    /// Secret name.
    pub name: String,
    /// Key inside the Secret.
    #[serde(default = "default_secret_key")]
    pub key: String,
}

fn default_secret_key() -> String {
    "api-key".into()
}

/// The server's `config.toml`, one struct per table; keys render in declaration order.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerConfig {
    /// `[server]`.
    #[serde(default)]
    pub server: ServerTable,
    /// `[log]`.
    #[serde(default)]
    pub log: LogTable,
    /// `[runtime]`.
    pub runtime: RuntimeTable,
    /// `[kubernetes]` (`namespace` comes from `namespaces.sandbox`).
    #[serde(default)]
    pub kubernetes: KubernetesTable,
    /// `[egress]`.
    #[serde(default)]
    pub egress: Option<EgressTable>,
}

/// `[server]` keys (the API key is set through `apiKey`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerTable {
    /// Bind address.
    #[serde(default = "default_host")]
    pub host: String,
    /// Port (the chart's containerPort is 80).
    #[serde(default = "default_port")]
    pub port: i64,
    /// Largest sandbox timeout a client may ask for (≥ 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sandbox_timeout_seconds: Option<i64>,
}

impl Default for ServerTable {
    fn default() -> Self {
        Self { host: default_host(), port: default_port(), max_sandbox_timeout_seconds: None }
    }
}

fn default_host() -> String {
    "0.0.0.0".into()
}

fn default_port() -> i64 {
    80
}

/// `[log]` keys.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LogTable {
    /// Level.
    #[serde(default = "default_log_level")]
    pub level: String,
}

impl Default for LogTable {
    fn default() -> Self {
        Self { level: default_log_level() }
    }
}

fn default_log_level() -> String {
    "INFO".into()
}

/// `[runtime]` keys.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuntimeTable {
    /// Runtime type (`kubernetes`).
    #[serde(rename = "type", default = "default_runtime_type")]
    pub kind: String,
    /// The execd image injected into template-mode sandboxes.
    pub execd_image: String,
}

fn default_runtime_type() -> String {
    "kubernetes".into()
}

/// `[kubernetes]` keys, in the order they are rendered.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct KubernetesTable {
    #[serde(default = "empty")]
    pub kubeconfig_path: String,
    #[serde(default = "yes")]
    pub informer_enabled: bool,
    #[serde(default = "default_resync")]
    pub informer_resync_seconds: i64,
    #[serde(default = "default_watch_timeout")]
    pub informer_watch_timeout_seconds: i64,
    #[serde(default = "default_snapshot_timeout")]
    pub snapshot_create_timeout_seconds: i64,
    #[serde(default = "default_workload_provider")]
    pub workload_provider: String,
    #[serde(default = "default_template_file")]
    pub batchsandbox_template_file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_create_timeout_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_create_poll_interval_seconds: Option<f64>,
}

impl Default for KubernetesTable {
    fn default() -> Self {
        Self {
            kubeconfig_path: empty(),
            informer_enabled: true,
            informer_resync_seconds: default_resync(),
            informer_watch_timeout_seconds: default_watch_timeout(),
            snapshot_create_timeout_seconds: default_snapshot_timeout(),
            workload_provider: default_workload_provider(),
            batchsandbox_template_file: default_template_file(),
            service_account: None,
            image_pull_policy: None,
            sandbox_create_timeout_seconds: None,
            sandbox_create_poll_interval_seconds: None,
        }
    }
}

fn empty() -> String {
    String::new()
}
fn default_resync() -> i64 {
    300
}
fn default_watch_timeout() -> i64 {
    60
}
fn default_snapshot_timeout() -> i64 {
    900
}
fn default_workload_provider() -> String {
    "batchsandbox".into()
}
fn default_template_file() -> String {
    "/etc/opensandbox/example.batchsandbox-template.yaml".into()
}

/// `[egress]` keys.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EgressTable {
    /// Egress sidecar image.
    pub image: String,
    /// `dns` or `dns+nft`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Disable IPv6 in the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_ipv6: Option<bool>,
}

/// `opensandbox-node-agent` values.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeAgent {
    /// Deploy the node agent DaemonSet (not needed for pools).
    #[serde(default)]
    pub enabled: bool,
}

/// Facts for the OpenSandbox layer README that are not in the objects.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Readme {
    /// The commit the chart ref resolved to when it was pinned (documentation only).
    #[serde(default)]
    pub chart_commit: Option<String>,
    /// Text appended to the paragraph about the chart.
    #[serde(default)]
    pub chart_note: Option<String>,
    /// Text appended to the paragraph about the pools.
    #[serde(default)]
    pub pools_note: Option<String>,
    /// Paragraphs placed between the pools paragraph and the smoke-test paragraph.
    #[serde(default)]
    pub notes: Vec<String>,
}
