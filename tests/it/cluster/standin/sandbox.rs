//! The OpenSandbox controller's part of a pooled sandbox.

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::*;

/// How the stand-in OpenSandbox controller treats pooled BatchSandboxes.
#[derive(Clone, Copy, Debug)]
pub struct SandboxBehaviour {
    /// Allocate a pool pod (else the sandbox never gets Running).
    pub allocate: bool,
    /// Release and drop the finalizer on delete (else the BatchSandbox is left behind).
    pub release: bool,
}

/// The OpenSandbox controller's part of a pooled sandbox, as the real one writes it: finalizer
/// and `alloc-status`, then `endpoints`, then status; on delete, the pod goes and the finalizer
/// is dropped.
pub struct SandboxController;

const ALLOC_FINALIZER: &str = "pool.sandbox.opensandbox.io/pool-allocation";

impl SandboxController {
    /// Run until the handle is dropped.
    pub fn spawn(
        client: Client,
        ns: String,
        node: String,
        behaviour: std::sync::Arc<std::sync::Mutex<SandboxBehaviour>>,
    ) -> AbortOnDrop {
        AbortOnDrop(tokio::spawn(async move {
            let gvk = kube::core::GroupVersionKind::gvk("sandbox.opensandbox.io", "v1alpha1", "BatchSandbox");
            let ar = loop {
                if let Ok((ar, _)) = kube::discovery::pinned_kind(&client, &gvk).await {
                    break ar;
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            };
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
            loop {
                let b = *behaviour.lock().unwrap();
                if let Ok(list) = api.list(&ListParams::default()).await {
                    for obj in list {
                        let v = serde_json::to_value(&obj).unwrap();
                        let _ = Self::step(&client, &api, &ns, &node, &v, b).await;
                    }
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }))
    }

    async fn step(
        client: &Client,
        api: &Api<DynamicObject>,
        ns: &str,
        node: &str,
        v: &Value,
        b: SandboxBehaviour,
    ) -> Option<()> {
        let name = v["metadata"]["name"].as_str()?.to_owned();
        let pool = v["spec"]["poolRef"].as_str()?.to_owned();
        let alloc = v["metadata"]["annotations"]["sandbox.opensandbox.io/alloc-status"].as_str().map(str::to_owned);
        if !v["metadata"]["deletionTimestamp"].is_null() {
            if b.release {
                if let Some(pods) = alloc.and_then(|a| serde_json::from_str::<Value>(&a).ok()) {
                    let pod_api: Api<Pod> = Api::namespaced(client.clone(), ns);
                    let now = kube::api::DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
                    for p in pods["pods"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                        let _ = pod_api.delete(p, &now).await;
                    }
                }
                let drop_finalizers = json!({"metadata": {"finalizers": null}});
                let _ = api.patch(&name, &PatchParams::default(), &Patch::Merge(&drop_finalizers)).await;
            }
            return Some(());
        }
        if alloc.is_some() || !b.allocate {
            return Some(());
        }
        let pod_name = format!("{pool}-{}", &name[..8.min(name.len())]);
        // A pod of the pool, as the controller's pool pods are: its template's runtime class.
        let pools = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &pool_resource());
        let class = pools.get(&pool).await.ok().and_then(|p| {
            serde_json::to_value(p).ok()?["spec"]["template"]["spec"]["runtimeClassName"].as_str().map(str::to_owned)
        });
        let pod: Pod = serde_json::from_value(
            json!({"metadata": {"name": pod_name, "labels": {"sandbox.opensandbox.io/pool-name": pool}},
            "spec": {"runtimeClassName": class, "containers": [{"name": "sandbox", "image": "example.com/sandbox:v1"}]}}),
        )
        .ok()?;
        let _ = Api::<Pod>::namespaced(client.clone(), ns).create(&PostParams::default(), &pod).await;
        pod_running(client, ns, &pod_name, node).await;
        let meta = json!({"metadata": {"finalizers": [ALLOC_FINALIZER],
            "annotations": {"sandbox.opensandbox.io/alloc-status": json!({"pods": [pod_name]}).to_string()}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&meta)).await.ok()?;
        let endpoints = json!({"metadata": {"annotations": {"sandbox.opensandbox.io/endpoints": "[\"10.244.0.10\"]"}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&endpoints)).await.ok()?;
        let status = json!({"status": {"observedGeneration": v["metadata"]["generation"], "replicas": 1, "allocated": 1, "ready": 1,
            "taskRunning": 0, "taskSucceed": 0, "taskFailed": 0, "taskPending": 0, "taskUnknown": 0}});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await.ok()?;
        Some(())
    }
}

/// The Pool kind (served whenever BatchSandbox is: both come with the OpenSandbox CRDs).
fn pool_resource() -> kube::api::ApiResource {
    let gvk = kube::core::GroupVersionKind::gvk("sandbox.opensandbox.io", "v1alpha1", "Pool");
    kube::api::ApiResource::from_gvk_with_plural(&gvk, "pools")
}
