//! The `cluster` section: where the platform goes.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The cluster the profile renders for.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("required" = ["name"]))]
pub struct TargetCluster {
    /// Cluster name: the tree goes to `clusters/<name>/`.
    pub name: String,
    /// Namespace of the Flux controllers and of every layer Kustomization.
    pub flux_namespace: String,
    /// Name of the root `GitRepository` that Flux syncs this repository from.
    pub source_ref: String,
    /// The cluster's Kubernetes version (`1.36`, `v1.36.3`): what `osbx diff --base` renders
    /// the charts for (`helm template --kube-version`).
    pub kubernetes_version: String,
}

/// The Kubernetes minor osbx is built and tested against (k8s-openapi's `v1_36`).
pub(crate) const KUBERNETES_VERSION: &str = "1.36";

impl TargetCluster {
    /// Whether `kubernetes_version` reads as `[v]MAJOR.MINOR[.PATCH]`.
    #[must_use]
    pub(crate) fn kubernetes_version_valid(&self) -> bool {
        let v = self.kubernetes_version.strip_prefix('v').unwrap_or(&self.kubernetes_version);
        let parts: Vec<&str> = v.split('.').collect();
        (2..=3).contains(&parts.len()) && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    }
}

impl Default for TargetCluster {
    fn default() -> Self {
        Self {
            name: String::new(),
            flux_namespace: "flux-system".into(),
            source_ref: "flux-system".into(),
            kubernetes_version: KUBERNETES_VERSION.into(),
        }
    }
}
