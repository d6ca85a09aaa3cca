//! The test stand-in, acting only through the real API (status patches, exactly where a real
//! component would write). The real controllers run in `tests/it/e2e` (`up --with-controllers`:
//! Flux, kube-controller-manager, kube-scheduler, kwok, the played OpenSandbox controller, the
//! real OpenSandbox server);
//! the stand-in is what is left:
//!
//! - **What cannot run here** (`kubelet`): a Node's runtime handlers and kernel, and the results of
//!   the probe pods: the guest kernel inside a Kata VM, `/dev/kvm` and `KVM_CREATE_VM` on the host,
//!   Cloud Hypervisor's shared memory, what a Kata sandbox holds on its node before and after its
//!   delete (the reclaim probes: nothing left), and a SPIFFE Workload API answer. There is no KVM, no Kata VM
//!   and no SPIRE agent on this machine; the stand-in returns each as a probe's termination message
//!   in the format the probe scripts write. Limits: the scripts' parsing of `/proc`, `uname` and
//!   the Workload API is exercised only against these messages.
//!   The kubelet also runs the Pools' pods (bound to its node, Running and Ready at once, and gone
//!   at once when deleted), for the played OpenSandbox controller (`tests/played`); with the
//!   played Kata shim (the Kata tier), a Kata pool's pods are real QEMU guests, stopped when the
//!   pod goes.
//! - **Failure modes the real parts do not produce on demand**: a stale Ready (`flux`, `stale`), a
//!   Pool that never gets capacity (`pools_stay_empty`).
//! - **Speed** (`flux`): the apply and verify tests of osbx's own logic (ordering, zero-write
//!   re-applies, prune, conflicts, permissions, every verify diagnosis) run in seconds on a plane
//!   without controllers; the stand-in marks Flux objects Ready there, and for the apply tests
//!   writes a Pool's status itself (they read only the status). That the real controllers agree
//!   is proven by `e2e`: real Flux's conditions (including a failed install, which the stand-in no
//!   longer models), the Pool CRD from the real chart, Pools filled by the played OpenSandbox
//!   controller from pods that kwok runs, the Lifecycle API against the real server.
//!
//! The OpenSandbox controller is not the stand-in's: it is played in `tests/played`, bound to the
//! recorded facts, the same code in the tests and in `tests/cluster/up --with-controllers`.

mod flux;
pub mod host_view;
mod kubelet;

pub use flux::{Controllers, Ready, flux_ready};
pub use kubelet::{Kubelet, Scenario};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const NOW: &str = "2026-01-01T00:00:00Z";

/// What a node reports.
pub struct NodeState<'a> {
    /// Ready condition.
    pub ready: bool,
    /// `status.nodeInfo.kernelVersion` (the host kernel).
    pub kernel: &'a str,
    /// `status.runtimeHandlers[].name` (`None`: the node publishes no `runtimeHandlers`, as
    /// kubelets before 1.30 and containerd before 2.0).
    pub runtime_handlers: Option<&'a [&'a str]>,
    /// Labels.
    pub labels: Value,
}

/// Create (or replace) a Node and give it the status a kubelet would post.
pub async fn node(client: &Client, name: &str, state: &NodeState<'_>) -> Node {
    let api: Api<Node> = Api::all(client.clone());
    // Replacing: the Node may not exist yet; the create below is checked.
    let _ = api.delete(name, &kube::api::DeleteParams::default()).await;
    let node: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": state.labels}})).unwrap();
    api.create(&PostParams::default(), &node).await.expect("create node");
    let handlers: Option<Vec<Value>> = state
        .runtime_handlers
        .map(|hs| hs.iter().map(|h| json!({"name": h, "features": {"recursiveReadOnlyMounts": true}})).collect());
    let mut status = json!({"status": {
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
    }});
    if let Some(handlers) = handlers {
        status["status"]["runtimeHandlers"] = json!(handlers);
    }
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
    try_pod_running(client, ns, name, node).await.unwrap_or_else(|e| panic!("pod {ns}/{name} running: {e}"))
}

/// [`pod_running`] that says why it could not (the pod gone, say).
pub async fn try_pod_running(client: &Client, ns: &str, name: &str, node: &str) -> Result<Pod, kube::Error> {
    try_pod_running_as(client, ns, name, node, "").await
}

/// [`try_pod_running`] with the container id the runtime gave it (empty: `<pod>-<container>`).
pub async fn try_pod_running_as(
    client: &Client,
    ns: &str,
    name: &str,
    node: &str,
    container_id: &str,
) -> Result<Pod, kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = api.get(name).await?;
    let statuses: Vec<Value> = container_names(&pod)
        .iter()
        .map(|c| {
            json!({"name": c, "ready": true, "restartCount": 0, "image": "probe", "imageID": "probe",
                        "containerID": if container_id.is_empty() { format!("containerd://{name}-{c}") } else { format!("containerd://{container_id}") },
                        "started": true,
                        "state": {"running": {"startedAt": NOW}}})
        })
        .collect();
    if pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none() {
        try_bind(client, ns, name, node).await?;
    }
    let status = json!({"status": {"phase": "Running", "hostIP": "10.0.0.10", "podIP": "10.244.0.10",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": NOW}],
        "containerStatuses": statuses}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await
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

/// A container restarted once on failure and failed again, as the kubelet shows it for
/// `restartPolicy: OnFailure`: `restartCount` 1, the first failure in `lastState`.
pub async fn pod_failed_twice(client: &Client, ns: &str, name: &str, message: &str) -> Pod {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = api.get(name).await.expect("get pod");
    let terminated = json!({"exitCode": 1, "reason": "Error", "message": message, "startedAt": NOW, "finishedAt": NOW});
    let statuses: Vec<Value> = container_names(&pod)
        .iter()
        .map(|c| {
            json!({"name": c, "ready": false, "restartCount": 1, "image": "probe", "imageID": "probe",
                   "containerID": format!("containerd://{name}-{c}"), "started": false,
                   "state": {"terminated": terminated}, "lastState": {"terminated": terminated}})
        })
        .collect();
    let status = json!({"status": {"phase": "Running", "containerStatuses": statuses}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("pod status")
}

/// Bind a pod to a node through the `binding` subresource, as the scheduler would.
pub async fn bind(client: &Client, ns: &str, name: &str, node: &str) {
    try_bind(client, ns, name, node).await.expect("bind pod");
}

async fn try_bind(client: &Client, ns: &str, name: &str, node: &str) -> Result<(), kube::Error> {
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
    let data = serde_json::to_vec(&binding).unwrap();
    let req = http::Request::post(format!("/api/v1/namespaces/{ns}/pods/{name}/binding"))
        .header("content-type", "application/json")
        .body(data)
        .unwrap();
    client.request::<Value>(req).await.map(drop)
}

fn container_names(pod: &Pod) -> Vec<String> {
    pod.spec.as_ref().map(|s| s.containers.iter().map(|c| c.name.clone()).collect()).unwrap_or_default()
}

/// The played OpenSandbox controller for namespace `ns`, as a task, and its behaviour.
pub fn opensandbox_controller(
    client: &Client,
    ns: &str,
) -> (AbortOnDrop, std::sync::Arc<std::sync::Mutex<crate::played::opensandbox::Behaviour>>) {
    let behaviour = std::sync::Arc::default();
    let controller = crate::played::opensandbox::Controller::new(
        client.clone(),
        Some(ns.to_owned()),
        std::sync::Arc::clone(&behaviour),
    );
    (AbortOnDrop::spawn(controller.run()), behaviour)
}

/// Aborts the task when dropped.
pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl AbortOnDrop {
    /// Run `task` on the runtime until the handle is dropped.
    pub fn spawn(task: impl std::future::Future<Output = ()> + Send + 'static) -> Self {
        Self(tokio::spawn(task))
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
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
    // An Event is evidence for the reader, not a step: the tests assert on what verify reports.
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
    // A pod deleted meanwhile has no status to patch; the tests assert on what verify reports.
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
        // Emptying terminating namespaces is best effort each pass; the namespace delete below finishes it.
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

/// A plane of its own playing a healthy Kata cluster for `verify`, its namespaces named after
/// `p`: the Flux, OpenSandbox and SPIRE CRDs; `<p>-flux` and `<p>-spire` with the smoke
/// ServiceAccount; a Kata node `<p>-node` and its RuntimeClass; the stand-in Flux controllers for
/// `<p>-flux` and `<p>-system`; the played OpenSandbox controller for `<p>-sbx`; and the kubelet
/// playing `scenario` and running the Pools' pods.
pub struct KataCluster {
    /// The plane (stopped when dropped).
    pub plane: crate::cluster::OwnPlane,
    /// An admin client.
    pub client: Client,
    /// The stand-in Flux controllers (drop them to stop reconciling).
    pub controllers: AbortOnDrop,
    /// The played OpenSandbox controller (drop it to stop it).
    pub opensandbox: AbortOnDrop,
    /// How the played OpenSandbox controller behaves (changeable while it runs).
    pub behaviour: std::sync::Arc<std::sync::Mutex<crate::played::opensandbox::Behaviour>>,
    /// The stand-in kubelet.
    pub kubelet: AbortOnDrop,
}

impl KataCluster {
    /// Start it (see the type).
    pub async fn start(p: &str, scenario: std::sync::Arc<std::sync::Mutex<Scenario>>) -> Self {
        let plane = tokio::task::spawn_blocking(crate::cluster::OwnPlane::start).await.unwrap();
        let client = crate::cluster::client_for(&plane.kubeconfig).await;
        for dir in ["flux", "opensandbox", "spire"] {
            crate::cluster::install_crds(&client, dir).await;
        }
        let kata_labels =
            json!({"katacontainers.io/kata-runtime": "true", "kata-deploy.katacontainers.io/default": "true"});
        let objects = [
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("{p}-flux")}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("{p}-spire")}}),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "spire-smoke", "namespace": format!("{p}-spire")}}),
            json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata-clh-runtime-rs"},
                   "handler": "kata-clh-runtime-rs", "overhead": {"podFixed": {"cpu": "250m", "memory": "130Mi"}},
                   "scheduling": {"nodeSelector": kata_labels}}),
        ];
        for obj in &objects {
            let (api, name) = crate::cluster::api_for(&client, obj).await;
            api.patch(&name, &PatchParams::apply("test"), &Patch::Apply(obj)).await.unwrap();
        }
        let state = NodeState {
            ready: true,
            kernel: "6.8.0-45-generic",
            runtime_handlers: Some(&["runc", "kata-clh-runtime-rs"]),
            labels: kata_labels,
        };
        node(&client, &format!("{p}-node"), &state).await;
        let controllers =
            Controllers { flux_namespaces: vec![format!("{p}-flux"), format!("{p}-system")], ..Controllers::default() }
                .spawn(client.clone());
        let (opensandbox, behaviour) = opensandbox_controller(&client, &format!("{p}-sbx"));
        let kubelet = Kubelet::spawn(client.clone(), scenario);
        Self { plane, client, controllers, opensandbox, behaviour, kubelet }
    }
}
