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
}

impl Default for TargetCluster {
    fn default() -> Self {
        Self { name: String::new(), flux_namespace: "flux-system".into(), source_ref: "flux-system".into() }
    }
}
