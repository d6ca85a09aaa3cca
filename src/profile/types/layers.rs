//! The `kata` and `spire` sections: the Kata Containers runtime (kata-deploy) and the SPIRE
//! agents joined to an existing trust root, plus the SPIFFE smoke fixture.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// kata-deploy, installed by a Flux HelmRelease from its OCI chart.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Kata {
    /// Namespace of the HelmRelease and the chart's objects.
    #[serde(default = "default_kata_ns")]
    pub namespace: String,
    /// The OCI chart.
    #[serde(default)]
    pub chart: OciChart,
    /// HelmRelease name.
    #[serde(default = "default_kata_release")]
    pub release: String,
    /// Reconcile interval.
    #[serde(default = "default_release_interval")]
    pub interval: String,
    /// Helm timeout; must cover artifact extraction and a CRI restart on every node.
    #[serde(default = "default_kata_timeout")]
    pub timeout: String,
    /// `job` (short-lived install Jobs) or `daemonset`.
    #[serde(default = "default_deployment_mode")]
    pub deployment_mode: String,
    /// `k3s`, `rke2`, `k8s`, … (sets the containerd paths).
    #[serde(default = "default_distribution")]
    pub k8s_distribution: String,
    /// The shims to install (all others disabled), e.g. `clh-runtime-rs`.
    pub shims: Vec<String>,
    /// The default shim (must be one of `shims`).
    pub default_shim: String,
    /// Create the `kata` alias RuntimeClass.
    #[serde(default)]
    pub create_default_runtime_class: bool,
    /// Nodes to install on.
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Extra chart values, merged over what osbx sets.
    #[serde(default)]
    pub values: Option<Value>,
}

fn default_kata_ns() -> String {
    "kata-system".into()
}
fn default_kata_release() -> String {
    "kata-deploy".into()
}
fn default_release_interval() -> String {
    "30m".into()
}
fn default_kata_timeout() -> String {
    "20m".into()
}
fn default_deployment_mode() -> String {
    "job".into()
}
fn default_distribution() -> String {
    "k3s".into()
}

impl Kata {
    /// The RuntimeClass kata-deploy creates for a shim (`kata-<shim>`).
    #[must_use]
    pub fn runtime_class(shim: &str) -> String {
        format!("kata-{shim}")
    }
}

/// A chart in an OCI registry (a Flux `OCIRepository`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OciChart {
    /// `oci://` URL of the chart.
    #[serde(default = "default_kata_chart")]
    pub url: String,
    /// Chart version (the OCI tag).
    #[serde(default = "default_kata_version")]
    pub version: String,
    /// Fetch interval.
    #[serde(default = "default_chart_interval")]
    pub interval: String,
}

impl Default for OciChart {
    fn default() -> Self {
        Self { url: default_kata_chart(), version: default_kata_version(), interval: default_chart_interval() }
    }
}

fn default_kata_chart() -> String {
    "oci://ghcr.io/kata-containers/kata-deploy-charts/kata-deploy".into()
}
fn default_kata_version() -> String {
    "4.1.0".into()
}
fn default_chart_interval() -> String {
    "1h".into()
}

/// SPIRE agents (DaemonSet + SPIFFE CSI driver) joined to a SPIRE server elsewhere.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spire {
    /// The trust domain (`ddupan.top`).
    pub trust_domain: String,
    /// The cluster name the server's `k8s_psat` attestor knows this cluster by (default:
    /// `cluster.name`).
    #[serde(default)]
    pub cluster_name: Option<String>,
    /// Namespace of the agents and the HelmRelease.
    #[serde(default = "default_spire_ns")]
    pub namespace: String,
    /// The hardened SPIRE chart.
    #[serde(default)]
    pub chart: HelmChart,
    /// The existing SPIRE server the agents join (no second trust root is created).
    pub server: SpireServer,
    /// The `className` of the spire-controller-manager that processes this cluster's
    /// ClusterSPIFFEIDs; the smoke identity carries it.
    pub class_name: String,
    /// The smoke fixture: namespace, ServiceAccount and the identity it gets.
    #[serde(default)]
    pub smoke: SpireSmoke,
    /// Extra chart values, merged over what osbx sets.
    #[serde(default)]
    pub values: Option<Value>,
}

fn default_spire_ns() -> String {
    "spire-system".into()
}

/// A chart in a Helm repository (a Flux `HelmRepository`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HelmChart {
    /// Repository URL.
    #[serde(default = "default_spire_repo")]
    pub repository: String,
    /// Chart name.
    #[serde(default = "default_spire_chart")]
    pub name: String,
    /// Chart version.
    #[serde(default = "default_spire_version")]
    pub version: String,
    /// Fetch interval.
    #[serde(default = "default_chart_interval")]
    pub interval: String,
}

impl Default for HelmChart {
    fn default() -> Self {
        Self {
            repository: default_spire_repo(),
            name: default_spire_chart(),
            version: default_spire_version(),
            interval: default_chart_interval(),
        }
    }
}

fn default_spire_repo() -> String {
    "https://spiffe.github.io/helm-charts-hardened".into()
}
fn default_spire_chart() -> String {
    "spire".into()
}
fn default_spire_version() -> String {
    "0.30.0".into()
}

/// The SPIRE server the agents join.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpireServer {
    /// Host name or address.
    pub address: String,
    /// Port.
    #[serde(default = "default_spire_port")]
    pub port: i64,
}

fn default_spire_port() -> i64 {
    8081
}

/// The SPIFFE smoke fixture.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpireSmoke {
    /// Namespace.
    #[serde(default = "default_smoke")]
    pub namespace: String,
    /// ServiceAccount.
    #[serde(default = "default_smoke")]
    pub service_account: String,
    /// ClusterSPIFFEID name.
    #[serde(default = "default_smoke_cr")]
    pub name: String,
    /// Path of the identity under the trust domain.
    #[serde(default = "default_smoke_path")]
    pub path: String,
}

impl Default for SpireSmoke {
    fn default() -> Self {
        Self {
            namespace: default_smoke(),
            service_account: default_smoke(),
            name: default_smoke_cr(),
            path: default_smoke_path(),
        }
    }
}

fn default_smoke() -> String {
    "spire-smoke".into()
}
fn default_smoke_cr() -> String {
    "sandbox-spire-smoke".into()
}
fn default_smoke_path() -> String {
    "/sandbox/smoke".into()
}

impl Spire {
    /// The SPIFFE ID the smoke ServiceAccount gets.
    #[must_use]
    pub fn smoke_id(&self) -> String {
        format!("spiffe://{}{}", self.trust_domain, self.smoke.path)
    }
}
