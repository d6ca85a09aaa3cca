//! What `osbx status --watch` waits on: API watches (not polls) on the kinds the overview reads
//! (the layers' Kustomizations, the HelmReleases' namespaces, the Pools, the Nodes), each
//! resumed from its last resourceVersion when the server ends it, plus a slow tick for the
//! server's `/health`, which no object reports.

use std::time::Duration;

use futures::StreamExt as _;
use kube::api::{Api, DynamicObject, ListParams, WatchEvent, WatchParams};
use tokio::sync::mpsc;

use crate::cluster::{Cluster, ClusterError};
use crate::components::pools;
use crate::object::{Gvk, KnownKind};
use crate::profile::Profile;

/// How often the server's health is read again without an object changing.
const HEALTH_EVERY: Duration = Duration::from_secs(10);

/// A change arrives on it; dropping it stops the watches.
pub(crate) struct Changes {
    rx: mpsc::Receiver<()>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Changes {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Changes {
    /// Wait for the next change (changes within 100 ms of each other count as one); `false` when
    /// every watch has ended.
    pub(crate) async fn next_change(&mut self) -> bool {
        if self.rx.recv().await.is_none() {
            return false;
        }
        let settle = tokio::time::sleep(Duration::from_millis(100));
        tokio::pin!(settle);
        loop {
            tokio::select! {
                () = &mut settle => return true,
                more = self.rx.recv() => if more.is_none() { return true },
            }
        }
    }
}

/// Start watching what the overview of `profile` reads.
///
/// # Errors
/// [`ClusterError`] when a kind cannot be resolved.
pub(crate) async fn watch(cluster: &Cluster, profile: &Profile) -> Result<Changes, ClusterError> {
    let os = &profile.sections.opensandbox;
    let mut kinds: Vec<(Gvk, Option<String>)> = vec![
        (KnownKind::FLUX_KUSTOMIZATION.gvk(), Some(profile.cluster.flux_namespace.clone())),
        (Gvk::new("helm.toolkit.fluxcd.io", "v2", "HelmRelease"), Some(os.release_namespace().to_owned())),
        (KnownKind::NODE.gvk(), None),
    ];
    if !profile.sections.pools.items.is_empty() {
        kinds.push((pools::POOL.gvk(), Some(os.namespaces.sandbox.clone())));
    }
    let (tx, rx) = mpsc::channel(64);
    let mut tasks = Vec::new();
    for (kind, ns) in kinds {
        let Some((ar, scope)) = cluster.resolver.resolve(&kind.object(ns.as_deref(), "")).await? else { continue };
        let api: Api<DynamicObject> = match (scope, ns.as_deref()) {
            (kube::discovery::Scope::Namespaced, Some(ns)) => Api::namespaced_with(cluster.client.clone(), ns, &ar),
            _ => Api::all_with(cluster.client.clone(), &ar),
        };
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                // Start from now: the first read of the overview saw what was there.
                let Ok(list) = api.list_metadata(&ListParams::default().limit(1)).await else {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                };
                let mut version = list.metadata.resource_version.unwrap_or_default();
                loop {
                    let Ok(stream) = api.watch(&WatchParams::default().timeout(290), &version).await else { break };
                    let mut stream = stream.boxed();
                    let mut gone = false;
                    while let Some(event) = stream.next().await {
                        match event {
                            Ok(WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o)) => {
                                version = o.metadata.resource_version.unwrap_or(version);
                                if tx.send(()).await.is_err() {
                                    return;
                                }
                            }
                            Ok(WatchEvent::Bookmark(b)) => version = b.metadata.resource_version,
                            // 410 Gone and the like: list again.
                            Ok(WatchEvent::Error(_)) | Err(_) => {
                                gone = true;
                                break;
                            }
                        }
                    }
                    if gone {
                        break;
                    }
                }
            }
        }));
    }
    tasks.push(tokio::spawn(async move {
        loop {
            tokio::time::sleep(HEALTH_EVERY).await;
            if tx.send(()).await.is_err() {
                return;
            }
        }
    }));
    Ok(Changes { rx, tasks })
}
