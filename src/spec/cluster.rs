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
    /// The cluster's Flux version (`2.7`, `v2.7.2`): from 2.5 on, the layers holding kinds
    /// without a Ready condition (Pools) carry `healthCheckExprs`, so Flux itself calls them
    /// healthy only when osbx would; before it, they do not (Flux would refuse the field).
    pub flux_version: String,
}

/// The Kubernetes minor osbx is built and tested against (k8s-openapi's `v1_36`).
pub(crate) const KUBERNETES_VERSION: &str = "1.36";

/// The first Flux release whose kustomize-controller takes `healthCheckExprs` (2.5.0).
pub(crate) const FLUX_HEALTH_EXPRS: (u64, u64) = (2, 5);

/// `[v]MAJOR.MINOR[.PATCH]` as (major, minor).
fn major_minor(version: &str) -> Option<(u64, u64)> {
    let v = version.strip_prefix('v').unwrap_or(version);
    let parts: Vec<&str> = v.split('.').collect();
    if !(2..=3).contains(&parts.len()) || !parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    Some((parts[0].parse().ok()?, parts[1].parse().ok()?))
}

impl TargetCluster {
    /// Whether `kubernetes_version` reads as `[v]MAJOR.MINOR[.PATCH]`.
    #[must_use]
    pub(crate) fn kubernetes_version_valid(&self) -> bool {
        major_minor(&self.kubernetes_version).is_some()
    }

    /// Whether `flux_version` reads as `[v]MAJOR.MINOR[.PATCH]`.
    #[must_use]
    pub(crate) fn flux_version_valid(&self) -> bool {
        major_minor(&self.flux_version).is_some()
    }

    /// Whether the cluster's Flux takes `healthCheckExprs` (Flux ≥ 2.5).
    #[must_use]
    pub(crate) fn flux_takes_health_exprs(&self) -> bool {
        major_minor(&self.flux_version).is_some_and(|v| v >= FLUX_HEALTH_EXPRS)
    }
}

impl Default for TargetCluster {
    fn default() -> Self {
        Self {
            name: String::new(),
            flux_namespace: "flux-system".into(),
            source_ref: "flux-system".into(),
            kubernetes_version: KUBERNETES_VERSION.into(),
            flux_version: "2.7".into(),
        }
    }
}
