//! Kind → API resource resolution: one aggregated discovery per run, refreshed on demand (after
//! CRDs are created), never caching a negative answer across a refresh.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::{Discovery, Scope};
use tokio::sync::RwLock;

use crate::object::ObjectRef;

use super::ClusterError;

/// Resolves kinds to API resources.
#[derive(Clone)]
pub struct Resolver {
    client: Client,
    discovery: Arc<RwLock<Option<Snapshot>>>,
}

/// A discovery result and when it was taken.
type Snapshot = (Arc<Discovery>, Instant);

/// A miss triggers a new discovery only if the last one is older than this.
const MISS_REFRESH_AFTER: Duration = Duration::from_millis(500);

impl Resolver {
    pub(super) fn new(client: Client) -> Self {
        Self { client, discovery: Arc::new(RwLock::new(None)) }
    }

    async fn current(&self) -> Result<Arc<Discovery>, ClusterError> {
        if let Some((d, _)) = self.discovery.read().await.as_ref() {
            return Ok(d.clone());
        }
        self.refresh().await
    }

    /// Run discovery again (after CRDs were created or became established).
    ///
    /// # Errors
    /// [`ClusterError::Api`] when discovery fails.
    pub async fn refresh(&self) -> Result<Arc<Discovery>, ClusterError> {
        let d = Discovery::new(self.client.clone())
            .run_aggregated()
            .await
            .map_err(|source| ClusterError::Api { subject: "discovery".into(), source })?;
        let d = Arc::new(d);
        *self.discovery.write().await = Some((d.clone(), Instant::now()));
        Ok(d)
    }

    /// The resource and scope serving `r`'s kind, or `None` when the cluster does not serve it.
    ///
    /// # Errors
    /// [`ClusterError::Api`] when discovery fails.
    pub async fn resolve(&self, r: &ObjectRef) -> Result<Option<(ApiResource, Scope)>, ClusterError> {
        self.resolve_gvk(&GroupVersionKind::gvk(&r.group, &r.version, &r.kind)).await
    }

    /// Resolve a kind; a miss refreshes discovery (at most every 500 ms) before answering `None`,
    /// so a kind whose CRD appeared since the last discovery is found.
    async fn resolve_gvk(&self, gvk: &GroupVersionKind) -> Result<Option<(ApiResource, Scope)>, ClusterError> {
        if let Some(found) = self.current().await?.resolve_gvk(gvk) {
            return Ok(Some((found.0, found.1.scope)));
        }
        let stale = self.discovery.read().await.as_ref().is_none_or(|(_, at)| at.elapsed() > MISS_REFRESH_AFTER);
        if !stale {
            return Ok(None);
        }
        Ok(self.refresh().await?.resolve_gvk(gvk).map(|(ar, caps)| (ar, caps.scope)))
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
    pub async fn serves(&self, group: &str, version: &str, kind: &str) -> Result<bool, ClusterError> {
        Ok(self.resolve_gvk(&GroupVersionKind::gvk(group, version, kind)).await?.is_some())
    }
}
