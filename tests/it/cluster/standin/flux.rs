//! A healthy Flux (every object Ready at its generation, or a stale Ready) and the CRDs a release's
//! chart installs, for the fast tests that run without the real controllers. A failing release
//! is not modelled: the real helm-controller's is in `tests/it/e2e/chart_failure.rs` (the
//! stand-in's guess at it missed the `Reconciling=ProgressingWithRetry` condition that the real
//! one writes).

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::json;

use super::*;

/// A Ready condition as a Flux controller writes it.
pub struct Ready<'a> {
    /// Condition status.
    pub status: bool,
    /// Reason (`ReconciliationSucceeded`, `InstallFailed`, …).
    pub reason: &'a str,
    /// Message.
    pub message: &'a str,
    /// The generation the controller claims to have seen; `None` = current (pass an older one to
    /// model a stale Ready).
    pub observed: Option<i64>,
}

/// Set a Flux object's Ready condition and `observedGeneration` as its controller would.
pub async fn flux_ready(client: &Client, ar: &ApiResource, ns: &str, name: &str, cond: &Ready<'_>) -> DynamicObject {
    let (ready, reason, message) = (cond.status, cond.reason, cond.message);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
    let obj = api.get(name).await.expect("get flux object");
    let generation = cond.observed.or(obj.metadata.generation).unwrap_or(1);
    let status = json!({"status": {
        "observedGeneration": generation,
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }, "reason": reason,
                        "message": message, "lastTransitionTime": NOW, "observedGeneration": generation}],
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("flux status")
}

/// How the stand-in controllers behave.
#[derive(Clone, Default)]
pub struct Controllers {
    /// Namespaces whose Flux objects the stand-in reconciles.
    pub flux_namespaces: Vec<String>,
    /// Namespaces whose Pools the stand-in fills.
    pub pool_namespaces: Vec<String>,
    /// Flux objects keep reporting the previous generation (a stale Ready).
    pub stale: bool,
    /// Never touch Pools (a Pool with no capacity).
    pub pools_stay_empty: bool,
    /// Install `../shared/crds/<dir>` once the HelmRelease `<name>` is Ready (what its chart does).
    pub release_crds: Vec<(String, String)>,
    /// Flux objects (`Kind/name`) left without status, for the test to set Ready itself.
    pub hold: Vec<String>,
}

const FLUX_KINDS: &[(&str, &str, &str)] = &[
    ("source.toolkit.fluxcd.io", "v1", "GitRepository"),
    ("source.toolkit.fluxcd.io", "v1", "OCIRepository"),
    ("source.toolkit.fluxcd.io", "v1", "HelmRepository"),
    ("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
    ("helm.toolkit.fluxcd.io", "v2", "HelmRelease"),
];

impl Controllers {
    /// Run the controllers until the returned handle is dropped or aborted.
    pub fn spawn(self, client: Client) -> AbortOnDrop {
        AbortOnDrop(tokio::spawn(async move {
            loop {
                self.reconcile(&client).await;
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }))
    }

    async fn reconcile(&self, client: &Client) {
        for (group, version, kind) in FLUX_KINDS {
            let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
            let Ok((ar, _)) = kube::discovery::pinned_kind(client, &gvk).await else { continue };
            for ns in &self.flux_namespaces {
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
                let Ok(list) = api.list(&ListParams::default()).await else { continue };
                for obj in list {
                    let v = serde_json::to_value(&obj).unwrap();
                    let generation = v["metadata"]["generation"].as_i64().unwrap_or(1);
                    let name = obj.metadata.name.clone().unwrap_or_default();
                    if self.hold.contains(&format!("{kind}/{name}")) {
                        continue;
                    }
                    let reason = if *kind == "HelmRelease" { "InstallSucceeded" } else { "Succeeded" };
                    let observed = if self.stale { generation - 1 } else { generation };
                    let current = v["status"]["observedGeneration"].as_i64() == Some(observed)
                        && v["status"]["conditions"][0]["reason"] == reason;
                    // Helm creates a chart's CRDs before its release is Ready (a waiter that sees
                    // the release Ready finds them served).
                    if *kind == "HelmRelease" {
                        for (release, dir) in &self.release_crds {
                            if *release == name {
                                crate::cluster::install_crds(client, dir).await;
                            }
                        }
                    }
                    if !current {
                        let message = "reconciled by the stand-in";
                        let cond = Ready { status: true, reason, message, observed: Some(observed) };
                        flux_ready(client, &ar, ns, &name, &cond).await;
                    }
                }
            }
        }
        if !self.pools_stay_empty {
            self.fill_pools(client).await;
        }
    }

    async fn fill_pools(&self, client: &Client) {
        let gvk = kube::core::GroupVersionKind::gvk("sandbox.opensandbox.io", "v1alpha1", "Pool");
        let Ok((ar, _)) = kube::discovery::pinned_kind(client, &gvk).await else { return };
        for ns in &self.pool_namespaces {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
            let Ok(list) = api.list(&ListParams::default()).await else { continue };
            for obj in list {
                let v = serde_json::to_value(&obj).unwrap();
                let cap = &v["spec"]["capacitySpec"];
                let buffer = cap["bufferMin"].as_i64().unwrap_or(0).max(1).min(cap["bufferMax"].as_i64().unwrap_or(1));
                let total = cap["poolMin"].as_i64().unwrap_or(0).max(buffer);
                let generation = v["metadata"]["generation"].as_i64().unwrap_or(1);
                if v["status"]["observedGeneration"].as_i64() == Some(generation) {
                    continue;
                }
                let status = json!({"status": {"observedGeneration": generation, "total": total, "allocated": 0,
                                               "available": buffer, "revision": "standin"}});
                let name = obj.metadata.name.clone().unwrap_or_default();
                // The stand-in's next pass patches again; the tests read the status it reaches.
                let _ = api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await;
            }
        }
    }
}
