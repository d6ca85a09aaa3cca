//! What earlier runs left behind, swept before a run starts: probe namespaces of their own whose
//! run has expired, and their labelled pods and service accounts; in a namespace a run was given
//! (the acceptance layer's), the pods of runs whose pods have all expired.

use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams};

use super::probe::{EXPIRES, MANAGED_BY, RUN_LABEL, Run, delete_labelled, delete_pods, now};
use crate::cluster::Cluster;

/// What [`sweep`] removed, and the runs still live (the current one, and those whose probe
/// namespace, or one of whose pods, has not expired).
pub(crate) struct Swept {
    /// What was removed, for the user.
    pub(crate) removed: Vec<String>,
    /// Ids of the live runs.
    pub(crate) live_runs: std::collections::BTreeSet<String>,
}

/// When the object whose annotations are `annotations` may be swept (0: at once).
fn expires(annotations: Option<&std::collections::BTreeMap<String, String>>) -> u64 {
    annotations.and_then(|a| a.get(EXPIRES)).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

/// The runs of `pods` (those labelled with one) whose pods have all expired, and adds the runs
/// with a pod that has not to `live`.
fn expired_runs(pods: Vec<Pod>, live: &mut std::collections::BTreeSet<String>) -> std::collections::BTreeSet<String> {
    let mut over = std::collections::BTreeSet::new();
    for p in pods {
        let Some(run) = p.metadata.labels.as_ref().and_then(|l| l.get(RUN_LABEL)).cloned() else { continue };
        if expires(p.metadata.annotations.as_ref()) >= now() {
            live.insert(run);
        } else {
            over.insert(run);
        }
    }
    over.retain(|r| !live.contains(r));
    over
}

/// Delete what earlier runs left behind: probe namespaces of their own whose run has expired
/// (never a namespace a run was given, which carries no run's label), in a namespace the current
/// run was given the labelled pods of runs whose pods have all expired, and labelled pods and
/// service accounts in `extra_namespaces` whose run is no longer live (its probe namespace gone,
/// being deleted, or expired, and none of its pods there unexpired).
pub(crate) async fn sweep(cluster: &Cluster, current: &Run, extra_namespaces: &[String]) -> Swept {
    let mut swept = Vec::new();
    let mut live_runs = std::collections::BTreeSet::from([current.id.clone()]);
    let lp = ListParams::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1));
    if current.owns_namespace {
        let namespaces = Api::<Namespace>::all(cluster.client.clone());
        let runs = ListParams::default().labels(&format!("{}={},{RUN_LABEL}", MANAGED_BY.0, MANAGED_BY.1));
        for ns in namespaces.list(&runs).await.map(|l| l.items).unwrap_or_default() {
            let name = ns.metadata.name.clone().unwrap_or_default();
            let run = ns.metadata.labels.as_ref().and_then(|l| l.get(RUN_LABEL)).cloned().unwrap_or_default();
            if name == current.namespace {
                continue;
            }
            if expires(ns.metadata.annotations.as_ref()) >= now() && ns.metadata.deletion_timestamp.is_none() {
                live_runs.insert(run);
                continue;
            }
            delete_labelled(cluster, &name, &format!("{RUN_LABEL}={run}")).await;
            if ns.metadata.deletion_timestamp.is_none() {
                let _ = namespaces.delete(&name, &DeleteParams::default()).await;
                swept.push(name);
            }
        }
    } else {
        let pods = Api::<Pod>::namespaced(cluster.client.clone(), &current.namespace);
        let list = pods.list(&lp).await.map(|l| l.items).unwrap_or_default();
        for run in expired_runs(list, &mut live_runs) {
            delete_pods(cluster, &current.namespace, &format!("{RUN_LABEL}={run}")).await;
            swept.push(format!("{} (run {run})", current.namespace));
        }
    }
    for ns in extra_namespaces {
        let pods = Api::<Pod>::namespaced(cluster.client.clone(), ns);
        let accounts = Api::<ServiceAccount>::namespaced(cluster.client.clone(), ns);
        let mut live = live_runs.clone();
        let mut runs = expired_runs(pods.list(&lp).await.map(|l| l.items).unwrap_or_default(), &mut live);
        if let Ok(list) = accounts.list(&lp).await {
            runs.extend(list.into_iter().filter_map(|p| p.metadata.labels.and_then(|l| l.get(RUN_LABEL).cloned())));
        }
        for run in runs.difference(&live) {
            delete_labelled(cluster, ns, &format!("{RUN_LABEL}={run}")).await;
            swept.push(format!("{ns} (run {run})"));
        }
    }
    Swept { removed: swept, live_runs }
}
