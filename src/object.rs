//! Object identity and apply order.
//!
//! [`Gvk`] names a kind; [`ObjectRef`] names an object as `Kind/namespace/name` (the subject of
//! every message) and orders objects the way they must be applied: cluster definitions first
//! (CRDs, Namespaces, ClusterRoles), then class kinds, then service accounts, RBAC, config,
//! workloads, and webhooks last. Deletes use the reverse order. [`Object`] is a rendered object
//! with its identity, computed once and carried from the render to the report.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A kind at an API version.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Gvk {
    /// API group (`""` for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind name (`Deployment`).
    pub kind: String,
}

impl Gvk {
    /// A kind from its parts.
    #[must_use]
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        Self { group: group.to_owned(), version: version.to_owned(), kind: kind.to_owned() }
    }

    /// The kind of an object given as JSON.
    ///
    /// # Errors
    /// [`NotAnObject`] when `apiVersion` or `kind` is missing.
    pub fn of(obj: &Value) -> Result<Self, NotAnObject> {
        let api_version = obj["apiVersion"].as_str().ok_or(NotAnObject("missing apiVersion"))?;
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        Ok(Self::new(group, version, obj["kind"].as_str().ok_or(NotAnObject("missing kind"))?))
    }

    /// `group/version`, or `version` for the core group.
    #[must_use]
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The apply stage of this kind.
    #[must_use]
    pub fn stage(&self) -> Stage {
        Stage::of(&self.group, &self.kind)
    }

    /// An object of this kind.
    #[must_use]
    pub fn object(&self, namespace: Option<&str>, name: &str) -> ObjectRef {
        ObjectRef { gvk: self.clone(), namespace: namespace.map(str::to_owned), name: name.to_owned() }
    }
}

impl fmt::Display for Gvk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.api_version(), self.kind)
    }
}

/// A kind osbx knows when it is built: a [`Gvk`] usable in a `const`. The Kubernetes kinds osbx
/// reads or creates are here; a component's own kinds are its module's (the Pool is `pools`').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownKind {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// API version.
    pub version: &'static str,
    /// Kind name (`Pod`).
    pub kind: &'static str,
}

impl KnownKind {
    /// `v1` ConfigMap.
    pub const CONFIG_MAP: Self = Self::core("ConfigMap");
    /// `v1` Event.
    pub const EVENT: Self = Self::core("Event");
    /// `v1` Namespace.
    pub const NAMESPACE: Self = Self::core("Namespace");
    /// `v1` Node.
    pub const NODE: Self = Self::core("Node");
    /// `v1` Pod.
    pub const POD: Self = Self::core("Pod");
    /// `v1` Secret.
    pub const SECRET: Self = Self::core("Secret");
    /// `v1` Service.
    pub const SERVICE: Self = Self::core("Service");
    /// `v1` ServiceAccount.
    pub const SERVICE_ACCOUNT: Self = Self::core("ServiceAccount");
    /// `apps/v1` Deployment.
    pub const DEPLOYMENT: Self = Self::new("apps", "v1", "Deployment");
    /// `node.k8s.io/v1` RuntimeClass.
    pub const RUNTIME_CLASS: Self = Self::new("node.k8s.io", "v1", "RuntimeClass");
    /// `authorization.k8s.io/v1` SelfSubjectAccessReview.
    pub const ACCESS_REVIEW: Self = Self::new("authorization.k8s.io", "v1", "SelfSubjectAccessReview");

    /// A kind from its parts.
    #[must_use]
    pub const fn new(group: &'static str, version: &'static str, kind: &'static str) -> Self {
        Self { group, version, kind }
    }

    const fn core(kind: &'static str) -> Self {
        Self::new("", "v1", kind)
    }

    /// As a [`Gvk`].
    #[must_use]
    pub fn gvk(self) -> Gvk {
        Gvk::new(self.group, self.version, self.kind)
    }

    /// An object of this kind.
    #[must_use]
    pub fn object(self, namespace: Option<&str>, name: &str) -> ObjectRef {
        self.gvk().object(namespace, name)
    }

    /// Whether `gvk` is this kind, at any version.
    #[must_use]
    pub fn is(self, gvk: &Gvk) -> bool {
        gvk.group == self.group && gvk.kind == self.kind
    }
}

/// Identity of one Kubernetes object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ObjectRef {
    /// Its kind.
    #[serde(flatten)]
    pub gvk: Gvk,
    /// Namespace (`None` for cluster-scoped objects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Object name (`metadata.name`).
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
        Ok(Self {
            gvk: Gvk::of(obj)?,
            namespace: obj["metadata"]["namespace"].as_str().map(str::to_owned),
            name: obj["metadata"]["name"].as_str().ok_or(NotAnObject("missing metadata.name"))?.to_owned(),
        })
    }

    /// Its kind's name.
    #[must_use]
    pub fn kind(&self) -> &str {
        &self.gvk.kind
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{ns}/{}", self.gvk.kind, self.name),
            None => write!(f, "{}/{}", self.gvk.kind, self.name),
        }
    }
}

/// A Kubernetes object and its identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// Its identity.
    pub id: ObjectRef,
    /// The object.
    pub value: Value,
}

impl Object {
    /// An object given as JSON, with its identity.
    ///
    /// # Errors
    /// [`NotAnObject`] when `apiVersion`, `kind` or `metadata.name` is missing.
    pub fn new(value: Value) -> Result<Self, NotAnObject> {
        Ok(Self { id: ObjectRef::of(&value)?, value })
    }

    /// The images this object makes a node pull, each with the container that names it:
    /// wherever its pod templates are (a Pod, a workload, a CronJob, a custom resource such as
    /// a Pool), and in a ConfigMap the pod templates a controller creates pods from
    /// (kata-deploy's dispatcher reads its per-node Jobs from one): every value that is YAML
    /// with containers in it, named `NAME (of the template in KEY)`. Secrets and CRDs hold none.
    #[must_use]
    pub(crate) fn images(&self) -> Vec<(String, String)> {
        let mut found = Vec::new();
        match self.id.gvk.kind.as_str() {
            "Secret" | "CustomResourceDefinition" => {}
            "ConfigMap" => {
                for (key, text) in self.value["data"].as_object().into_iter().flatten() {
                    let Some(text) = text.as_str().filter(|t| t.contains("containers")) else { continue };
                    let Ok(docs) = serde_saphyr::from_multiple::<Value>(text) else { continue };
                    let mut inner = Vec::new();
                    for doc in &docs {
                        pod_containers(doc, &mut inner);
                    }
                    found
                        .extend(inner.into_iter().map(|(c, image)| (format!("{c} (of the template in {key})"), image)));
                }
            }
            _ => pod_containers(&self.value, &mut found),
        }
        found
    }
}

/// Every `(container name, image)` under `value`: the entries with an `image` of each
/// `initContainers`, `containers` and `ephemeralContainers` list at any depth.
fn pod_containers(value: &Value, out: &mut Vec<(String, String)>) {
    const LISTS: [&str; 3] = ["initContainers", "containers", "ephemeralContainers"];
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                if LISTS.contains(&key.as_str())
                    && let Value::Array(list) = v
                {
                    for c in list {
                        if let Some(image) = c["image"].as_str() {
                            out.push((c["name"].as_str().unwrap_or_default().to_owned(), image.to_owned()));
                        }
                    }
                } else {
                    pod_containers(v, out);
                }
            }
        }
        Value::Array(list) => list.iter().for_each(|v| pod_containers(v, out)),
        _ => {}
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
        fn key(r: &ObjectRef) -> (usize, &str, &str, Option<&str>, &str, &str) {
            (kind_rank(&r.gvk.kind), &r.gvk.group, &r.gvk.kind, r.namespace.as_deref(), &r.name, &r.gvk.version)
        }
        key(self).cmp(&key(other))
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
