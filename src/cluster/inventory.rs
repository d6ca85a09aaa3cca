//! What osbx applied to a cluster, kept in the cluster (a ConfigMap in the Flux namespace, one
//! per profile and cluster), so that `--prune` deletes exactly the objects osbx created and no
//! longer renders, and never anything else.

use std::collections::BTreeMap;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::operation::{Objects, Operation};
use super::{Cluster, ClusterError};
use crate::mark::{self, FIELD_MANAGER};
use crate::object::{KnownKind, ObjectRef};

const KEY: &str = "inventory.json";

/// One inventory entry as stored: the object's identity and whether osbx created it.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    #[serde(flatten)]
    id: ObjectRef,
    created: bool,
}

/// How often a write retries after another writer changed the inventory in between.
const ATTEMPTS: usize = 8;

/// The inventory of one profile on one cluster.
#[derive(Debug, Clone)]
pub(crate) struct Inventory {
    /// Its ConfigMap.
    pub config_map: ObjectRef,
    /// Every object osbx applied, and whether osbx created it (only such objects are ever
    /// pruned).
    pub entries: BTreeMap<ObjectRef, bool>,
    /// The ConfigMap's `resourceVersion` as last read or written (`None`: it did not exist).
    resource_version: Option<String>,
    /// What this run changed, in order (`Some(created)`: recorded, `None`: forgotten): replayed
    /// onto the newer inventory when another writer changed it in between.
    changes: Vec<(ObjectRef, Option<bool>)>,
}

/// Two inventories are equal when they list the same objects the same way.
impl PartialEq for Inventory {
    fn eq(&self, other: &Self) -> bool {
        self.config_map == other.config_map && self.entries == other.entries
    }
}

impl Eq for Inventory {}

impl Inventory {
    /// The inventory ConfigMap of a profile on a cluster: `osbx-inventory-<profile>-<cluster>` in
    /// `namespace`.
    #[must_use]
    pub(crate) fn config_map(namespace: &str, profile: &str, cluster: &str) -> ObjectRef {
        let mut name = format!("osbx-inventory-{profile}-{cluster}");
        name.truncate(253);
        KnownKind::CONFIG_MAP.object(Some(namespace), &name)
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

    fn api_error(&self) -> impl FnOnce(kube::Error) -> ClusterError + '_ {
        move |source| ClusterError::Api { subject: self.config_map.to_string(), error: source }
    }

    /// Read the inventory (empty when the ConfigMap does not exist).
    ///
    /// # Errors
    /// [`ClusterError::Api`] when the read fails.
    pub(crate) async fn load(cluster: &Cluster, config_map: ObjectRef) -> Result<Self, ClusterError> {
        let mut inventory = Self { config_map, entries: BTreeMap::new(), resource_version: None, changes: Vec::new() };
        inventory.reload(cluster).await?;
        Ok(inventory)
    }

    /// Read the ConfigMap again (entries and `resourceVersion`), then replay this run's changes.
    async fn reload(&mut self, cluster: &Cluster) -> Result<(), ClusterError> {
        let cm = Self::api(cluster, self.namespace()).get_opt(&self.config_map.name).await.map_err(self.api_error())?;
        self.resource_version = cm.as_ref().and_then(|cm| cm.metadata.resource_version.clone());
        let stored: Vec<Entry> = cm
            .and_then(|cm| cm.data.get("data").and_then(|d| d.get(KEY)).and_then(Value::as_str).map(str::to_owned))
            .map(|text| serde_json::from_str(&text).unwrap_or_default())
            .unwrap_or_default();
        self.entries = stored.into_iter().map(|e| (e.id, e.created)).collect();
        for (id, change) in &self.changes {
            match change {
                Some(created) => *self.entries.entry(id.clone()).or_default() |= created,
                None => {
                    self.entries.remove(id);
                }
            }
        }
        Ok(())
    }

    /// Record an applied object; an object osbx ever created stays marked as created.
    pub(crate) fn record(&mut self, id: &ObjectRef, created: bool) {
        *self.entries.entry(id.clone()).or_default() |= created;
        self.changes.push((id.clone(), Some(created)));
    }

    /// Forget an object (after it was pruned).
    pub(crate) fn forget(&mut self, id: &ObjectRef) {
        self.entries.remove(id);
        self.changes.push((id.clone(), None));
    }

    /// Entries osbx created that are not in `current`, in reverse apply order (for deletion).
    #[must_use]
    pub(crate) fn stale(&self, current: &[ObjectRef]) -> Vec<ObjectRef> {
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

    /// Write the inventory with optimistic concurrency: created when it did not exist (which
    /// fails if another apply created it meanwhile), else applied with the `resourceVersion`
    /// last seen as a precondition. When another writer got there first, the inventory is read
    /// again, this run's changes are replayed onto it, and the write is retried, so no writer's
    /// entries are lost.
    ///
    /// # Errors
    /// [`ClusterError::Api`] when a write fails, or [`ClusterError::Contended`] when the
    /// inventory kept changing under this run.
    pub(crate) async fn write(&mut self, cluster: &Cluster) -> Result<(), ClusterError> {
        for attempt in 0..ATTEMPTS {
            match self.try_write(cluster).await {
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    // Conflict (changed) or AlreadyExists (created meanwhile): read, replay, retry.
                    if attempt > 0 {
                        tokio::time::sleep(std::time::Duration::from_millis(20 << attempt.min(5))).await;
                    }
                    self.reload(cluster).await?;
                }
                other => return other.map_err(self.api_error()),
            }
        }
        Err(ClusterError::Contended { subject: self.config_map.to_string(), attempts: ATTEMPTS })
    }

    async fn try_write(&mut self, cluster: &Cluster) -> Result<(), kube::Error> {
        let mut entries: Vec<Entry> =
            self.entries.iter().map(|(id, created)| Entry { id: id.clone(), created: *created }).collect();
        // Stored sorted by subject (the order readers have always seen).
        entries.sort_by_cached_key(|e| e.id.to_string());
        let mut cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": self.config_map.name, "namespace": self.namespace(),
                         "labels": mark::owned_labels()},
            "data": {KEY: serde_json::to_string(&entries).unwrap_or_default()},
        });
        let api = Self::api(cluster, self.namespace());
        let stored = match &self.resource_version {
            None => {
                let cm: DynamicObject = serde_json::from_value(cm).map_err(kube::Error::SerdeError)?;
                api.create(&PostParams { field_manager: Some(FIELD_MANAGER.into()), ..PostParams::default() }, &cm)
                    .await?
            }
            Some(version) => {
                cm["metadata"]["resourceVersion"] = json!(version);
                api.patch(&self.config_map.name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&cm)).await?
            }
        };
        self.resource_version = stored.metadata.resource_version;
        Ok(())
    }
}

/// What the inventory does, planned next to the calls above.
impl Inventory {
    /// Reading it ([`Inventory::load`]).
    #[must_use]
    pub(crate) fn reading(config_map: &ObjectRef) -> Operation {
        Operation::Get(Objects::Named(config_map.clone()))
    }

    /// Writing it ([`Inventory::write`]): created when it does not exist, patched when it does
    /// (after a conflict it is read again: [`Self::reading`]).
    #[must_use]
    pub(crate) fn writing(config_map: &ObjectRef) -> Operation {
        Operation::Apply { object: config_map.clone(), creates: true }
    }
}
