//! What osbx applied to a cluster, kept in the cluster (a ConfigMap in the Flux namespace, one
//! per profile and cluster), so that `--prune` deletes exactly the objects osbx created and no
//! longer renders, and never anything else.

use std::collections::BTreeMap;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::ssa::FIELD_MANAGER;
use super::{Cluster, ClusterError};
use crate::object::{Gvk, ObjectRef};

const KEY: &str = "inventory.json";

/// One inventory entry as stored: the object's identity and whether osbx created it.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    #[serde(flatten)]
    id: ObjectRef,
    created: bool,
}

/// The inventory of one profile on one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inventory {
    /// Its ConfigMap.
    pub config_map: ObjectRef,
    /// Every object osbx applied, and whether osbx created it (only such objects are ever
    /// pruned).
    pub entries: BTreeMap<ObjectRef, bool>,
}

impl Inventory {
    /// The inventory ConfigMap of a profile on a cluster: `osbx-inventory-<profile>-<cluster>` in
    /// `namespace`.
    #[must_use]
    pub fn config_map(namespace: &str, profile: &str, cluster: &str) -> ObjectRef {
        let mut name = format!("osbx-inventory-{profile}-{cluster}");
        name.truncate(253);
        Gvk::new("", "v1", "ConfigMap").object(Some(namespace), &name)
    }

    fn api(cluster: &Cluster, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            cluster.client.clone(),
            namespace,
            &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        )
    }

    fn namespace(&self) -> &str {
        self.config_map.namespace.as_deref().unwrap_or_default()
    }

    /// Read the inventory (empty when the ConfigMap does not exist).
    ///
    /// # Errors
    /// [`ClusterError::Api`] when the read fails.
    pub async fn load(cluster: &Cluster, config_map: ObjectRef) -> Result<Self, ClusterError> {
        let mut inventory = Self { config_map, entries: BTreeMap::new() };
        let cm = Self::api(cluster, inventory.namespace())
            .get_opt(&inventory.config_map.name)
            .await
            .map_err(|source| ClusterError::Api { subject: inventory.config_map.to_string(), source })?;
        let stored: Vec<Entry> = cm
            .and_then(|cm| cm.data.get("data").and_then(|d| d.get(KEY)).and_then(Value::as_str).map(str::to_owned))
            .map(|text| serde_json::from_str(&text).unwrap_or_default())
            .unwrap_or_default();
        inventory.entries = stored.into_iter().map(|e| (e.id, e.created)).collect();
        Ok(inventory)
    }

    /// Record an applied object; an object osbx ever created stays marked as created.
    pub fn record(&mut self, id: &ObjectRef, created: bool) {
        *self.entries.entry(id.clone()).or_default() |= created;
    }

    /// Forget an object (after it was pruned).
    pub fn forget(&mut self, id: &ObjectRef) {
        self.entries.remove(id);
    }

    /// Entries osbx created that are not in `current`, in reverse apply order (for deletion).
    #[must_use]
    pub fn stale(&self, current: &[ObjectRef]) -> Vec<ObjectRef> {
        let mut stale: Vec<ObjectRef> = self
            .entries
            .iter()
            .filter(|(id, created)| **created && !current.contains(id))
            .map(|(id, _)| id.clone())
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
        let mut entries: Vec<Entry> =
            self.entries.iter().map(|(id, created)| Entry { id: id.clone(), created: *created }).collect();
        // Stored sorted by subject (the order readers have always seen).
        entries.sort_by_cached_key(|e| e.id.to_string());
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": self.config_map.name, "namespace": self.namespace(),
                         "labels": {"app.kubernetes.io/managed-by": "osbx"}},
            "data": {KEY: serde_json::to_string(&entries).unwrap_or_default()},
        });
        Self::api(cluster, self.namespace())
            .patch(&self.config_map.name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&cm))
            .await
            .map_err(|source| ClusterError::Api { subject: self.config_map.to_string(), source })?;
        Ok(())
    }
}
