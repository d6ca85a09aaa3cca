//! Kind → API resource resolution: one aggregated discovery per run, refreshed on demand (after
//! CRDs are created), never caching a negative answer across a refresh.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::{Discovery, Scope};
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

/// A discovery result, when it was taken, and the kinds resolved from it so far (kube's
/// `Discovery::resolve_gvk` walks and copies every group's resource list per call: memoized,
/// a 200-object apply resolves each kind once instead of about a thousand times).
struct Snapshot {
    discovery: Arc<Discovery>,
    at: Instant,
    resolved: std::sync::Mutex<HashMap<GroupVersionKind, Option<(ApiResource, Scope)>>>,
}

impl Snapshot {
    fn resolve(&self, gvk: &GroupVersionKind) -> Option<(ApiResource, Scope)> {
        let mut memo = self.resolved.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        memo.entry(gvk.clone())
            .or_insert_with(|| self.discovery.resolve_gvk(gvk).map(|(ar, caps)| (ar, caps.scope)))
            .clone()
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
        let d = Discovery::new(self.client.clone())
            .run_aggregated()
            .await
            .map_err(|source| ClusterError::Api { subject: "discovery".into(), error: source })?;
        *self.discovery.write().await =
            Some(Snapshot { discovery: Arc::new(d), at: Instant::now(), resolved: std::sync::Mutex::default() });
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
