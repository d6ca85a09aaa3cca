//! What osbx applied to a cluster, kept in the cluster (a ConfigMap in the Flux namespace, one
//! per profile and cluster), so that `--prune` deletes exactly the objects osbx created and no
//! longer renders, and never anything else.

use std::collections::BTreeMap;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::apply::FIELD_MANAGER;
use super::{Cluster, ClusterError};
use crate::object::ObjectRef;

const KEY: &str = "inventory.json";

/// One inventory entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The object.
    #[serde(flatten)]
    pub object: ObjectRef,
    /// osbx created it (only such objects are ever pruned).
    pub created: bool,
}

/// The inventory of one profile on one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inventory {
    /// ConfigMap namespace.
    pub namespace: String,
    /// ConfigMap name.
    pub name: String,
    /// Entries by subject, sorted.
    pub entries: BTreeMap<String, Entry>,
}

impl Inventory {
    /// The ConfigMap name for a profile and cluster.
    #[must_use]
    pub fn name_for(profile: &str, cluster: &str) -> String {
        let mut name = format!("osbx-inventory-{profile}-{cluster}");
        name.truncate(253);
        name
    }

    /// The inventory's ConfigMap as an object (for access reviews).
    #[must_use]
    pub fn config_map(namespace: &str, name: &str) -> ObjectRef {
        ObjectRef {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some(namespace.to_owned()),
            name: name.to_owned(),
        }
    }

    fn api(cluster: &Cluster, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            cluster.client.clone(),
            namespace,
            &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        )
    }

    /// Read the inventory (empty when the ConfigMap does not exist).
    ///
    /// # Errors
    /// [`ClusterError::Api`] when the read fails or the ConfigMap is unreadable.
    pub async fn load(cluster: &Cluster, namespace: &str, name: &str) -> Result<Self, ClusterError> {
        let subject = format!("ConfigMap/{namespace}/{name}");
        let cm = Self::api(cluster, namespace)
            .get_opt(name)
            .await
            .map_err(|source| ClusterError::Api { subject: subject.clone(), source })?;
        let entries: Vec<Entry> = cm
            .and_then(|cm| cm.data.get("data").and_then(|d| d.get(KEY)).and_then(Value::as_str).map(str::to_owned))
            .map(|text| serde_json::from_str(&text).unwrap_or_default())
            .unwrap_or_default();
        Ok(Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            entries: entries.into_iter().map(|e| (e.object.to_string(), e)).collect(),
        })
    }

    /// Record applied objects; an object osbx ever created stays marked as created.
    pub fn record(&mut self, object: &ObjectRef, created: bool) {
        let key = object.to_string();
        let created = created || self.entries.get(&key).is_some_and(|e| e.created);
        self.entries.insert(key, Entry { object: object.clone(), created });
    }

    /// Forget an object (after it was pruned).
    pub fn forget(&mut self, object: &ObjectRef) {
        self.entries.remove(&object.to_string());
    }

    /// Entries osbx created that are not in `current`, in reverse apply order (for deletion).
    #[must_use]
    pub fn stale(&self, current: &[ObjectRef]) -> Vec<ObjectRef> {
        let mut stale: Vec<ObjectRef> = self
            .entries
            .values()
            .filter(|e| e.created && !current.contains(&e.object))
            .map(|e| e.object.clone())
            .collect();
        stale.sort();
        stale.reverse();
        stale
    }

    /// Write the inventory (server-side apply, manager `osbx`).
    ///
    /// # Errors
    /// [`ClusterError::Api`] when the write fails.
    pub async fn write(&self, cluster: &Cluster) -> Result<(), ClusterError> {
        let entries: Vec<&Entry> = self.entries.values().collect();
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": self.name, "namespace": self.namespace,
                         "labels": {"app.kubernetes.io/managed-by": "osbx"}},
            "data": {KEY: serde_json::to_string(&entries).unwrap_or_default()},
        });
        Self::api(cluster, &self.namespace)
            .patch(&self.name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&cm))
            .await
            .map_err(|source| ClusterError::Api {
                subject: format!("ConfigMap/{}/{}", self.namespace, self.name),
                source,
            })?;
        Ok(())
    }
}

/// Whether the field manager `osbx` owns fields of a live object.
#[must_use]
pub fn managed_by_osbx(live: &Value) -> bool {
    live["metadata"]["managedFields"].as_array().is_some_and(|m| m.iter().any(|f| f["manager"] == FIELD_MANAGER))
}
