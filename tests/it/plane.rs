//! The render against a real kube-apiserver with the real upstream CRDs: the schema check of
//! `osbx render`'s output, field round-trips, and the stand-in itself.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::cluster::{self, api_for, standin};
use crate::support::shipped_profiles;

fn render(profile: &str) -> Vec<osbx::render::RenderedObject> {
    let loaded = osbx::profile::load(&osbx::profile::ProfileSource::from_arg(Some(profile))).unwrap();
    let renderer = osbx::commands::renderer(None).unwrap();
    renderer.render(&loaded).unwrap().objects()
}

/// Paths present in `want` but missing or different in `got` (a server that drops or rewrites a
/// field the render set).
fn dropped(want: &Value, got: &Value, at: &str, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Null, _) => {}
        (Value::Object(w), Value::Object(g)) => {
            for (k, v) in w {
                match g.get(k) {
                    Some(gv) => dropped(v, gv, &format!("{at}.{k}"), out),
                    None => out.push(format!("{at}.{k}")),
                }
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                dropped(wv, gv, &format!("{at}[{i}]"), out);
            }
        }
        _ if want == got => {}
        _ => out.push(format!("{at}: {want} != {got}")),
    }
}

#[tokio::test]
async fn server_reports_the_pinned_kubernetes_version() {
    let client = cluster::client().await;
    let v = client.apiserver_version().await.unwrap();
    assert_eq!((v.major.as_str(), v.minor.as_str()), ("1", "36"), "{v:?}");
    assert!(v.git_version.starts_with("v1.36."), "{v:?}");
}

#[tokio::test]
async fn every_rendered_object_passes_a_server_side_dry_run_apply() {
    let client = cluster::client().await;
    cluster::install_all_crds().await;
    for profile in shipped_profiles() {
        let profile = profile.as_str();
        let objects = render(profile);
        assert!(objects.len() >= 8, "{profile}: {} objects", objects.len());
        // Namespaces first, for real (namespaced dry-runs need them), then everything dry-run.
        cluster::ensure_namespaces(&client, &objects).await;
        for o in &objects {
            let (api, name) = api_for(&client, &o.object.value).await;
            let result = api.patch(&name, &PatchParams::apply("osbx").dry_run(), &Patch::Apply(&o.object.value)).await;
            let live = result
                .unwrap_or_else(|e| panic!("{profile}: {} {}/{name} rejected: {e}", o.path, o.object.value["kind"]));
            let mut lost = Vec::new();
            let live = serde_json::to_value(&live).unwrap();
            dropped(&o.object.value["spec"], &live["spec"], "spec", &mut lost);
            dropped(&o.object.value["data"], &live["data"], "data", &mut lost);
            assert!(
                lost.is_empty(),
                "{profile}: {} {}/{name}: the server dropped {lost:?}",
                o.path,
                o.object.value["kind"]
            );
        }
    }
}

#[tokio::test]
async fn pools_and_batchsandboxes_from_rendered_objects_round_trip() {
    let client = cluster::client().await;
    cluster::install_all_crds().await;
    let ns = cluster::namespace(&client, "roundtrip").await;
    for profile in ["default", "homelab"] {
        for o in render(profile).into_iter().filter(|o| o.object.value["kind"] == "Pool") {
            let mut pool = o.object.value.clone();
            let name = format!("{profile}-{}", pool["metadata"]["name"].as_str().unwrap());
            pool["metadata"] = json!({"name": name, "namespace": ns});
            // Every optional Pool field the render supports, so that a schema drop shows.
            pool["spec"]["scaleStrategy"] = json!({"maxUnavailable": "25%"});
            pool["spec"]["updateStrategy"] = json!({"maxUnavailable": 1});
            pool["spec"]["recycleStrategy"] = json!({"type": "Delete"});
            let (api, _) = api_for(&client, &pool).await;
            let created =
                api.create(&PostParams::default(), &serde_json::from_value(pool.clone()).unwrap()).await.unwrap();
            let created = serde_json::to_value(created).unwrap();
            let mut lost = Vec::new();
            dropped(&pool["spec"], &created["spec"], "spec", &mut lost);
            assert!(lost.is_empty(), "Pool {name}: fields dropped by the CRD schema: {lost:?}");

            // What the OpenSandbox server creates for a pooled sandbox, and a template-mode one
            // built from the same pod template.
            for (suffix, spec) in [
                ("pooled", json!({"replicas": 1, "poolRef": name, "expireTime": "2030-01-01T00:00:00Z"})),
                (
                    "template",
                    json!({"replicas": 2, "template": pool["spec"]["template"],
                    "taskTemplate": {"spec": {"process": {"command": ["tail", "-f", "/dev/null"]}, "timeoutSeconds": 60}}}),
                ),
            ] {
                let bsbx = json!({"apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": "BatchSandbox",
                                  "metadata": {"name": format!("{name}-{suffix}"), "namespace": ns}, "spec": spec});
                let (api, _) = api_for(&client, &bsbx).await;
                let created: DynamicObject =
                    api.create(&PostParams::default(), &serde_json::from_value(bsbx.clone()).unwrap()).await.unwrap();
                let created = serde_json::to_value(created).unwrap();
                let mut lost = Vec::new();
                dropped(&bsbx["spec"], &created["spec"], "spec", &mut lost);
                assert!(lost.is_empty(), "BatchSandbox {name}-{suffix}: fields dropped: {lost:?}");
            }
        }
    }
}

#[tokio::test]
async fn standin_terminates_a_pod_with_a_message_a_client_reads_back() {
    let client = cluster::client().await;
    let ns = cluster::namespace(&client, "standin").await;
    standin::node(
        &client,
        "it-node-standin",
        &standin::NodeState {
            ready: true,
            kernel: "6.8.0-host",
            runtime_handlers: Some(&["runc", "kata-clh-runtime-rs"]),
            labels: json!({"katacontainers.io/kata-runtime": "true"}),
        },
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "probe"}, "spec": {
        "restartPolicy": "Never", "activeDeadlineSeconds": 60,
        "containers": [{"name": "probe", "image": "busybox:1.36", "command": ["uname", "-r"]}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    standin::pod_running(&client, &ns, "probe", "it-node-standin").await;
    let running = pods.get("probe").await.unwrap();
    assert_eq!(running.spec.unwrap().node_name.as_deref(), Some("it-node-standin"));
    assert_eq!(running.status.unwrap().phase.as_deref(), Some("Running"));

    let message = r#"{"check":"kata-guest-kernel","ok":true,"evidence":{"kernel":"6.18.35"}}"#;
    standin::pod_terminated(&client, &ns, "probe", 0, message).await;
    let done = cluster::wait_for("terminated probe", Duration::from_secs(10), || {
        let pods = pods.clone();
        async move {
            let status = pods.get("probe").await.ok()?.status?;
            let term = status.container_statuses?.first()?.state.clone()?.terminated?;
            Some((status.phase, term))
        }
    })
    .await;
    assert_eq!(done.0.as_deref(), Some("Succeeded"));
    assert_eq!(done.1.exit_code, 0);
    assert_eq!(done.1.message.as_deref(), Some(message));

    let node = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone()).get("it-node-standin").await.unwrap();
    let status = node.status.unwrap();
    assert_eq!(status.node_info.unwrap().kernel_version, "6.8.0-host");
    let handlers: Vec<String> =
        status.runtime_handlers.unwrap_or_default().into_iter().filter_map(|h| h.name).collect();
    assert!(handlers.contains(&"kata-clh-runtime-rs".to_owned()), "{handlers:?}");
}

#[tokio::test]
async fn standin_sets_flux_readiness_with_observed_generation() {
    let client = cluster::client().await;
    cluster::install_all_crds().await;
    let ns = cluster::namespace(&client, "flux").await;
    let ks = json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "layer", "namespace": ns},
        "spec": {"interval": "10m", "path": "./platform/x", "prune": true, "sourceRef": {"kind": "GitRepository", "name": "flux-system"}}});
    let (api, name) = api_for(&client, &ks).await;
    api.patch(&name, &PatchParams::apply("osbx-test"), &Patch::Apply(&ks)).await.unwrap();
    let ar = kube::discovery::pinned_kind(
        &client,
        &kube::core::GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization"),
    )
    .await
    .unwrap()
    .0;
    let obj = standin::flux_ready(
        &client,
        &ar,
        &ns,
        "layer",
        &standin::Ready {
            status: true,
            reason: "ReconciliationSucceeded",
            message: "Applied revision: main@sha1:abc",
            observed: Some(0),
        },
    )
    .await;
    let v = serde_json::to_value(&obj).unwrap();
    assert_eq!(v["metadata"]["generation"], 1);
    assert_eq!(v["status"]["observedGeneration"], 0, "a stale Ready can be modelled");
    assert_eq!(v["status"]["conditions"][0]["reason"], "ReconciliationSucceeded");
}

/// The pools layer's Kustomization in the render of `doc`, and the render's Pools.
fn pools_layer(doc: &Value) -> (Value, Vec<Value>) {
    let loaded = osbx::profile::from_value("profile.yaml", doc).unwrap();
    let objects = osbx::commands::renderer(None).unwrap().render(&loaded).unwrap().objects();
    let kustomization = objects
        .iter()
        .find(|o| {
            o.object.value["kind"] == "Kustomization" && o.object.value["metadata"]["name"] == "opensandbox-pools"
        })
        .expect("the pools layer's Kustomization")
        .object
        .value
        .clone();
    let pools = objects.iter().filter(|o| o.object.value["kind"] == "Pool").map(|o| o.object.value.clone()).collect();
    (kustomization, pools)
}

#[tokio::test]
async fn a_pools_layer_that_does_not_wait_lists_its_pools_for_flux_to_health_check() {
    let profile =
        crate::builder::TestProfile::new("nowait").pool("pod", "runc", [1, 2, 1, 4]).pool("big", "runc", [0, 1, 0, 8]);
    let mut doc: Value = serde_saphyr::from_str(&profile.yaml()).unwrap();
    // `wait: true` (the default): Flux health-checks everything the layer applies and ignores
    // `healthChecks`, so none is written.
    let (waits, _) = pools_layer(&doc);
    assert_eq!(waits["spec"]["wait"], true, "{waits:#}");
    assert!(waits["spec"].get("healthChecks").is_none(), "{waits:#}");
    // `wait: false`: Flux evaluates `healthCheckExprs` only for the objects `healthChecks`
    // lists, so every Pool is listed, and nothing else.
    doc["layers"][1]["wait"] = json!(false);
    let (k, pools) = pools_layer(&doc);
    assert_eq!(pools.len(), 2);
    let listed: Vec<Value> = pools
        .iter()
        .map(|p| {
            json!({"apiVersion": p["apiVersion"], "kind": "Pool", "name": p["metadata"]["name"],
                   "namespace": p["metadata"]["namespace"]})
        })
        .collect();
    assert_eq!(k["spec"]["wait"], false, "{k:#}");
    assert_eq!(k["spec"]["healthChecks"], Value::Array(listed), "{k:#}");
    assert_eq!(k["spec"]["healthCheckExprs"], waits["spec"]["healthCheckExprs"], "the same rule either way");
    // The real Kustomization CRD keeps both fields as written.
    let client = cluster::client().await;
    cluster::install_all_crds().await;
    let loaded = osbx::profile::from_value("profile.yaml", &doc).unwrap();
    let objects = osbx::commands::renderer(None).unwrap().render(&loaded).unwrap().objects();
    cluster::ensure_namespaces(&client, &objects).await;
    let (api, name) = api_for(&client, &k).await;
    let live = api.patch(&name, &PatchParams::apply("osbx").dry_run(), &Patch::Apply(&k)).await.unwrap();
    let mut lost = Vec::new();
    dropped(&k["spec"], &serde_json::to_value(&live).unwrap()["spec"], "spec", &mut lost);
    assert!(lost.is_empty(), "the server dropped {lost:?}");
}
