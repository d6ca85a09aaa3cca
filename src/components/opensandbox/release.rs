//! Where the chart comes from and how Flux releases it: the `GitRepository` and the
//! `HelmRelease` of the `opensandbox` section.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The chart's Git source (a Flux `GitRepository`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct ChartSource {
    /// GitRepository name.
    pub name: String,
    /// Clone URL (`http`, `https` or `ssh`).
    pub url: String,
    /// The ref to check out.
    #[serde(rename = "ref")]
    pub git_ref: GitRef,
    /// Fetch interval.
    pub interval: String,
    /// Git operation timeout (`ms`, `s` or `m` only).
    pub timeout: Option<String>,
}

impl Default for ChartSource {
    fn default() -> Self {
        Self {
            name: Release::default().name,
            url: "https://github.com/opensandbox-group/OpenSandbox.git".into(),
            git_ref: GitRef { tag: Some("helm/opensandbox/0.2.2".into()), ..GitRef::default() },
            interval: "1h".into(),
            timeout: None,
        }
    }
}

/// A Git reference (Flux precedence: commit > name > semver > tag > branch).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
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

impl GitRef {
    /// Whether any ref is set (an unset ref follows the default branch: not a pin).
    #[must_use]
    pub fn is_set(&self) -> bool {
        [&self.branch, &self.tag, &self.semver, &self.name, &self.commit].iter().any(|v| v.is_some())
    }
}

/// The chart inside the source.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Chart {
    /// Chart path inside the Git source.
    pub path: String,
    /// How often the HelmChart is checked.
    pub interval: Option<String>,
    /// `ChartVersion` (default in Flux) or `Revision`.
    pub reconcile_strategy: Option<ReconcileStrategy>,
}

impl Default for Chart {
    fn default() -> Self {
        Self { path: "./kubernetes/charts/opensandbox".into(), interval: None, reconcile_strategy: None }
    }
}

/// HelmChart reconcile strategy.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema)]
pub enum ReconcileStrategy {
    /// New chart version only.
    ChartVersion,
    /// Every source revision.
    Revision,
}

/// The Flux HelmRelease.
// `releaseName` is Flux's field name.
#[allow(clippy::struct_field_names)]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Release {
    /// HelmRelease name (and Helm release name unless `releaseName` is set).
    pub name: String,
    /// Helm release name.
    pub release_name: Option<String>,
    /// Namespace of the HelmRelease object; default the control-plane namespace.
    pub namespace: Option<String>,
    /// Helm target namespace; default the control-plane namespace.
    pub target_namespace: Option<String>,
    /// Reconcile interval.
    pub interval: String,
    /// Timeout of each Helm operation.
    pub timeout: Option<String>,
    /// Install strategy.
    pub install: Option<ActionStrategy>,
    /// Upgrade strategy.
    pub upgrade: Option<ActionStrategy>,
    /// Helm drift detection mode.
    pub drift_detection: Option<DriftDetection>,
    /// Name of the values ConfigMap referenced by `valuesFrom`.
    pub values_config_map: String,
}

impl Default for Release {
    fn default() -> Self {
        Self {
            name: "opensandbox".into(),
            release_name: None,
            namespace: None,
            target_namespace: None,
            interval: "30m".into(),
            timeout: None,
            install: None,
            upgrade: None,
            drift_detection: None,
            values_config_map: "opensandbox-values".into(),
        }
    }
}

/// Install or upgrade strategy.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActionStrategy {
    /// Strategy name.
    pub strategy: StrategyName,
    /// Retry interval (only with `RetryOnFailure`).
    #[serde(default)]
    pub retry_interval: Option<String>,
}

/// helm-controller remediation strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum StrategyName {
    /// Remediate (rollback/uninstall) on failure.
    RemediateOnFailure,
    /// Retry the action after `retryInterval` (Flux ≥ 2.7).
    RetryOnFailure,
}

/// helm-controller drift detection mode.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DriftDetection {
    /// Detect and correct drift.
    Enabled,
    /// Detect and report drift.
    Warn,
    /// Off.
    Disabled,
}
