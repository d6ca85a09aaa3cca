//! Kind → API resource resolution: one aggregated discovery per run, refreshed on demand (after
//! CRDs are created), never caching a negative answer across a refresh.
//!
//! Discovery is the two aggregated documents (`/api` for the core group, `/apis` for the others),
//! asked for at once and indexed by kind. kube's `Discovery::run_aggregated` asks for one after
//! the other and walks every group on each lookup; a no-op apply waits on discovery, so the two
//! requests share one round trip here.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::core::discovery::v2::APIGroupDiscoveryList;
use kube::discovery::Scope;
use tokio::sync::RwLock;

use crate::object::{Gvk, ObjectRef};

use super::ClusterError;

/// Resolves kinds to API resources.
#[derive(Clone)]
pub struct Resolver {
    client: Client,
    discovery: Arc<RwLock<Option<Snapshot>>>,
    refreshing: Arc<tokio::sync::Mutex<()>>,
}

/// A discovery result, indexed by kind, and when it was taken.
struct Snapshot {
    served: HashMap<GroupVersionKind, (ApiResource, Scope)>,
    at: Instant,
}

impl Snapshot {
    /// Every resource the discovery documents list, by its group, version and kind (the first
    /// resource of a kind in a version: subresources are listed apart and are not among them).
    fn of(lists: impl IntoIterator<Item = APIGroupDiscoveryList>) -> Self {
        let mut served = HashMap::new();
        for group in lists.into_iter().flat_map(|l| l.items) {
            let name = group.metadata.and_then(|m| m.name).unwrap_or_default();
            for version in group.versions {
                let Some(v) = version.version else { continue };
                let api_version = if name.is_empty() { v.clone() } else { format!("{name}/{v}") };
                for r in version.resources {
                    let (Some(plural), Some(kind)) = (r.resource, r.response_kind.and_then(|k| k.kind)) else {
                        continue;
                    };
                    let scope = if r.scope.as_deref() == Some("Cluster") { Scope::Cluster } else { Scope::Namespaced };
                    let resource = ApiResource {
                        group: name.clone(),
                        version: v.clone(),
                        api_version: api_version.clone(),
                        kind: kind.clone(),
                        plural,
                    };
                    served.entry(GroupVersionKind::gvk(&name, &v, &kind)).or_insert((resource, scope));
                }
            }
        }
        Snapshot { served, at: Instant::now() }
    }

    fn resolve(&self, gvk: &GroupVersionKind) -> Option<(ApiResource, Scope)> {
        self.served.get(gvk).cloned()
    }
}

/// A miss triggers a new discovery only if the last one is older than this.
const MISS_REFRESH_AFTER: Duration = Duration::from_millis(500);

impl Resolver {
    pub(super) fn new(client: Client) -> Self {
        Self { client, discovery: Arc::new(RwLock::new(None)), refreshing: Arc::default() }
    }

    /// Run discovery again (after CRDs were created or became established).
    ///
    /// # Errors
    /// [`ClusterError::Api`] when discovery fails.
    pub async fn refresh(&self) -> Result<(), ClusterError> {
        // Concurrent misses share one discovery: whoever waited for the lock while another
        // task refreshed uses that result.
        let asked = Instant::now();
        let _one = self.refreshing.lock().await;
        if self.discovery.read().await.as_ref().is_some_and(|s| s.at >= asked) {
            return Ok(());
        }
        let (groups, core) = futures::try_join!(
            self.client.list_api_groups_aggregated(),
            self.client.list_core_api_versions_aggregated()
        )
        .map_err(|source| ClusterError::Api { subject: "discovery".into(), error: source })?;
        *self.discovery.write().await = Some(Snapshot::of([core, groups]));
        Ok(())
    }

    /// The resource and scope serving `r`'s kind, or `None` when the cluster does not serve it.
    ///
    /// # Errors
    /// [`ClusterError::Api`] when discovery fails.
    pub async fn resolve(&self, id: &ObjectRef) -> Result<Option<(ApiResource, Scope)>, ClusterError> {
        self.resolve_gvk(&GroupVersionKind::gvk(&id.gvk.group, &id.gvk.version, &id.gvk.kind)).await
    }

    /// Resolve a kind; a miss refreshes discovery (at most every 500 ms) before answering `None`,
    /// so a kind whose CRD appeared since the last discovery is found.
    async fn resolve_gvk(&self, gvk: &GroupVersionKind) -> Result<Option<(ApiResource, Scope)>, ClusterError> {
        {
            let current = self.discovery.read().await;
            if let Some(snapshot) = current.as_ref() {
                if let Some(found) = snapshot.resolve(gvk) {
                    return Ok(Some(found));
                }
                if snapshot.at.elapsed() <= MISS_REFRESH_AFTER {
                    return Ok(None);
                }
            }
        }
        self.refresh().await?;
        Ok(self.discovery.read().await.as_ref().and_then(|s| s.resolve(gvk)))
    }

    /// A dynamic API for `r` (namespaced or cluster-wide by the kind's scope), or `None` when
    /// the kind is not served.
    ///
    /// # Errors
    /// [`ClusterError::Api`] when discovery fails.
    pub async fn api(&self, r: &ObjectRef) -> Result<Option<Api<DynamicObject>>, ClusterError> {
        Ok(self.resolve(r).await?.map(|(ar, scope)| match (scope, &r.namespace) {
            (Scope::Namespaced, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &ar),
            (Scope::Namespaced, None) => Api::default_namespaced_with(self.client.clone(), &ar),
            (Scope::Cluster, _) => Api::all_with(self.client.clone(), &ar),
        }))
    }

    /// Whether the cluster serves this group/version/kind.
    ///
    /// # Errors
    /// [`ClusterError::Api`] when discovery fails.
    pub async fn serves(&self, kind: &Gvk) -> Result<bool, ClusterError> {
        Ok(self.resolve_gvk(&GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind)).await?.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_is_indexed_by_kind() {
        let core: APIGroupDiscoveryList = serde_json::from_value(serde_json::json!({"items": [{"versions": [{
            "version": "v1",
            "resources": [
                {"resource": "namespaces", "responseKind": {"group": "", "version": "v1", "kind": "Namespace"}, "scope": "Cluster", "verbs": ["get"]},
                {"resource": "pods", "responseKind": {"group": "", "version": "v1", "kind": "Pod"}, "scope": "Namespaced", "verbs": ["get"],
                 "subresources": [{"subresource": "status", "responseKind": {"group": "", "version": "v1", "kind": "Pod"}}]},
            ]}]}]}))
        .unwrap();
        let groups: APIGroupDiscoveryList = serde_json::from_value(serde_json::json!({"items": [{
            "metadata": {"name": "sandbox.opensandbox.io"},
            "versions": [{"version": "v1alpha1", "resources": [
                {"resource": "pools", "responseKind": {"group": "sandbox.opensandbox.io", "version": "v1alpha1", "kind": "Pool"}, "scope": "Namespaced", "verbs": ["list"]},
            ]}]}]}))
        .unwrap();
        let s = Snapshot::of([core, groups]);
        let (pool, scope) = s.resolve(&GroupVersionKind::gvk("sandbox.opensandbox.io", "v1alpha1", "Pool")).unwrap();
        assert_eq!(
            (pool.plural.as_str(), pool.api_version.as_str(), scope),
            ("pools", "sandbox.opensandbox.io/v1alpha1", Scope::Namespaced)
        );
        let (ns, scope) = s.resolve(&GroupVersionKind::gvk("", "v1", "Namespace")).unwrap();
        assert_eq!((ns.plural.as_str(), ns.api_version.as_str(), scope), ("namespaces", "v1", Scope::Cluster));
        assert_eq!(s.resolve(&GroupVersionKind::gvk("", "v1", "Pod")).unwrap().0.plural, "pods");
        assert!(s.resolve(&GroupVersionKind::gvk("sandbox.opensandbox.io", "v1", "Pool")).is_none());
    }
}
