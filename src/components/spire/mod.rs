//! The `spire` section and the two components that read it: `spire-agents` (SPIRE agents and
//! the SPIFFE CSI driver, joined to an existing SPIRE server: no second trust root) and
//! `spire-smoke` (the fixture whose identity `osbx verify` checks, `spire.smoke`).

pub(crate) mod agents;
pub(crate) mod smoke;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use self::smoke::SpireSmoke;
use super::Sections;
use crate::spec::Violations;

/// SPIRE agents (DaemonSet + SPIFFE CSI driver) joined to a SPIRE server elsewhere.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("required" = ["trustDomain", "server", "className"]))]
pub struct Spire {
    /// The trust domain (`example.org`).
    pub trust_domain: String,
    /// The cluster name the server's `k8s_psat` attestor knows this cluster by (default:
    /// `cluster.name`).
    pub cluster_name: Option<String>,
    /// Namespace of the agents and the HelmRelease.
    pub namespace: String,
    /// The hardened SPIRE chart.
    pub chart: HelmChart,
    /// The existing SPIRE server the agents join (no second trust root is created).
    pub server: SpireServer,
    /// Where the agents get that server's trust bundle (an in-cluster server would publish it
    /// in a ConfigMap; an external one does not).
    pub trust_bundle: Option<TrustBundle>,
    /// The `className` of the spire-controller-manager that processes this cluster's
    /// ClusterSPIFFEIDs; the smoke identity carries it.
    pub class_name: Option<String>,
    /// The smoke fixture: namespace, ServiceAccount and the identity it gets.
    pub smoke: SpireSmoke,
    /// Extra chart values, merged over what osbx sets.
    pub values: Option<Value>,
}

impl Default for Spire {
    fn default() -> Self {
        Self {
            trust_domain: String::new(),
            cluster_name: None,
            namespace: "spire-system".into(),
            chart: HelmChart::default(),
            server: SpireServer::default(),
            trust_bundle: None,
            class_name: None,
            smoke: SpireSmoke::default(),
            values: None,
        }
    }
}

impl Spire {
    /// The chart values osbx sets for `cluster` (agents and the CSI driver only: the server, its
    /// controller manager and the OIDC provider run with the existing trust root), with `values`
    /// merged over them.
    #[must_use]
    pub fn chart_values(&self, cluster: &str) -> Value {
        let cluster = self.cluster_name.as_deref().unwrap_or(cluster);
        let mut values = json!({
            "global": {"spire": {"trustDomain": self.trust_domain, "clusterName": cluster}},
            "spire-server": {"enabled": false},
            "spiffe-oidc-discovery-provider": {"enabled": false},
            "spire-agent": {"enabled": true, "server": {"address": self.server.address, "port": self.server.port}},
            "spiffe-csi-driver": {"enabled": true},
        });
        if let Some(bundle) = &self.trust_bundle {
            values["spire-agent"].as_object_mut().into_iter().for_each(|agent| agent.extend(bundle.chart_values()));
        }
        if let Some(extra) = &self.values {
            crate::merge::merge(&mut values, extra);
        }
        values
    }
}

/// The trust bundle source of agents joined to an external server: exactly one of `url` (with
/// `format`), `hostPath` and `configMap`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct TrustBundle {
    /// Fetch the bundle from this URL (`https://…`; the server's bundle endpoint).
    pub url: Option<String>,
    /// The format at `url`.
    pub format: Option<BundleFormat>,
    /// Read the bundle (PEM) from this file on every node.
    pub host_path: Option<String>,
    /// Mount this ConfigMap, which the operator provides in `spire.namespace` (the chart's
    /// `bundleConfigMap`).
    pub config_map: Option<String>,
}

/// How a trust bundle at a URL is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BundleFormat {
    /// PEM certificates.
    Pem,
    /// A SPIFFE bundle (JWKS), what a SPIRE bundle endpoint serves.
    Spiffe,
}

impl TrustBundle {
    /// The `spire-agent` values for this source.
    fn chart_values(&self) -> serde_json::Map<String, Value> {
        let mut v = serde_json::Map::new();
        if let Some(url) = &self.url {
            v.insert("trustBundleURL".into(), json!(url));
            v.insert("trustBundleFormat".into(), json!(self.format.unwrap_or(BundleFormat::Spiffe)));
        }
        if let Some(path) = &self.host_path {
            v.insert("trustBundleHostPath".into(), json!(path));
        }
        if let Some(name) = &self.config_map {
            v.insert("bundleConfigMap".into(), json!(name));
        }
        v
    }

    /// The ConfigMap the operator provides, if that is the source.
    #[must_use]
    pub fn operator_config_map(&self) -> Option<&str> {
        self.config_map.as_deref()
    }
}

/// A chart in a Helm repository (a Flux `HelmRepository`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct HelmChart {
    /// Repository URL.
    pub repository: String,
    /// Chart name.
    pub name: String,
    /// Chart version.
    pub version: String,
    /// Version of the `spire-crds` chart installed with it (the one released with `version`).
    pub crds_version: String,
    /// Fetch interval.
    pub interval: String,
}

impl Default for HelmChart {
    fn default() -> Self {
        Self {
            repository: "https://spiffe.github.io/helm-charts-hardened".into(),
            name: "spire".into(),
            version: "0.30.0".into(),
            crds_version: "0.6.0".into(),
            interval: "1h".into(),
        }
    }
}

/// The SPIRE server the agents join.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("required" = ["address"]))]
pub struct SpireServer {
    /// Host name or address.
    pub address: String,
    /// Port of the server's agent API.
    pub port: i64,
}

impl Default for SpireServer {
    fn default() -> Self {
        Self { address: String::new(), port: 8081 }
    }
}

/// The `spire` section both SPIRE components read; a layer that renders one of them without it
/// is an error.
fn section<'s>(s: &'s Sections, layer: Option<(usize, &str)>, v: &mut Violations) -> Option<&'s Spire> {
    if s.spire.is_none()
        && let Some((i, _)) = layer
    {
        v.push(format!("layers[{i}].component"), "a SPIRE layer needs a top-level `spire` section");
    }
    s.spire.as_ref()
}
