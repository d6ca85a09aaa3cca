//! The `pools` section: pools and the pod-template fields they share.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Resources;

/// The pools and the pod-template parts they share.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pools {
    /// Fields every pool inherits unless it sets them itself (lists and maps are replaced whole).
    #[serde(default)]
    pub defaults: PoolTemplate,
    /// The pools.
    #[serde(default)]
    pub items: Vec<Pool>,
}

/// Container runtime of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// The node's default runtime.
    Runc,
    /// A Kata Containers VM per pod (needs a RuntimeClass).
    Kata,
}

impl Runtime {
    /// Lower-case name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Runc => "runc",
            Runtime::Kata => "kata",
        }
    }
}

/// The RuntimeClass a Kata pool uses unless it names another.
pub const DEFAULT_KATA_RUNTIME_CLASS: &str = "kata-clh-runtime-rs";

/// Pod-template fields a pool may set or inherit from `pools.defaults`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct PoolTemplate {
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
    pub container_name: Option<String>,
    pub image: Option<String>,
    pub image_pull_policy: Option<String>,
    pub command: Option<Vec<String>>,
    pub args: Option<Vec<String>>,
    pub env: Option<Vec<Value>>,
    pub resources: Option<Resources>,
    pub volume_mounts: Option<Vec<Value>>,
    pub init_containers: Option<Vec<Value>>,
    pub volumes: Option<Vec<Value>>,
    pub node_selector: Option<BTreeMap<String, String>>,
    pub tolerations: Option<Vec<Value>>,
    pub service_account_name: Option<String>,
}

/// One OpenSandbox Pool.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pool {
    /// Pool name (DNS-1123 label).
    pub name: String,
    /// `runc` or `kata`.
    pub runtime: Runtime,
    /// RuntimeClass for `kata` (default [`DEFAULT_KATA_RUNTIME_CLASS`]).
    #[serde(default)]
    pub runtime_class_name: Option<String>,
    /// Warm-pool capacity.
    pub capacity: Capacity,
    /// Cap on not-ready pods while scaling.
    #[serde(default)]
    pub scale_strategy: Option<MaxUnavailable>,
    /// Rolling replacement of idle pods on template change.
    #[serde(default)]
    pub update_strategy: Option<MaxUnavailable>,
    /// What happens to a pod when its sandbox is released.
    #[serde(default)]
    pub recycle_strategy: Option<RecycleStrategy>,
    /// Pod labels.
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    /// Pod annotations.
    #[serde(default)]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Main container name (default `sandbox`).
    #[serde(default)]
    pub container_name: Option<String>,
    /// Main container image.
    #[serde(default)]
    pub image: Option<String>,
    /// Main container image pull policy.
    #[serde(default)]
    pub image_pull_policy: Option<String>,
    /// Main container command.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Main container args.
    #[serde(default)]
    pub args: Option<Vec<String>>,
    /// Main container env.
    #[serde(default)]
    pub env: Option<Vec<Value>>,
    /// Main container resources.
    #[serde(default)]
    pub resources: Option<Resources>,
    /// Main container volume mounts.
    #[serde(default)]
    pub volume_mounts: Option<Vec<Value>>,
    /// Init containers.
    #[serde(default)]
    pub init_containers: Option<Vec<Value>>,
    /// Pod volumes.
    #[serde(default)]
    pub volumes: Option<Vec<Value>>,
    /// Pod node selector.
    #[serde(default)]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Pod tolerations.
    #[serde(default)]
    pub tolerations: Option<Vec<Value>>,
    /// Pod service account.
    #[serde(default)]
    pub service_account_name: Option<String>,
}

/// Pool capacity. Signed so that a negative number gets a clear validation error.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Capacity {
    /// Minimum idle pods.
    pub buffer_min: i64,
    /// Maximum idle pods.
    pub buffer_max: i64,
    /// Minimum total pods.
    pub pool_min: i64,
    /// Maximum total pods.
    pub pool_max: i64,
}

/// `maxUnavailable` (an int or a percentage).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MaxUnavailable {
    /// Count or percentage.
    pub max_unavailable: Value,
}

/// Pool recycle strategy.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecycleStrategy {
    /// `Delete`, `Restart` or `Noop`.
    #[serde(rename = "type")]
    pub kind: RecycleType,
}

/// Pool recycle strategy type.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
pub enum RecycleType {
    /// Delete the pod.
    Delete,
    /// Restart its containers.
    Restart,
    /// Return it as is.
    Noop,
}
