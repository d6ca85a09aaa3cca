//! The profile document: serde types for `apiVersion: osbx.dev/v1alpha1`, `kind: Profile`.
//!
//! Every struct denies unknown fields so that a typo is an error with a location, not a silently
//! ignored setting. Defaults live here, next to the field they belong to; rules that span fields
//! live in `validate.rs`.

mod layers;
mod opensandbox;
mod pools;
mod verify;

use serde::{Deserialize, Serialize};

pub use layers::*;
pub use opensandbox::*;
pub use pools::*;
pub use verify::*;

/// The only `apiVersion` this build understands.
pub const API_VERSION: &str = "osbx.dev/v1alpha1";
/// The only `kind` this build understands.
pub const KIND: &str = "Profile";

/// A whole profile document.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Profile {
    /// Must be [`API_VERSION`].
    pub api_version: String,
    /// Must be [`KIND`].
    pub kind: String,
    /// Name and description of the profile itself.
    pub metadata: Metadata,
    /// Where the platform goes: the cluster directory and the Flux objects that sync it.
    pub cluster: Cluster,
    /// The Flux Kustomization layers, rendered by osbx or only referenced.
    pub layers: Vec<Layer>,
    /// The OpenSandbox Helm release and its values.
    pub opensandbox: OpenSandbox,
    /// The OpenSandbox Pools.
    #[serde(default)]
    pub pools: Pools,
    /// Kata Containers (for a `kata` layer).
    #[serde(default)]
    pub kata: Option<Kata>,
    /// SPIRE agents and the smoke identity (for `spire-agents` and `spire-smoke` layers).
    #[serde(default)]
    pub spire: Option<Spire>,
    /// How `osbx verify` probes the platform.
    #[serde(default)]
    pub verify: Verify,
}

/// What a rendered layer contains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Component {
    /// Namespaces, chart GitRepository, values ConfigMap, HelmRelease and README.
    Opensandbox,
    /// The OpenSandbox Pools.
    Pools,
    /// kata-deploy (RuntimeClasses and the Kata runtime on the nodes).
    Kata,
    /// SPIRE agents and the SPIFFE CSI driver.
    SpireAgents,
    /// The SPIFFE smoke fixture (namespace, ServiceAccount, ClusterSPIFFEID).
    SpireSmoke,
}

impl Component {
    /// The template directory of this component.
    #[must_use]
    pub fn template_dir(self) -> &'static str {
        match self {
            Component::Opensandbox => "opensandbox",
            Component::Pools => "pools",
            Component::Kata => "kata",
            Component::SpireAgents => "spire-agents",
            Component::SpireSmoke => "spire-smoke",
        }
    }
}

/// One Flux Kustomization layer.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Layer {
    /// Kustomization name (also `clusters/<cluster>/apps/<name>.yaml`).
    pub name: String,
    /// The layer exists in the repository already; osbx only refers to it in `dependsOn`.
    #[serde(default)]
    pub external: bool,
    /// What osbx renders into the layer (required unless `external`).
    #[serde(default)]
    pub component: Option<Component>,
    /// Repository path of the layer; default `platform/<name>`.
    #[serde(default)]
    pub path: Option<String>,
    /// Flux reconcile interval.
    #[serde(default = "default_layer_interval")]
    pub interval: String,
    /// Flux timeout (defaults to the interval in Flux).
    #[serde(default)]
    pub timeout: Option<String>,
    /// Flux retry interval after a failure.
    #[serde(default)]
    pub retry_interval: Option<String>,
    /// Garbage-collect objects removed from the layer.
    #[serde(default = "yes")]
    pub prune: bool,
    /// Health-check everything the layer applies.
    #[serde(default = "yes")]
    pub wait: bool,
    /// Layers (rendered or external) that must be Ready first.
    #[serde(default)]
    pub depends_on: Vec<String>,
}

fn default_layer_interval() -> String {
    "10m".into()
}

pub(super) fn yes() -> bool {
    true
}
