//! The test stand-in for node-side behaviour and controllers, acting only through the real API.
//!
//! There is no kubelet, scheduler or controller in the test plane. What they would write (Node
//! status, a Pod's phase and termination message, a Flux object's Ready condition) the stand-in
//! writes with status patches, exactly where a real component would.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const NOW: &str = "2026-01-01T00:00:00Z";

/// What a node reports.
pub struct NodeState<'a> {
    /// Ready condition.
    pub ready: bool,
    /// `status.nodeInfo.kernelVersion` (the host kernel).
    pub kernel: &'a str,
    /// `status.runtimeHandlers[].name`.
    pub runtime_handlers: &'a [&'a str],
    /// Labels.
    pub labels: Value,
}

/// Create (or replace) a Node and give it the status a kubelet would post.
pub async fn node(client: &Client, name: &str, state: &NodeState<'_>) -> Node {
    let api: Api<Node> = Api::all(client.clone());
    let _ = api.delete(name, &kube::api::DeleteParams::default()).await;
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": state.labels}})).unwrap();
    api.create(&PostParams::default(), &node).await.expect("create node");
    let handlers: Vec<Value> = state
        .runtime_handlers
        .iter()
        .map(|h| json!({"name": h, "features": {"recursiveReadOnlyMounts": true}}))
        .collect();
    let status = json!({"status": {
        "conditions": [{
            "type": "Ready",
            "status": if state.ready { "True" } else { "False" },
            "reason": if state.ready { "KubeletReady" } else { "KubeletNotReady" },
            "message": if state.ready { "kubelet is posting ready status" } else { "container runtime is down" },
            "lastHeartbeatTime": NOW, "lastTransitionTime": NOW,
        }],
        "nodeInfo": {
            "kernelVersion": state.kernel, "containerRuntimeVersion": "containerd://2.0.5",
            "kubeletVersion": "v1.36.3", "kubeProxyVersion": "", "machineID": "m", "systemUUID": "s", "bootID": "b",
            "osImage": "test", "operatingSystem": "linux", "architecture": "amd64",
        },
        "runtimeHandlers": handlers,
    }});
    let node = api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("node status");
    if state.ready {
        // The node lifecycle controller lifts the not-ready taint admission put on the new node.
        let untaint = json!({"spec": {"taints": null}});
        return api.patch(name, &PatchParams::default(), &Patch::Merge(&untaint)).await.expect("untaint node");
    }
    node
}

/// Move a pod to Running on `node`, as its kubelet would.
pub async fn pod_running(client: &Client, ns: &str, name: &str, node: &str) -> Pod {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = api.get(name).await.expect("get pod");
    let statuses: Vec<Value> = container_names(&pod)
        .iter()
        .map(|c| {
            json!({"name": c, "ready": true, "restartCount": 0, "image": "probe", "imageID": "probe",
                        "containerID": format!("containerd://{name}-{c}"), "started": true,
                        "state": {"running": {"startedAt": NOW}}})
        })
        .collect();
    if pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none() {
        bind(client, ns, name, node).await;
    }
    let status = json!({"status": {"phase": "Running", "hostIP": "10.0.0.10", "podIP": "10.244.0.10",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": NOW}],
        "containerStatuses": statuses}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("pod status")
}

/// Terminate a pod's containers with `exit_code` and a termination `message`, as its kubelet
/// would after the container exits.
pub async fn pod_terminated(client: &Client, ns: &str, name: &str, exit_code: i32, message: &str) -> Pod {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = api.get(name).await.expect("get pod");
    let reason = if exit_code == 0 { "Completed" } else { "Error" };
    let statuses: Vec<Value> = container_names(&pod)
        .iter()
        .map(|c| {
            json!({"name": c, "ready": false, "restartCount": 0, "image": "probe", "imageID": "probe",
                        "containerID": format!("containerd://{name}-{c}"), "started": false,
                        "state": {"terminated": {"exitCode": exit_code, "reason": reason, "message": message,
                                                  "startedAt": NOW, "finishedAt": NOW}}})
        })
        .collect();
    let phase = if exit_code == 0 { "Succeeded" } else { "Failed" };
    let status = json!({"status": {"phase": phase, "containerStatuses": statuses}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("pod status")
}

/// Bind a pod to a node through the `binding` subresource, as the scheduler would.
pub async fn bind(client: &Client, ns: &str, name: &str, node: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    let data = serde_json::to_vec(&binding).unwrap();
    let req = http::Request::post(format!("/api/v1/namespaces/{ns}/pods/{name}/binding"))
        .header("content-type", "application/json")
        .body(data)
        .unwrap();
    let _: Value = client.request(req).await.expect("bind pod");
    let _ = api;
}

fn container_names(pod: &Pod) -> Vec<String> {
    pod.spec.as_ref().map(|s| s.containers.iter().map(|c| c.name.clone()).collect()).unwrap_or_default()
}

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
    /// HelmReleases get Ready=False / InstallFailed with this message instead of Ready.
    pub helm_install_fails: Option<String>,
    /// Flux objects keep reporting the previous generation (a stale Ready).
    pub stale: bool,
    /// Never touch Pools (a Pool with no capacity).
    pub pools_stay_empty: bool,
    /// Install the OpenSandbox CRDs once a HelmRelease is Ready (what the chart does).
    pub chart_installs_crds: bool,
    /// Install `../shared/crds/<dir>` once the HelmRelease `<name>` is Ready (what its chart does).
    pub release_crds: Vec<(String, String)>,
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
        let mut helm_ready = false;
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
                    let failing = *kind == "HelmRelease" && self.helm_install_fails.is_some();
                    let (ready, reason, message) = if failing {
                        (false, "InstallFailed", self.helm_install_fails.clone().unwrap_or_default())
                    } else {
                        (
                            true,
                            if *kind == "HelmRelease" { "InstallSucceeded" } else { "Succeeded" },
                            "reconciled by the stand-in".to_owned(),
                        )
                    };
                    let observed = if self.stale { generation - 1 } else { generation };
                    let current = v["status"]["observedGeneration"].as_i64() == Some(observed)
                        && v["status"]["conditions"][0]["reason"] == reason;
                    if !current {
                        let cond = Ready { status: ready, reason, message: &message, observed: Some(observed) };
                        flux_ready(client, &ar, ns, &name, &cond).await;
                    }
                    helm_ready |= *kind == "HelmRelease" && ready;
                    if *kind == "HelmRelease" && ready {
                        for (release, dir) in &self.release_crds {
                            if *release == name {
                                super::install_crds(client, dir).await;
                            }
                        }
                    }
                }
            }
        }
        if helm_ready && self.chart_installs_crds {
            super::install_crds(client, "opensandbox").await;
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
                let _ = api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await;
            }
        }
    }
}

/// Aborts the task when dropped.
pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What the node-side world looks like for `osbx verify` probes.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The node probes are scheduled to.
    pub node: String,
    /// `uname -r` inside a Kata guest.
    pub guest_kernel: String,
    /// The guest kernel command line carries the Kata marker.
    pub cmdline_marker: bool,
    /// The node has `/dev/kvm`.
    pub kvm: bool,
    /// Cloud Hypervisor reports `config.memory.shared`.
    pub shared_memory: bool,
    /// The SPIFFE ID the smoke ServiceAccount gets (`None`: denied).
    pub smoke_id: Option<String>,
    /// The SPIFFE ID a wrong ServiceAccount gets (`Some`: a catch-all identity).
    pub wrong_id: Option<String>,
    /// The Workload API fails with this message for everyone.
    pub workload_api_error: Option<String>,
}

/// A kubelet (and scheduler) for verify probe pods: binds them to the scenario's node and writes
/// the terminated state and termination message the real probe would produce there.
pub struct Kubelet;

impl Kubelet {
    /// Run until the handle is dropped.
    pub fn spawn(client: Client, scenario: std::sync::Arc<std::sync::Mutex<Scenario>>) -> AbortOnDrop {
        AbortOnDrop(tokio::spawn(async move {
            let pods: Api<Pod> = Api::all(client.clone());
            loop {
                let lp = kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=osbx-verify");
                if let Ok(list) = pods.list(&lp).await {
                    for pod in list {
                        let s = scenario.lock().unwrap().clone();
                        let _ = Self::step(&client, &pod, &s).await;
                    }
                }
                finalize_namespaces(&client, "app.kubernetes.io/managed-by=osbx-verify").await;
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }))
    }

    async fn step(client: &Client, pod: &Pod, s: &Scenario) -> Option<()> {
        if pod.status.as_ref().and_then(|st| st.container_statuses.as_ref()).is_some()
            || pod.metadata.deletion_timestamp.is_some()
        {
            return None;
        }
        let ns = pod.metadata.namespace.clone()?;
        let name = pod.metadata.name.clone()?;
        let probe = pod.metadata.labels.as_ref()?.get("osbx.io/probe")?.clone();
        let spec = pod.spec.clone()?;
        if spec.node_name.is_none() {
            bind(client, &ns, &name, &s.node).await;
        }
        let result = |v: Value| v.to_string();
        match probe.as_str() {
            "guest-kernel" => {
                let msg = result(
                    json!({"check": "kata.guest-kernel", "kernel": s.guest_kernel, "cmdline_marker": s.cmdline_marker,
                                        "hypervisor": true, "mem_kib": 2_000_000}),
                );
                pod_terminated(client, &ns, &name, 0, &msg).await;
            }
            "host-kvm" => {
                if s.kvm {
                    let msg = result(
                        json!({"check": "kata.host-kvm", "char_device": true, "api_version": 12, "create_vm": true, "host_is_vm": false}),
                    );
                    pod_terminated(client, &ns, &name, 0, &msg).await;
                } else {
                    warning(client, &ns, &name, "FailedMount",
                        "MountVolume.SetUp failed for volume \"kvm\" : hostPath type check failed: /dev/kvm is not a character device").await;
                    container_waiting(client, &ns, &name, "ContainerCreating").await;
                }
            }
            "kata-target" => {
                pod_running(client, &ns, &name, &s.node).await;
            }
            "vm-info" => {
                let msg = result(
                    json!({"check": "kata.vmm-shared-memory", "sandbox_id": "sbx-1", "http_status": 200, "state": "Running",
                                        "shared": s.shared_memory, "hugepages": false, "size": 2_147_483_648_u64, "zones_shared": [],
                                        "boot_vcpus": 1, "fs_tags": ["kataShared"]}),
                );
                pod_terminated(client, &ns, &name, 0, &msg).await;
            }
            "spiffe" => {
                let sa = spec.service_account_name.clone().unwrap_or_default();
                let wrong = sa.ends_with("-wrong");
                let issued = if wrong { s.wrong_id.clone() } else { s.smoke_id.clone() };
                if let Some(err) = &s.workload_api_error {
                    pod_terminated(client, &ns, &name, 1, err).await;
                } else if let Some(id) = issued {
                    pod_terminated(client, &ns, &name, 0, &svid_pem(&id)).await;
                } else {
                    pod_terminated(
                        client,
                        &ns,
                        &name,
                        1,
                        "rpc error: code = PermissionDenied desc = no identity issued",
                    )
                    .await;
                }
            }
            _ => {}
        }
        Some(())
    }
}

/// A self-signed X.509 SVID with `id` as its URI SAN (what `spire-agent -write` leaves).
pub fn svid_pem(id: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.subject_alt_names = vec![rcgen::SanType::URI(rcgen::string::Ia5String::try_from(id.to_owned()).unwrap())];
    params.self_signed(&key).unwrap().pem()
}

/// A Warning event about a pod, as the kubelet records it.
pub async fn warning(client: &Client, ns: &str, pod: &str, reason: &str, message: &str) {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    let ev: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": {"generateName": format!("{pod}.")},
        "involvedObject": {"kind": "Pod", "name": pod, "namespace": ns, "apiVersion": "v1"},
        "reason": reason, "message": message, "type": "Warning", "source": {"component": "kubelet"},
        "firstTimestamp": NOW, "lastTimestamp": NOW, "count": 1,
    }))
    .unwrap();
    let _ = events.create(&PostParams::default(), &ev).await;
}

/// A container stuck waiting (e.g. ContainerCreating while a volume fails to mount).
pub async fn container_waiting(client: &Client, ns: &str, name: &str, reason: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let Ok(pod) = api.get(name).await else { return };
    let statuses: Vec<Value> = container_names(&pod)
        .iter()
        .map(|c| {
            json!({"name": c, "ready": false, "restartCount": 0, "image": "probe", "imageID": "",
                        "state": {"waiting": {"reason": reason}}})
        })
        .collect();
    let status = json!({"status": {"phase": "Pending", "containerStatuses": statuses}});
    let _ = api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await;
}

/// The namespace controller's job for deleted namespaces with `selector`: remove what is left in
/// them and drop the `kubernetes` finalizer, so that they disappear.
pub async fn finalize_namespaces(client: &Client, selector: &str) {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let Ok(list) = api.list(&kube::api::ListParams::default().labels(selector)).await else { return };
    for ns in list.into_iter().filter(|n| n.metadata.deletion_timestamp.is_some()) {
        let name = ns.metadata.name.clone().unwrap_or_default();
        let now = kube::api::DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
        let _ = Api::<Pod>::namespaced(client.clone(), &name).delete_collection(&now, &ListParams::default()).await;
        let body =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}, "spec": {"finalizers": []}});
        let req = http::Request::put(format!("/api/v1/namespaces/{name}/finalize"))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .unwrap();
        let _: Result<Value, _> = client.request(req).await;
    }
}

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
        let pod: Pod = serde_json::from_value(
            json!({"metadata": {"name": pod_name, "labels": {"sandbox.opensandbox.io/pool-name": pool}},
            "spec": {"containers": [{"name": "sandbox", "image": "example.com/sandbox:v1"}]}}),
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
