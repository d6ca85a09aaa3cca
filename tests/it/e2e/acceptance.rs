//! The acceptance layer's Ready follows the in-cluster verdict, in the real kustomize-controller.
//! Flux reconciles the pushed render with an acceptance layer after the pools; its Job runs
//! `osbx verify` in the cluster and Flux health-checks the Job (`wait: true`). While a node is
//! cordoned, the run fails (`nodes.ready`), the Job fails by its `podFailurePolicy` and Flux holds
//! the layer not Ready, naming the Job; the report ConfigMap and a Warning Event say why. The node
//! fixed and a new revision pushed (a pool's capacity changed), Flux re-creates the Job (`force`),
//! the run passes, and the layer turns Ready at that commit.
//!
//! What stands in: kwok's nodes run no image, so the test plays the kubelet of the Job's pods
//! (kwok's `pod-complete` stage leaves them alone: `tests/cluster/kwok-stages.yaml`). It does what
//! a kubelet does with this pod and no more: it mounts the pod's ConfigMap and emptyDir volumes as
//! directories, runs the container's arguments with the test build's `osbx` (the binary the image
//! holds, `node::acceptance` runs the image itself) authenticated as the pod's ServiceAccount (a
//! bound token from the TokenRequest API, as the projected volume would hold), and writes the
//! container's exit code into the pod's status; the real Job controller and kustomize-controller
//! do the rest. The serving Deployment's pods are kwok's (Running, nothing runs): the metrics are
//! the node tier's to show.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::world::World;
use super::{bench, flux};
use crate::cluster::{self, wait_for};
use crate::support::osbx;

const S: &str = "acceptance";
pub(super) const NS: &str = "osbx-acceptance";
pub(super) const NAME: &str = "acc";
/// A second kwok node, cordoned while the first revision runs.
pub(super) const CORDONED: &str = "kwok-node-1";

/// One run of the Job's pod, as the played kubelet saw it.
#[derive(Debug, Clone)]
pub(super) struct Run {
    pub job_uid: String,
    pub revision: String,
    pub code: i32,
    pub output: String,
}

/// The default profile with an acceptance layer after the pools that runs the checks this plane
/// answers without the OpenSandbox server (Flux, the nodes, the Pools), with Flux's retries short.
pub(super) fn with_acceptance(p: &mut Value) {
    p["layers"].as_array_mut().expect("layers").push(json!({
        "name": "acceptance", "component": "acceptance", "dependsOn": ["opensandbox-pools"],
        "timeout": "60s", "retryInterval": "5s"}));
    p["acceptance"] = json!({"image": "registry.example.org/osbx:e2e", "namespace": NS, "name": NAME,
                             "only": ["flux.layers", "nodes.ready", "opensandbox.pools"]});
}

/// Play the kubelet of the acceptance Job's pods until aborted: each pod of the Job that kwok made
/// Running is run once (see the module docs) and ends with its container's exit code.
async fn kubelet(client: Client, kubeconfig: PathBuf, dir: PathBuf, runs: Arc<Mutex<Vec<Run>>>) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut done = BTreeSet::new();
    loop {
        let list = pods.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
        for pod in list {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            // The layer's Job's pods only: the CronJob's Jobs (`acc-deep-…`, at their schedule, which a
            // run that crosses it meets) are left to kwok.
            let job = pod
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.kind == "Job" && o.name == NAME)
                .map(|o| o.uid.clone());
            let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            let (Some(job_uid), true) = (job, running) else { continue };
            if !done.insert(uid.clone()) {
                continue;
            }
            let run = run_pod(&client, &kubeconfig, &dir.join(&uid), &pod, job_uid).await;
            // Recorded once its process has exited, before its pod's status says so (what waits
            // for the Job sees the run).
            let code = run.code;
            runs.lock().unwrap().push(run);
            end_pod(&pods, &pod, code).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Run the pod's one container: its volumes as directories under `dir`, its arguments with those
/// paths, as its ServiceAccount.
async fn run_pod(client: &Client, kubeconfig: &Path, dir: &Path, pod: &Pod, job_uid: String) -> Run {
    let spec = pod.spec.as_ref().expect("a pod spec");
    let container = &spec.containers[0];
    std::fs::create_dir_all(dir).unwrap();
    let mut mounts = Vec::new();
    for volume in spec.volumes.iter().flatten() {
        let host = dir.join(&volume.name);
        std::fs::create_dir_all(&host).unwrap();
        if let Some(source) = &volume.config_map {
            let maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
            let map = maps.get(&source.name).await.expect("the pod's ConfigMap");
            for (key, value) in map.data.unwrap_or_default() {
                std::fs::write(host.join(key), value).unwrap();
            }
        }
        let mount = container.volume_mounts.iter().flatten().find(|m| m.name == volume.name).expect("mounted");
        mounts.push((mount.mount_path.clone(), host));
    }
    let args: Vec<String> = container
        .args
        .iter()
        .flatten()
        .map(|arg| {
            mounts
                .iter()
                .find_map(|(path, host)| {
                    arg.strip_prefix(path.as_str()).map(|rest| format!("{}{rest}", host.display()))
                })
                .unwrap_or_else(|| arg.clone())
        })
        .collect();
    let env = field_env(pod, container);
    let sa = spec.service_account_name.as_deref().expect("a ServiceAccount");
    let as_sa = cluster::service_account_kubeconfig(client, kubeconfig, (NS, sa), dir).await;
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = osbx();
        cmd.env_remove("OSBX_API_KEY").envs(env).args(&args).arg("--kubeconfig").arg(as_sa);
        cmd.output().unwrap()
    })
    .await
    .unwrap();
    let revision = pod.metadata.annotations.as_ref().and_then(|a| a.get("osbx.dev/revision")).cloned();
    Run {
        job_uid,
        revision: revision.expect("the pod's revision"),
        code: out.status.code().unwrap_or(-1),
        output: format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    }
}

/// The container's environment from the downward API, as a kubelet gives it: `metadata.name`,
/// `metadata.namespace`, `metadata.uid` and `metadata.labels['…']` (a label that is not there
/// as empty); literal values as they are.
fn field_env(pod: &Pod, container: &k8s_openapi::api::core::v1::Container) -> Vec<(String, String)> {
    let meta = &pod.metadata;
    container
        .env
        .iter()
        .flatten()
        .map(|e| {
            let path = e.value_from.as_ref().and_then(|v| v.field_ref.as_ref()).map(|f| f.field_path.as_str());
            let value = match path {
                None => e.value.clone().unwrap_or_default(),
                Some("metadata.name") => meta.name.clone().unwrap_or_default(),
                Some("metadata.namespace") => meta.namespace.clone().unwrap_or_default(),
                Some("metadata.uid") => meta.uid.clone().unwrap_or_default(),
                Some(p) => {
                    let label = p.strip_prefix("metadata.labels['").and_then(|l| l.strip_suffix("']"));
                    let label = label.unwrap_or_else(|| panic!("a field the played kubelet does not give: {p}"));
                    meta.labels.as_ref().and_then(|l| l.get(label)).cloned().unwrap_or_default()
                }
            };
            (e.name.clone(), value)
        })
        .collect()
}

/// The pod's status as a kubelet writes it when its container exited with `code`.
async fn end_pod(pods: &Api<Pod>, pod: &Pod, code: i32) {
    let now = k8s_openapi::jiff::Timestamp::now().round(k8s_openapi::jiff::Unit::Second).unwrap().to_string();
    let container = &pod.spec.as_ref().unwrap().containers[0];
    let (phase, reason) = if code == 0 { ("Succeeded", "Completed") } else { ("Failed", "Error") };
    let condition =
        |t: &str| json!({"type": t, "status": "False", "reason": "PodCompleted", "lastTransitionTime": now});
    let status = json!({"status": {
        "phase": phase,
        "conditions": [condition("Ready"), condition("ContainersReady"), condition("PodReadyToStartContainers")],
        "containerStatuses": [{"name": container.name, "image": container.image, "ready": false, "restartCount": 0,
            "started": false, "state": {"terminated": {"exitCode": code, "reason": reason, "startedAt": now, "finishedAt": now}}}],
    }});
    let name = pod.metadata.name.as_deref().unwrap();
    pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(&status)).await.expect("the pod's status");
}

async fn acceptance_layer(world: &World) -> Option<Value> {
    flux::get(&world.client, "kustomize.toolkit.fluxcd.io/v1", "Kustomization", &world.layout().flux, "acceptance")
        .await
}

/// The report ConfigMap's `report.json`.
async fn report(client: &Client) -> Option<Value> {
    let map = Api::<ConfigMap>::namespaced(client.clone(), NS).get_opt(&format!("{NAME}-report")).await.unwrap()?;
    serde_json::from_str(map.data?.get("report.json")?).ok()
}

/// A kwok node, cordoned.
pub(super) async fn cordoned_node(client: &Client) {
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": CORDONED, "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {"type": "kwok", "kubernetes.io/hostname": CORDONED, "kubernetes.io/os": "linux"}},
        "spec": {"unschedulable": true},
    });
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(node).unwrap())
        .await
        .expect("create the cordoned node");
}

/// What a failure message shows of the acceptance namespace: its Jobs (revision, conditions) and
/// pods (revision, node, phase).
pub(super) async fn state(client: &Client) -> String {
    let jobs = Api::<Job>::namespaced(client.clone(), NS).list(&ListParams::default()).await.unwrap();
    let pods = Api::<Pod>::namespaced(client.clone(), NS).list(&ListParams::default()).await.unwrap();
    let revision = |m: &kube::api::ObjectMeta| m.annotations.as_ref().and_then(|a| a.get("osbx.dev/revision")).cloned();
    let mut lines = Vec::new();
    for j in jobs.items {
        let conditions: Vec<String> = j
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .map(|c| format!("{}={} {}", c.type_, c.status, c.message.unwrap_or_default()))
            .collect();
        let template = j.spec.and_then(|s| s.template.metadata);
        lines.push(format!(
            "Job {:?} revision {:?}: {conditions:?}",
            j.metadata.name,
            template.as_ref().and_then(revision)
        ));
    }
    for p in pods.items {
        let status = p.status.unwrap_or_default();
        lines.push(format!(
            "Pod {:?} revision {:?} on {:?}: {:?} {:?}",
            p.metadata.name,
            revision(&p.metadata),
            p.spec.and_then(|s| s.node_name),
            status.phase,
            status
                .conditions
                .unwrap_or_default()
                .iter()
                .map(|c| format!("{}={} {}", c.type_, c.status, c.message.clone().unwrap_or_default()))
                .collect::<Vec<_>>()
        ));
    }
    lines.join("\n")
}

/// The played kubelet of one plane (see the module docs), running until dropped.
pub(super) struct Kubelet {
    task: tokio::task::JoinHandle<()>,
    runs: Arc<Mutex<Vec<Run>>>,
}

impl Kubelet {
    /// Start playing it on the plane of `client` (`kubeconfig`: its admin's), pods' files under `dir`.
    pub(super) fn start(client: Client, kubeconfig: PathBuf, dir: PathBuf) -> Self {
        let runs = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(kubelet(client, kubeconfig, dir, runs.clone()));
        Self { task, runs }
    }

    /// The runs so far, in order.
    pub(super) fn runs(&self) -> Vec<Run> {
        self.runs.lock().unwrap().clone()
    }

    /// The runs once there are at least `count`: a run publishes its report before its process
    /// exits, so what has read the report may be ahead of the run's end (at most two minutes).
    pub(super) async fn runs_at_least(&self, count: usize) -> Vec<Run> {
        let what = format!("{count} runs to end");
        wait_for(&what, Duration::from_secs(120), || async { Some(self.runs()).filter(|r| r.len() >= count) }).await
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_holds_the_acceptance_layer_while_the_in_cluster_verify_fails_and_a_new_revision_reruns_it() {
    let mut world = World::scenario(S).profile(with_acceptance).start().await;
    cordoned_node(&world.client).await;
    let dir = tempfile::tempdir().unwrap();
    let kubelet = Kubelet::start(world.client.clone(), world.plane.kubeconfig.clone(), dir.path().to_path_buf());
    let runs_now = || kubelet.runs();

    // The first revision fails in the cluster: Flux holds the layer, naming the Job.
    let held = wait_for("Flux holding the acceptance layer on the failed Job", Duration::from_secs(600), || {
        let world = &world;
        async move {
            let k = acceptance_layer(world).await?;
            let message = flux::not_ready(&k)?;
            let ready = flux::condition(&k, "Ready")?;
            let said = ready["message"].as_str().unwrap_or_default();
            (said.contains(&format!("Job/{NS}/{NAME}")) && said.contains("ailed")).then_some(message)
        }
    })
    .await;
    bench(S, "flux_held_after_start", world.seconds());
    let first = runs_now();
    assert_eq!(first.len(), 1, "one run at the first revision: {first:#?}\nFlux: {held}");
    assert_eq!(first[0].code, 1, "{}", first[0].output);
    assert!(first[0].output.contains(CORDONED), "the failure names the cordoned node: {}", first[0].output);
    let job = Api::<Job>::namespaced(world.client.clone(), NS).get(NAME).await.unwrap();
    let failed = job.status.and_then(|s| s.conditions).unwrap_or_default().into_iter().find(|c| c.type_ == "Failed");
    assert_eq!(failed.and_then(|c| c.reason).as_deref(), Some("PodFailurePolicy"), "the Job fails by its policy");
    let published = report(&world.client).await.expect("the run's report");
    assert_eq!(
        (published["ready"].as_bool(), published["revision"].as_str()),
        (Some(false), Some(first[0].revision.as_str()))
    );
    let events = Api::<Event>::namespaced(world.client.clone(), NS).list(&ListParams::default()).await.unwrap();
    assert!(
        events.items.iter().any(|e| e.reason.as_deref() == Some("AcceptanceCheckFailed")
            && e.message.as_deref().is_some_and(|m| m.starts_with("nodes.ready FAIL"))),
        "a Warning Event for nodes.ready: {:?}",
        events.items.iter().map(|e| e.message.clone()).collect::<Vec<_>>()
    );
    for (api_version, kind, ns, name) in &world.layout().layer_objects {
        if *kind == "Kustomization" && name != "acceptance" {
            let k = flux::get(&world.client, api_version, kind, ns, name).await.expect("the layer");
            assert!(flux::not_ready(&k).is_none(), "{name}: the layers before it stay Ready: {k}");
        }
    }

    // Fixed, and a new revision: the Job is re-created, passes, and the layer turns Ready.
    let nodes: Api<Node> = Api::all(world.client.clone());
    let uncordon = json!({"spec": {"unschedulable": false}});
    nodes.patch(CORDONED, &PatchParams::default(), &Patch::Merge(&uncordon)).await.unwrap();
    world.profile["pools"]["items"][0]["capacity"]["bufferMax"] = json!(3);
    let pushed = Instant::now();
    let commit = world.render_commit_push().await;
    world.request_reconcile().await;
    flux::wait_applied(&world.client, &world.layout(), "acceptance", &commit, Duration::from_secs(300)).await;
    bench(S, "flux_ready_after_push", pushed.elapsed().as_secs_f64());
    let all = runs_now();
    let second = all.last().unwrap();
    assert_eq!(all.len(), 2, "one more run, at the new revision: {all:#?}");
    assert_ne!(second.revision, first[0].revision, "the new revision");
    assert_ne!(second.job_uid, first[0].job_uid, "Flux re-created the Job");
    assert_eq!(second.code, 0, "{}", second.output);
    let published = report(&world.client).await.expect("the run's report");
    assert_eq!(
        (published["ready"].as_bool(), published["revision"].as_str()),
        (Some(true), Some(second.revision.as_str()))
    );
    bench(S, "total", world.seconds());
}
