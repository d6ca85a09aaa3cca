//! The server's `config.toml`, one struct per table; keys render in declaration order.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The `config.toml` tables the profile sets (the chart appends `[ingress]` itself).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerConfig {
    /// `[server]`: where the server listens, its sandbox time limit.
    pub server: ServerTable,
    /// `[log]`: the server's log level.
    pub log: LogTable,
    /// `[runtime]`: the runtime type and the execd image.
    pub runtime: RuntimeTable,
    /// `[kubernetes]` (`namespace` comes from `namespaces.sandbox`).
    pub kubernetes: KubernetesTable,
    /// `[egress]`: the egress sidecar (none without it).
    pub egress: Option<EgressTable>,
}

/// `[server]` keys (the API key is set through `apiKey`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerTable {
    /// Bind address.
    pub host: String,
    /// Port (the chart's containerPort is 80).
    pub port: i64,
    /// Largest sandbox timeout a client may ask for (≥ 60).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_sandbox_timeout_seconds: Option<i64>,
}

impl Default for ServerTable {
    fn default() -> Self {
        Self { host: "0.0.0.0".into(), port: 80, max_sandbox_timeout_seconds: None }
    }
}

/// `[log]` keys.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct LogTable {
    /// Log level (`INFO`, `DEBUG`, …).
    pub level: String,
}

impl Default for LogTable {
    fn default() -> Self {
        Self { level: "INFO".into() }
    }
}

/// The registry of OpenSandbox's images.
pub(crate) const REGISTRY: &str = "sandbox-registry.cn-zhangjiakou.cr.aliyuncs.com/opensandbox";

/// The execd release osbx pins: injected by the server into template-mode sandboxes, and
/// installed by the pools' default init container.
#[must_use]
pub(crate) fn execd_image() -> String {
    format!("{REGISTRY}/execd:v1.0.22")
}

/// `[runtime]` keys.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct RuntimeTable {
    /// Runtime type (`kubernetes`).
    #[serde(rename = "type")]
    pub kind: String,
    /// The execd image injected into template-mode sandboxes.
    pub execd_image: String,
}

impl Default for RuntimeTable {
    fn default() -> Self {
        Self { kind: "kubernetes".into(), execd_image: execd_image() }
    }
}

/// `[kubernetes]` keys, in the order they are rendered.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct KubernetesTable {
    /// Kubeconfig of the server (empty: in-cluster).
    pub kubeconfig_path: String,
    /// Watch sandboxes with an informer instead of polling.
    pub informer_enabled: bool,
    /// Informer resync period.
    pub informer_resync_seconds: i64,
    /// Informer watch timeout.
    pub informer_watch_timeout_seconds: i64,
    /// How long a snapshot may take.
    pub snapshot_create_timeout_seconds: i64,
    /// `batchsandbox` (pools) or `agent-sandbox`.
    pub workload_provider: String,
    /// The BatchSandbox template of template-mode sandboxes.
    pub batchsandbox_template_file: String,
    /// ServiceAccount of sandbox pods.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    /// Image pull policy of sandbox pods.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    /// How long a create waits for the sandbox to run (the server's default: 60).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox_create_timeout_seconds: Option<i64>,
    /// How often a create polls the sandbox.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox_create_poll_interval_seconds: Option<f64>,
}

impl Default for KubernetesTable {
    fn default() -> Self {
        Self {
            kubeconfig_path: String::new(),
            informer_enabled: true,
            informer_resync_seconds: 300,
            informer_watch_timeout_seconds: 60,
            snapshot_create_timeout_seconds: 900,
            workload_provider: "batchsandbox".into(),
            batchsandbox_template_file: "/etc/opensandbox/example.batchsandbox-template.yaml".into(),
            service_account: None,
            image_pull_policy: None,
            sandbox_create_timeout_seconds: None,
            sandbox_create_poll_interval_seconds: None,
        }
    }
}

impl KubernetesTable {
    /// The server's own default create timeout, when `sandboxCreateTimeoutSeconds` is not set.
    pub const SERVER_CREATE_TIMEOUT_SECONDS: i64 = 60;

    /// How long the server waits for a new sandbox to run, in seconds.
    #[must_use]
    pub fn create_timeout(&self) -> i64 {
        self.sandbox_create_timeout_seconds.unwrap_or(Self::SERVER_CREATE_TIMEOUT_SECONDS)
    }
}

/// `[egress]` keys.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct EgressTable {
    /// Egress sidecar image.
    pub image: String,
    /// `dns` or `dns+nft`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Disable IPv6 in the sandbox.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disable_ipv6: Option<bool>,
}

impl Default for EgressTable {
    fn default() -> Self {
        Self {
            image: "sandbox-registry.cn-zhangjiakou.cr.aliyuncs.com/opensandbox/egress:v1.1.6".into(),
            mode: None,
            disable_ipv6: None,
        }
    }
}
