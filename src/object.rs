//! Object identity and apply order.
//!
//! [`ObjectRef`] names an object as `Kind/namespace/name` (the subject of every message) and
//! orders objects the way they must be applied: cluster definitions first (CRDs, Namespaces,
//! ClusterRoles), then class kinds, then service accounts, RBAC, config, workloads, and webhooks
//! last. Deletes use the reverse order.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Identity of one Kubernetes object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ObjectRef {
    /// API group (`""` for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Namespace (`None` for cluster-scoped objects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

/// Why a value is not a Kubernetes object.
#[derive(Debug, thiserror::Error)]
#[error("not a Kubernetes object: {0}")]
pub struct NotAnObject(pub &'static str);

impl ObjectRef {
    /// The identity of an object given as JSON.
    ///
    /// # Errors
    /// [`NotAnObject`] when `apiVersion`, `kind` or `metadata.name` is missing.
    pub fn of(obj: &Value) -> Result<Self, NotAnObject> {
        let api_version = obj["apiVersion"].as_str().ok_or(NotAnObject("missing apiVersion"))?;
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g.to_owned(), v.to_owned()),
            None => (String::new(), api_version.to_owned()),
        };
        Ok(Self {
            group,
            version,
            kind: obj["kind"].as_str().ok_or(NotAnObject("missing kind"))?.to_owned(),
            namespace: obj["metadata"]["namespace"].as_str().map(str::to_owned),
            name: obj["metadata"]["name"].as_str().ok_or(NotAnObject("missing metadata.name"))?.to_owned(),
        })
    }

    /// `group/version` or `version` for the core group.
    #[must_use]
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The apply stage of this object.
    #[must_use]
    pub fn stage(&self) -> Stage {
        Stage::of(&self.group, &self.kind)
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{ns}/{}", self.kind, self.name),
            None => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}

/// Apply stages: each is applied, then waited for, before the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// CRDs, Namespaces, ClusterRoles: everything else may need them.
    Definitions,
    /// Cluster-scoped `*Class` kinds (RuntimeClass, StorageClass, …).
    Classes,
    /// Everything else.
    Resources,
}

impl Stage {
    /// The stage of a kind.
    #[must_use]
    pub fn of(group: &str, kind: &str) -> Self {
        if group == "apiextensions.k8s.io" || kind == "Namespace" || kind == "ClusterRole" {
            Stage::Definitions
        } else if kind.ends_with("Class") {
            Stage::Classes
        } else {
            Stage::Resources
        }
    }
}

/// Kinds applied first, in this order (after Flux's `ssa` reconcile order).
const FIRST: &[&str] = &[
    "CustomResourceDefinition",
    "Namespace",
    "ClusterRole",
    "ClusterClass",
    "RuntimeClass",
    "PriorityClass",
    "StorageClass",
    "VolumeSnapshotClass",
    "IngressClass",
    "GatewayClass",
    "ClusterRoleBinding",
    "ResourceQuota",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ConfigMap",
    "Secret",
    "Service",
    "LimitRange",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
];

/// Kinds applied last.
const LAST: &[&str] = &["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"];

fn kind_rank(kind: &str) -> usize {
    if let Some(i) = FIRST.iter().position(|k| *k == kind) {
        i
    } else if let Some(i) = LAST.iter().position(|k| *k == kind) {
        FIRST.len() + 1 + i
    } else {
        FIRST.len()
    }
}

impl Ord for ObjectRef {
    fn cmp(&self, other: &Self) -> Ordering {
        (kind_rank(&self.kind), &self.group, &self.kind, &self.namespace, &self.name).cmp(&(
            kind_rank(&other.kind),
            &other.group,
            &other.kind,
            &other.namespace,
            &other.name,
        ))
    }
}

impl PartialOrd for ObjectRef {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn r(api: &str, kind: &str, ns: Option<&str>, name: &str) -> ObjectRef {
        let mut v = json!({"apiVersion": api, "kind": kind, "metadata": {"name": name}});
        if let Some(ns) = ns {
            v["metadata"]["namespace"] = json!(ns);
        }
        ObjectRef::of(&v).unwrap()
    }

    #[test]
    fn display_is_kind_namespace_name() {
        assert_eq!(r("v1", "Namespace", None, "a").to_string(), "Namespace/a");
        assert_eq!(r("sandbox.opensandbox.io/v1alpha1", "Pool", Some("ns"), "p").to_string(), "Pool/ns/p");
    }

    #[test]
    fn order_puts_definitions_first_and_webhooks_last() {
        let mut refs = [
            r("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", None, "w"),
            r("sandbox.opensandbox.io/v1alpha1", "Pool", Some("ns"), "b"),
            r("helm.toolkit.fluxcd.io/v2", "HelmRelease", Some("ns"), "h"),
            r("v1", "ConfigMap", Some("ns"), "c"),
            r("node.k8s.io/v1", "RuntimeClass", None, "kata"),
            r("v1", "Namespace", None, "ns"),
            r("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, "pools"),
            r("sandbox.opensandbox.io/v1alpha1", "Pool", Some("ns"), "a"),
        ];
        refs.sort();
        let names: Vec<String> = refs.iter().map(ToString::to_string).collect();
        assert_eq!(
            names,
            [
                "CustomResourceDefinition/pools",
                "Namespace/ns",
                "RuntimeClass/kata",
                "ConfigMap/ns/c",
                "HelmRelease/ns/h",
                "Pool/ns/a",
                "Pool/ns/b",
                "ValidatingWebhookConfiguration/w"
            ]
        );
    }

    #[test]
    fn stages() {
        assert_eq!(Stage::of("apiextensions.k8s.io", "CustomResourceDefinition"), Stage::Definitions);
        assert_eq!(Stage::of("", "Namespace"), Stage::Definitions);
        assert_eq!(Stage::of("node.k8s.io", "RuntimeClass"), Stage::Classes);
        assert_eq!(Stage::of("", "ConfigMap"), Stage::Resources);
    }
}
