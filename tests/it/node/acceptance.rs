//! The acceptance layer on the real node: the osbx image of the test build
//! (`image::osbx_image`) runs the layer's Job and Deployment as rendered, as the rendered
//! ServiceAccount bound to the rendered roles (exactly `osbx rbac --for verify --in-cluster`),
//! against the real API server, kubelet and containerd. The Job's verdict is its completion
//! (PASS) or its failure by its `podFailurePolicy` (a FAIL: a pool whose RuntimeClass names a
//! handler containerd lacks); the report ConfigMap and the Events come from the run; the serving
//! pod's metrics are scraped over HTTP from the test.
//!
//! Two things of the node tier stand in for a full cluster, as `image.rs` says: the pods reach the
//! API server through the node's relay (no kube-proxy for the `kubernetes` Service; two env vars
//! added to the rendered container), and the service-account volume is added to the rendered pod
//! (the plane runs without the ServiceAccount admission plugin, which adds exactly that). What
//! Flux does with the Job (delete and re-create it with `force` on a new revision) the test does
//! itself; the real kustomize-controller doing it is for the e2e tier.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PropagationPolicy};
use serde_json::{Value, json};

use super::image::{in_cluster_env, osbx_image, service_account_volume};
use super::runtime::{runc_class_on_a_kata_node, runtime_class};
use super::{NodePlane, profile};
use crate::builder::TestProfile;
use crate::turns::{self, Need};

const NS: &str = "nd-acceptance";
/// The layer's probe namespace.
const PROBES: &str = "nd-acceptance-probes";

/// The node profile with a Kata pool on `class`, and an acceptance layer after the pools that
/// runs `nodes` and `kata.runtimeclass` every 5 s in `nd-acceptance`.
fn with_acceptance(image: &str, class: &str) -> TestProfile {
    profile().pool("vm", "kata", [0, 1, 0, 1]).pool_set("vm", "runtimeClassName", class).acceptance(
        json!({"image": image, "namespace": NS, "name": "acc", "interval": "5s",
                           "probeNamespace": PROBES,
                           "only": ["nodes.ready", "kata.runtimeclass"]}),
    )
}

/// The acceptance layer's objects as rendered, and the revision its Job checks.
pub(super) fn rendered(p: &TestProfile) -> (Vec<Value>, String) {
    let loaded = osbx::profile::from_value("node profile", &serde_saphyr::from_str(&p.yaml()).unwrap()).unwrap();
    let rendered = osbx::commands::renderer(None).unwrap().render(&loaded).unwrap();
    let objects: Vec<_> =
        rendered.objects().into_iter().filter(|o| o.layer == "acceptance").map(|o| o.object).collect();
    let a = loaded.profile.sections.acceptance.as_ref().unwrap();
    let revision = a.revision_in(objects.iter()).unwrap();
    (objects.into_iter().map(|o| o.value).collect(), revision)
}

/// The pod template of a Job or Deployment, pointed at the relay and given its token volume.
pub(super) fn on_this_node(node: &NodePlane, mut obj: Value) -> Value {
    let spec = &mut obj["spec"]["template"]["spec"];
    let (volume, mount) = service_account_volume();
    // The rendered pods mount a short-lived token of their own there (the projected volume
    // Kubernetes would add, with a shorter expiry): added only where the render has none.
    let mounts = &spec["containers"][0]["volumeMounts"];
    if !mounts.as_array().unwrap().iter().any(|m| m["mountPath"] == mount["mountPath"]) {
        spec["volumes"].as_array_mut().unwrap().push(volume);
        spec["containers"][0]["volumeMounts"].as_array_mut().unwrap().push(mount);
    }
    // The rendered env (who runs, from the downward API) and the relay's.
    let container = &mut spec["containers"][0];
    let mut env = container["env"].as_array().cloned().unwrap_or_default();
    env.extend(in_cluster_env(node).as_array().unwrap().iter().cloned());
    container["env"] = Value::Array(env);
    obj
}

async fn apply(client: &kube::Client, obj: &Value) {
    let (api, name) = crate::cluster::api_for(client, obj).await;
    api.patch(&name, &PatchParams::apply("osbx-node-test").force(), &Patch::Apply(obj)).await.unwrap();
}

/// Apply the layer's objects but its workloads (the namespaces the roles name created first), then
/// the Job `acc` in `ns` (the layer's namespace), the old one deleted first.
pub(super) async fn apply_layer(client: &kube::Client, node: &NodePlane, objects: &[Value], ns: &str) {
    let mut namespaces: Vec<&str> = objects.iter().filter_map(|o| o["metadata"]["namespace"].as_str()).collect();
    namespaces.sort_unstable();
    namespaces.dedup();
    for ns in namespaces {
        apply(client, &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await;
    }
    for o in objects.iter().filter(|o| !matches!(o["kind"].as_str(), Some("Job" | "Deployment"))) {
        apply(client, o).await;
    }
    // As Flux does with `kustomize.toolkit.fluxcd.io/force: enabled`: the old Job deleted, the new one created.
    let jobs = Api::<Job>::namespaced(client.clone(), ns);
    let dp = DeleteParams { propagation_policy: Some(PropagationPolicy::Foreground), ..DeleteParams::default() };
    let _ = jobs.delete("acc", &dp).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while jobs.get_opt("acc").await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "the old Job is not gone");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let job = objects.iter().find(|o| o["kind"] == "Job").unwrap().clone();
    apply(client, &on_this_node(node, job)).await;
}

/// The end of the Job `acc` in `ns`: `Complete` or `Failed` with its reason (within `limit`).
pub(super) async fn job_end(client: &kube::Client, ns: &str, limit: Duration) -> (String, String) {
    let jobs = Api::<Job>::namespaced(client.clone(), ns);
    let deadline = Instant::now() + limit;
    loop {
        let job = jobs.get("acc").await.unwrap();
        let ended = job
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| matches!(c.type_.as_str(), "Complete" | "Failed") && c.status == "True");
        if let Some(c) = ended {
            return (c.type_, c.reason.unwrap_or_default());
        }
        assert!(Instant::now() < deadline, "the Job did not end in {limit:?}: {}", logs(client, ns).await);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The logs of the pods in `ns`.
pub(super) async fn logs(client: &kube::Client, ns: &str) -> String {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let mut out = String::new();
    for p in pods.list(&ListParams::default()).await.unwrap() {
        let name = p.metadata.name.unwrap_or_default();
        let log = pods.logs(&name, &kube::api::LogParams::default()).await.unwrap_or_default();
        let _ = writeln!(out, "--- {name}\n{log}");
    }
    out
}

/// The report ConfigMap's (`acc-report` in `ns`) `report.json`.
pub(super) async fn report(client: &kube::Client, ns: &str) -> Value {
    let map = Api::<ConfigMap>::namespaced(client.clone(), ns).get("acc-report").await.unwrap();
    serde_json::from_str(&map.data.unwrap()["report.json"]).unwrap()
}

pub(super) fn outcome(report: &Value, id: &str) -> String {
    let checks = report["checks"].as_array().unwrap();
    let c = checks.iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("no {id} in {report:#}"));
    c["outcome"].as_str().unwrap().to_owned()
}

/// GET the serving pod's `/metrics` until `until` holds for the text; the text.
async fn scrape(client: &kube::Client, port: u16, until: impl Fn(&str) -> bool) -> String {
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let selector = ListParams::default().labels("app.kubernetes.io/component=acceptance-serve");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = String::new();
    while Instant::now() < deadline {
        let ip = pods.list(&selector).await.unwrap().items.into_iter().find_map(|p| p.status?.pod_ip);
        if let Some(ip) = ip
            && let Ok(r) = reqwest::get(format!("http://{ip}:{port}/metrics")).await
        {
            let content_type = r.headers()["content-type"].to_str().unwrap().to_owned();
            assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");
            last = r.text().await.unwrap();
            if until(&last) {
                return last;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("the metrics never showed what was awaited:\n{last}\n{}", logs(client, NS).await);
}

/// The rendered Job runs `osbx verify` in the image to completion: PASS (the pool's class has a
/// handler containerd has), the report published with the revision the render names, the serving
/// Deployment's metrics scraped; then a new revision (the pool moved to a class whose handler
/// containerd lacks) re-runs the Job, which fails by its `podFailurePolicy` (exit 1, no retry),
/// publishing the FAIL and a Warning Event per failed check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines, clippy::print_stderr)]
async fn the_acceptance_job_and_server_run_in_the_osbx_image() {
    let _turn = turns::take(Need::Node).await;
    let node = NodePlane::get();
    let client = node.client().await;
    let image = osbx_image(node);
    runc_class_on_a_kata_node(&client, node.var("NODE_NAME")).await;
    apply(&client, &runtime_class("kata-clh-runtime-rs", "kata-clh-runtime-rs")).await;

    // PASS.
    let (objects, revision) = rendered(&with_acceptance(image, "runc"));
    let started = Instant::now();
    apply_layer(&client, node, &objects, NS).await;
    let (end, reason) = job_end(&client, NS, Duration::from_secs(240)).await;
    eprintln!("node-bench: acceptance job PASS {:.1}s", started.elapsed().as_secs_f64());
    assert_eq!(end, "Complete", "{reason}: {}", logs(&client, NS).await);
    let r = report(&client, NS).await;
    assert_eq!((r["ready"].as_bool(), r["revision"].as_str()), (Some(true), Some(revision.as_str())), "{r:#}");
    assert_eq!(outcome(&r, "nodes.ready"), "PASS");
    assert_eq!(outcome(&r, "kata.runtimeclass"), "PASS");
    let map = Api::<ConfigMap>::namespaced(client.clone(), NS).get("acc-report").await.unwrap().data.unwrap();
    assert_eq!(map["revision"], revision);
    assert!(map["junit.xml"].contains("<testcase") && map["junit.xml"].contains("nodes.ready"), "{}", map["junit.xml"]);
    // The report names its writer as the real Job controller and kubelet made it (the downward
    // API's labels): the Job's name and uid, and the pod; when it ran; the criteria's digest.
    let job = Api::<Job>::namespaced(client.clone(), NS).get("acc").await.unwrap();
    let writer = &r["writer"];
    assert_eq!((writer["kind"].as_str(), writer["name"].as_str()), (Some("Job"), Some("acc")), "{r:#}");
    assert_eq!(writer["uid"].as_str(), job.metadata.uid.as_deref(), "{r:#}");
    assert!(writer["pod"].as_str().is_some_and(|p| p.starts_with("acc-")), "{r:#}");
    let (begun, ended) = (r["started"].as_str().unwrap(), r["time"].as_str().unwrap());
    assert!(!begun.is_empty() && begun <= ended, "{r:#}");
    let criteria = r["criteria"].as_str().unwrap().to_owned();
    assert_eq!(criteria.len(), 16, "{r:#}");
    let verdicts = || async {
        Api::<ConfigMap>::namespaced(client.clone(), NS).get("acc-report-verdicts").await.unwrap().data.unwrap()
    };
    let job_report =
        |map: &std::collections::BTreeMap<String, String>| serde_json::from_str::<Value>(&map["job.json"]).unwrap();
    assert!(!map.contains_key("job.json"), "the Job's report is beside the report, not in it");
    assert_eq!(job_report(&verdicts().await), r, "a Job's run is also the Job's report");

    // The serving pod: its metrics from the Job's report at once, then from its own runs.
    let serve = objects.iter().find(|o| o["kind"] == "Deployment").unwrap().clone();
    apply(&client, &on_this_node(node, serve)).await;
    let text = scrape(&client, 9464, |t| t.contains("osbx_acceptance_runs_total{result=\"ready\"} 2")).await;
    for line in [
        "osbx_acceptance_check{check=\"nodes.ready\",pool=\"\",state=\"pass\"} 1",
        "osbx_acceptance_check{check=\"nodes.ready\",pool=\"\",state=\"fail\"} 0",
        "osbx_acceptance_ready 1",
        &format!("osbx_acceptance_info{{revision=\"{revision}\"}} 1"),
    ] {
        assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
    }
    // Its own runs name the pod (published just after the metrics count them), and leave the
    // Job's report where it was.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (map, latest) = loop {
        let map = Api::<ConfigMap>::namespaced(client.clone(), NS).get("acc-report").await.unwrap().data.unwrap();
        let latest: Value = serde_json::from_str(&map["report.json"]).unwrap();
        if latest["writer"]["kind"] == "Pod" || Instant::now() > deadline {
            break (map, latest);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(latest["writer"]["kind"], "Pod", "{latest:#}");
    assert!(latest["writer"]["name"].as_str().is_some_and(|p| p.starts_with("acc-")), "{latest:#}");
    assert_eq!(
        (latest["revision"].as_str(), latest["criteria"].as_str()),
        (Some(revision.as_str()), Some(criteria.as_str()))
    );
    assert!(!map.contains_key("job.json"), "{map:?}");
    assert_eq!(job_report(&verdicts().await), r, "the serving pod replaced the Job's report");
    let deployments = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), NS);
    deployments.delete("acc", &DeleteParams::default()).await.unwrap();

    // A new revision: the pool on a class whose handler containerd lacks. FAIL.
    let (objects, broken) = rendered(&with_acceptance(image, "kata-clh-runtime-rs"));
    assert_ne!(broken, revision);
    let started = Instant::now();
    apply_layer(&client, node, &objects, NS).await;
    let (end, reason) = job_end(&client, NS, Duration::from_secs(240)).await;
    eprintln!("node-bench: acceptance job FAIL {:.1}s", started.elapsed().as_secs_f64());
    assert_eq!((end.as_str(), reason.as_str()), ("Failed", "PodFailurePolicy"), "{}", logs(&client, NS).await);
    let r = report(&client, NS).await;
    assert_eq!((r["ready"].as_bool(), r["revision"].as_str()), (Some(false), Some(broken.as_str())), "{r:#}");
    assert_eq!(outcome(&r, "kata.runtimeclass"), "FAIL");
    let events = Api::<Event>::namespaced(client.clone(), NS).list(&ListParams::default()).await.unwrap();
    let failed: Vec<String> = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("AcceptanceCheckFailed"))
        .filter_map(|e| e.message.clone())
        .collect();
    assert!(failed.iter().any(|m| m.starts_with("kata.runtimeclass FAIL: ")), "{failed:#?}");
    assert_eq!(
        events
            .items
            .iter()
            .find(|e| e.reason.as_deref() == Some("AcceptanceCheckFailed"))
            .unwrap()
            .involved_object
            .name
            .as_deref(),
        Some("acc-report")
    );
    for ns in [NS, PROBES] {
        let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .delete(ns, &DeleteParams::default())
            .await;
    }
}
