//! The whole runbook the node tier's parts can pass, run twice on the same cluster: in the
//! cluster, by the acceptance layer's Job in the osbx image as the rendered ServiceAccount bound
//! to the rendered roles (`osbx rbac --for verify --in-cluster`), its probes in the layer's probe
//! namespace; and from outside, `osbx verify` on this machine with the admin kubeconfig. The
//! same profile and selection, the same ways in: the Lifecycle API through the API server's
//! service proxy (`/api/v1/namespaces/nd-system/services/opensandbox-server:80/proxy`) to the real
//! opensandbox-server 0.2.2, its API key read from the Secret `nd-system/api-key` the profile
//! names (the Job's Role grants `get` on that Secret alone). The two reports agree check by
//! check, and each check's outcome is what this machine makes it.
//!
//! The selection: `nodes.ready`, `kata.runtimeclass` and `kata.guest-kernel` (a probe under runc:
//! FAIL, its kernel is the host's, in both runs), `opensandbox.pools`, `opensandbox.lifecycle` and
//! `opensandbox.exec` of a runc pool that starts the played execd, `workload.docker` and
//! `workload.kind` of a build pool on the class `runc` with Debian's dockerd (their outcomes
//! follow from the kubelet directory's filesystem and cgroup v2, as in `workload.rs`),
//! `spiffe.issued` and `spiffe.denied` against the real SPIRE. Left out, and why:
//! `flux.layers` (no Flux on this node's plane); `opensandbox.server` (it waits for the chart's
//! server Deployment, and the server runs on the host here, not as that Deployment);
//! `kata.host-kvm`, `kata.vmm-shared-memory`, `kata.annotations.<class>` and
//! `opensandbox.reclaim.<pool>` (host probes in `verify.hostProbeImage`, a Python image no
//! registry serves here, and a Kata VMM, which only `tests/run kata` has, behind a kubelet it
//! plays); `kata.annotations` (it skips in the cluster, docs/verify.md).
//!
//! What stands in: the server runs on the host, listening on the node's address; the API server's
//! service proxy goes only to an address of a pod (it checks the Endpoints' `targetRef`), so a
//! `hostNetwork` pod of busybox in `nd-system` holds that address, and the Service (no selector)
//! and its Endpoints name it, with the server's port. The Job's pod reaches the API server
//! through the node's relay (`image.rs`).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::acceptance::{apply_layer, job_end, logs, rendered};
use super::image::osbx_image;
use super::runtime::runc_class_on_a_kata_node;
use super::sandboxes::{apply_pools, delete_pools, ready_pod, with_execd};
use super::{NodePlane, profile, workload};
use crate::builder::TestProfile;
use crate::cluster::RealServer;
use crate::turns::{self, Need};

/// The acceptance layer's namespace and its probe namespace.
const NS: &str = "nd-runbook";
const PROBES: &str = "nd-runbook-probes";
/// The profile's control-plane namespace, where the server's Service and the key's Secret are.
const SYSTEM: &str = "nd-system";
/// The Secret the profile names (`opensandbox.server.apiKey.secretRef`) and its key.
const SECRET: &str = "api-key";
const KEY: &str = "node-tier-runbook-5d0e3a-api-key";
/// The `hostNetwork` pod that holds the node's address for the service proxy.
const HOLDER: &str = "opensandbox-server-host";
/// The checks both runs select.
const ONLY: &[&str] = &[
    "nodes.ready",
    "kata.runtimeclass",
    "kata.guest-kernel",
    "opensandbox.pools",
    "opensandbox.lifecycle.live",
    "opensandbox.exec.live",
    "workload",
    "spiffe",
];

/// The profile (`ndrb`, its namespaces the node tier's `nd-…`): a runc pool `live` that starts
/// execd, a build pool `ci` on the class `runc`, the SPIFFE smoke identity, an acceptance layer
/// selecting [`ONLY`].
fn runbook_profile(node: &NodePlane, image: &str, spiffe_id: &str) -> TestProfile {
    let p = profile().set("metadata.name", "ndrb").set("cluster.name", "ndrb").pool("live", "runc", [1, 1, 1, 2]);
    with_execd(p, node, "live")
        .pool("ci", "kata", [0, 1, 0, 1])
        .pool_set("ci", "runtimeClassName", "runc")
        .pool_set("ci", "builds", true)
        .set("verify.workload.dockerImage", workload::IMAGE)
        .set("verify.probeDeadlineSeconds", 120)
        .set("verify.spiffe", super::spiffe::smoke_section(node, spiffe_id))
        .acceptance(json!({"image": image, "namespace": NS, "name": "acc", "interval": "1h",
                           "probeNamespace": PROBES, "only": ONLY}))
}

async fn apply(client: &kube::Client, obj: &Value) {
    let (api, name) = crate::cluster::api_for(client, obj).await;
    api.patch(&name, &PatchParams::apply("osbx-node-test").force(), &Patch::Apply(obj)).await.unwrap();
}

/// The objects that put the server behind the Service the profile names: the key's Secret, the
/// pod holding the node's address, the Service without selector and its Endpoints at `port`.
fn server_objects(node: &NodePlane, port: u16) -> Vec<Value> {
    let ip = node.var("NODE_IP");
    let key = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": SYSTEM},
                     "stringData": {"api-key": KEY}});
    let holder = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": HOLDER, "namespace": SYSTEM}, "spec": {
        "hostNetwork": true, "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "holder", "image": node.var("PROBE_IMAGE"), "command": ["sleep", "3600"]}]}});
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "opensandbox-server", "namespace": SYSTEM},
                         "spec": {"ports": [{"name": "http", "port": 80, "targetPort": port}]}});
    let endpoints = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "opensandbox-server", "namespace": SYSTEM},
        "subsets": [{"addresses": [{"ip": ip, "targetRef": {"kind": "Pod", "namespace": SYSTEM, "name": HOLDER}}],
                     "ports": [{"name": "http", "port": port}]}]});
    vec![key, holder, service, endpoints]
}

/// Wait until the pool `pool` counts an idle pod available (a Lifecycle check takes one).
async fn available(client: &kube::Client, pool: &str) {
    let obj = json!({"apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": "Pool",
                     "metadata": {"name": pool, "namespace": "nd-sbx"}});
    let (api, name) = crate::cluster::api_for(client, &obj).await;
    crate::cluster::wait_for(&format!("pool {pool} available"), Duration::from_secs(90), || {
        let api = api.clone();
        let name = name.clone();
        async move { (api.get(&name).await.ok()?.data["status"]["available"].as_i64()? >= 1).then_some(()) }
    })
    .await;
    ready_pod(client, pool).await;
}

/// Each check's id and outcome, in report order.
fn outcomes(checks: &[Value]) -> Vec<(String, String)> {
    checks
        .iter()
        .map(|c| {
            (c["id"].as_str().unwrap_or_default().to_owned(), c["outcome"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

/// The rules on Secrets of the roles named `role` among `objects`: each its namespace (empty for
/// the ClusterRole), names and verbs.
fn secret_rules(objects: &[Value], role: &str) -> Vec<(String, Value, Value)> {
    let roles = objects.iter().filter(|o| matches!(o["kind"].as_str(), Some("Role" | "ClusterRole")));
    roles
        .filter(|o| o["metadata"]["name"] == role)
        .flat_map(|o| {
            let ns = o["metadata"]["namespace"].as_str().unwrap_or_default().to_owned();
            let rules = o["rules"].as_array().cloned().unwrap_or_default();
            rules
                .into_iter()
                .filter(|r| r["resources"].as_array().is_some_and(|rs| rs.iter().any(|x| x == "secrets" || x == "*")))
                .map(move |r| (ns.clone(), r["resourceNames"].clone(), r["verbs"].clone()))
        })
        .collect()
}

/// The run, after the turn is taken; `objects` gets what the test applied, for the cleanup.
#[allow(clippy::print_stderr, clippy::too_many_lines)]
async fn run(objects: std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
    let node = NodePlane::get();
    let client = node.client().await;
    let image = tokio::task::spawn_blocking(|| osbx_image(NodePlane::get())).await.unwrap();
    tokio::task::spawn_blocking(|| workload::import_image(NodePlane::get())).await.unwrap();
    crate::cluster::install_crds(&client, "opensandbox").await;
    runc_class_on_a_kata_node(&client, node.var("NODE_NAME")).await;
    let spiffe_id = format!("spiffe://{}/sandbox/smoke", node.var("SPIRE_TRUST_DOMAIN"));
    super::spiffe::smoke_fixture(&client, node, &spiffe_id).await;
    let p = runbook_profile(node, image, &spiffe_id);
    apply_pools(&client, &p, 2).await;

    // The real server on the node's address, behind the Service the profile names.
    let server = {
        let (dir, kubeconfig, ip) =
            (node.dir.join("opensandbox-server-runbook"), node.kubeconfig.clone(), node.var("NODE_IP"));
        tokio::task::spawn_blocking(move || {
            RealServer::start(&dir, &kubeconfig, "nd-sbx", KEY, &[("OSBX_OPENSANDBOX_HOST", ip)])
        })
        .await
        .unwrap()
    };
    let port: u16 = server.url.rsplit(':').next().unwrap().parse().unwrap();
    apply(&client, &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM}})).await;
    for obj in server_objects(node, port) {
        objects.lock().unwrap().push(obj.clone());
        apply(&client, &obj).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), SYSTEM);
    crate::cluster::wait_for("the holder pod on the node's address", Duration::from_secs(60), || {
        let pods = pods.clone();
        async move { (pods.get(HOLDER).await.ok()?.status?.pod_ip.as_deref() == Some(node.var("NODE_IP"))).then_some(()) }
    })
    .await;
    // Through the service proxy, as the checks go.
    let health = format!("/api/v1/namespaces/{SYSTEM}/services/opensandbox-server:80/proxy/health");
    let req = http::Request::get(&health).body(Vec::new()).unwrap();
    client.request_text(req).await.unwrap_or_else(|e| panic!("GET {health}: {e}"));

    // The layer as rendered: its Job's identity reads exactly the Secret the profile names.
    let (layer, _) = rendered(&p);
    objects.lock().unwrap().extend(layer.iter().cloned());
    assert_eq!(
        secret_rules(&layer, "osbx-ndrb-ndrb-acceptance"),
        vec![(SYSTEM.to_owned(), json!([SECRET]), json!(["get"]))],
        "the Job's roles on Secrets"
    );
    available(&client, "live").await;

    // In the cluster.
    let started = Instant::now();
    apply_layer(&client, node, &layer, NS).await;
    let (end, reason) = job_end(&client, NS, Duration::from_secs(600)).await;
    let in_cluster_time = started.elapsed();
    let job_log = logs(&client, NS).await;
    let r = super::acceptance::report(&client, NS).await;
    let in_cluster = r["checks"].as_array().cloned().unwrap_or_default();

    // From outside, once the pool has an idle pod again.
    available(&client, "live").await;
    let started = Instant::now();
    let (code, remote, stderr) = node.verify(&p, &ONLY.join(","), &[]).await;
    let remote_time = started.elapsed();
    drop(server);

    let (inside, outside) = (outcomes(&in_cluster), outcomes(&remote));
    eprintln!("node-tier: the runbook, {:<28} | {:<10} | remote", "id", "in-cluster");
    let mut ids: Vec<&String> = inside.iter().chain(&outside).map(|(id, _)| id).collect();
    ids.sort_unstable();
    ids.dedup();
    let of = |list: &[(String, String)], id: &str| {
        list.iter().find(|(i, _)| i == id).map_or_else(|| "-".to_owned(), |(_, o)| o.clone())
    };
    for id in &ids {
        eprintln!("node-tier: the runbook, {id:<28} | {:<10} | {}", of(&inside, id), of(&outside, id));
    }
    eprintln!(
        "node-bench: the runbook in the cluster (the Job, {end} {reason}) {:.1}s, from outside (exit {code:?}) {:.1}s",
        in_cluster_time.as_secs_f64(),
        remote_time.as_secs_f64()
    );
    super::report(&in_cluster);
    super::report(&remote);

    let mut sorted = (inside.clone(), outside.clone());
    sorted.0.sort();
    sorted.1.sort();
    assert_eq!(sorted.0, sorted.1, "the same checks, the same outcomes\nthe Job's log:\n{job_log}\nremote: {stderr}");
    let expected = expected(node);
    let got: Vec<(&str, &str)> = sorted.0.iter().map(|(i, o)| (i.as_str(), o.as_str())).collect();
    assert_eq!(got, expected, "{job_log}");
    let all_pass = expected.iter().all(|(_, o)| *o == "PASS");
    let (job, exit) = if all_pass { ("Complete", Some(0)) } else { ("Failed", Some(1)) };
    assert_eq!((end.as_str(), code), (job, exit), "{reason}: {job_log}\n{stderr}");
    assert_eq!(r["revision"].as_str().map(str::len), Some(16), "{r:#}");
    let exec = in_cluster.iter().find(|c| c["id"] == "opensandbox.exec.live").unwrap();
    assert!(exec["evidence"].as_str().unwrap_or_default().contains("stdout osbx-"), "{exec:#}");
}

/// What each check must say on this machine, sorted by id.
fn expected(node: &NodePlane) -> Vec<(&'static str, &'static str)> {
    let fs = workload::filesystem(node.var("KUBELET_ROOT"));
    let overlay = fs == "ext2/ext3" || fs == "xfs";
    let cgroup2 = workload::filesystem("/sys/fs/cgroup") == "cgroup2fs";
    if !overlay {
        crate::support::not_proven(&format!(
            "node::runbook: the kubelet's directory is on {fs}, not ext4 or xfs, so workload.docker passing in the cluster and from outside was not proven here, only their FAIL"
        ));
    }
    if !cgroup2 {
        crate::support::not_proven(
            "node::runbook: this machine is on cgroup v1, so workload.kind passing in the cluster and from outside was not proven here, only their FAIL",
        );
    }
    let verdict = |pass: bool| if pass { "PASS" } else { "FAIL" };
    let mut out = vec![
        ("kata.guest-kernel", "FAIL"),
        ("kata.runtimeclass", "PASS"),
        ("nodes.ready", "PASS"),
        ("opensandbox.exec.live", "PASS"),
        ("opensandbox.lifecycle.live", "PASS"),
        ("opensandbox.pools", "PASS"),
        ("spiffe.denied", "PASS"),
        ("spiffe.issued", "PASS"),
        ("workload.docker.ci", verdict(overlay)),
        ("workload.kind.ci", verdict(cgroup2)),
    ];
    out.sort_unstable();
    out
}

/// Remove what the test made: the layer's namespaces (its Roles with them) and its cluster-wide
/// and other namespaces' roles, the server's objects, the pools. The SPIRE smoke fixture stays,
/// as `spiffe.rs` leaves it (the node's, shared).
async fn cleanup(client: &kube::Client, objects: &[Value]) {
    delete_pools(client, &["live", "ci"]).await;
    for obj in objects.iter().rev() {
        let ns = obj["metadata"]["namespace"].as_str();
        if matches!(ns, Some(NS | PROBES)) || obj["kind"] == "Namespace" {
            continue;
        }
        let (api, name) = crate::cluster::api_for(client, obj).await;
        let _ = api.delete(&name, &DeleteParams::default()).await;
    }
    for ns in [NS, PROBES] {
        let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .delete(ns, &DeleteParams::default())
            .await;
    }
}

/// The same runbook in the cluster and from outside: the same checks, the same outcomes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runbook_in_the_cluster_agrees_with_a_run_from_outside() {
    let _turn = turns::take(Need::Node).await;
    let client = NodePlane::get().client().await;
    let objects = std::sync::Arc::default();
    // The node is shared: what the test made goes however the run ends.
    let result = tokio::spawn(run(std::sync::Arc::clone(&objects))).await;
    let made = objects.lock().unwrap().clone();
    cleanup(&client, &made).await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}
