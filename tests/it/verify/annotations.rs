//! `kata.annotations` and the kata layer's admission policy against the real API server (a plane
//! of the test's own: the policy is cluster-scoped). Before the policy is applied the check FAILs
//! naming the fix (a sandbox pod carrying `io.katacontainers.config.hypervisor.kernel_params` is
//! admitted); once the rendered policy and bindings are applied, the API server denies it naming
//! the policy and admits each pool's own pod, so the check PASSes, and nothing is created. The
//! policy itself: a pool's allowed annotation is admitted for that pool's pods only, and verify's
//! probe namespaces are covered by the second binding.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::builder::TestProfile;
use crate::cluster::{self, OwnPlane};
use crate::support::{osbx, outputs};

const POLICY: &str = "osbx-kata-annotations";
const MEMORY: &str = "io.katacontainers.config.hypervisor.default_memory";
const KERNEL: &str = "io.katacontainers.config.hypervisor.kernel_params";

fn profile() -> TestProfile {
    TestProfile::new("ka")
        .set(
            "layers",
            json!([
                {"name": "kata", "component": "kata"},
                {"name": "opensandbox", "component": "opensandbox"},
                {"name": "opensandbox-pools", "component": "pools", "dependsOn": ["opensandbox", "kata"]},
            ]),
        )
        .set("kata", json!({"shims": ["clh-runtime-rs"]}))
        .pool("pod", "runc", [0, 1, 0, 1])
        .pool("vm", "kata", [0, 1, 0, 1])
        .pool("vm-big", "kata", [0, 1, 0, 1])
        .pool_set("vm-big", "kata", json!({"allowedAnnotations": [MEMORY]}))
}

async fn apply(client: &kube::Client, obj: &Value) {
    let (api, name) = cluster::api_for(client, obj).await;
    api.patch(&name, &PatchParams::apply("test").force(), &Patch::Apply(obj)).await.unwrap();
}

async fn verify(dir: &std::path::Path, kubeconfig: &std::path::Path) -> (Option<i32>, Value) {
    let (dir, kubeconfig) = (dir.to_path_buf(), kubeconfig.to_path_buf());
    let out = tokio::task::spawn_blocking(move || {
        osbx()
            .current_dir(&dir)
            .args(["verify", "--only", "kata.annotations", "-o", "json", "--profile"])
            .arg(dir.join("profile.yaml"))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let (stdout, stderr) = outputs(&out);
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
    let check = v["checks"].as_array().unwrap().iter().find(|c| c["id"] == "kata.annotations").cloned();
    (out.status.code(), check.unwrap_or_else(|| panic!("no kata.annotations in {v}")))
}

/// A pool's pod as the controller makes it (its label), with `annotations`, dry-run created.
async fn dry_run(client: &kube::Client, ns: &str, pool: &str, annotations: Value) -> Result<(), String> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"generateName": "t-", "labels": {"sandbox.opensandbox.io/pool-name": pool}, "annotations": annotations},
        "spec": {"runtimeClassName": "kata-clh-runtime-rs", "containers": [{"name": "sandbox", "image": "example.com/sandbox:v1"}]},
    }))
    .unwrap();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.create(&PostParams { dry_run: true, ..PostParams::default() }, &pod)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The denial of [`dry_run`]'s pod, once the API server has the policy and the binding that
/// covers `ns` in effect (it compiles and syncs them asynchronously); fails after 30 s.
async fn denied_in_time(client: &kube::Client, ns: &str, pool: &str, annotations: Value) -> String {
    let start = Instant::now();
    loop {
        if let Err(denied) = dry_run(client, ns, pool, annotations.clone()).await {
            return denied;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "the policy never took effect in {ns}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_policy_denies_annotated_sandbox_pods_and_kata_annotations_proves_it() {
    let plane = tokio::task::spawn_blocking(OwnPlane::start).await.unwrap();
    let client = cluster::client_for(&plane.kubeconfig).await;
    cluster::install_crds(&client, "opensandbox").await;
    let dir = tempfile::tempdir().unwrap();
    let p = profile();
    p.write_to(dir.path());
    let loaded = osbx::profile::load(&osbx::profile::ProfileSource::File(dir.path().join("profile.yaml")))
        .unwrap_or_else(|e| panic!("{e}"));
    let rendered = osbx::commands::renderer(None).unwrap().render(&loaded).unwrap_or_else(|e| panic!("{e}"));
    let objects: Vec<Value> = rendered.objects().into_iter().map(|o| o.object.value).collect();
    let kinds = |k: &str| objects.iter().filter(|o| o["kind"] == k).cloned().collect::<Vec<_>>();
    let policy = kinds("ValidatingAdmissionPolicy");
    let bindings = kinds("ValidatingAdmissionPolicyBinding");
    assert_eq!((policy.len(), bindings.len()), (1, 2), "the kata layer renders one policy and two bindings");
    // What the pools need to exist: their namespace, their RuntimeClass (kata-deploy's), the Pools.
    apply(&client, &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ka-sbx"}})).await;
    apply(
        &client,
        &json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata-clh-runtime-rs"}, "handler": "kata-clh-runtime-rs"}),
    )
    .await;
    for pool in kinds("Pool") {
        apply(&client, &pool).await;
    }

    // No policy: the annotated pod is admitted, and the check fails naming the fix.
    let (code, c) = verify(dir.path(), &plane.kubeconfig).await;
    assert_eq!((code, c["outcome"].as_str()), (Some(1), Some("FAIL")), "{c}");
    assert!(c["evidence"].as_str().unwrap().contains(KERNEL), "{c}");
    assert!(c["fix"].as_str().unwrap().contains(POLICY) && c["fix"].as_str().unwrap().contains("kata layer"), "{c}");

    // Pods that exist before the policy: one carrying an annotation, one without.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ka-sbx");
    for (name, annotations) in [("early", json!({KERNEL: "x"})), ("plain", json!({}))] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"sandbox.opensandbox.io/pool-name": "vm"}, "annotations": annotations},
            "spec": {"runtimeClassName": "kata-clh-runtime-rs", "containers": [{"name": "sandbox", "image": "example.com/sandbox:v1"}]},
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }

    for o in policy.iter().chain(&bindings) {
        apply(&client, o).await;
    }
    // The API server compiles the policy and syncs the bindings asynchronously.
    denied_in_time(&client, "ka-sbx", "vm", json!({KERNEL: "x"})).await;
    let denied = dry_run(&client, "ka-sbx", "vm", json!({KERNEL: "agent.debug_console"})).await.unwrap_err();
    assert!(denied.contains(POLICY) && denied.contains(KERNEL), "{denied}");
    dry_run(&client, "ka-sbx", "vm", json!({})).await.expect("a pool's own pod is admitted");
    dry_run(&client, "ka-sbx", "vm-big", json!({MEMORY: "8192"})).await.expect("vm-big is allowed default_memory");
    let other = dry_run(&client, "ka-sbx", "vm", json!({MEMORY: "8192"})).await.unwrap_err();
    assert!(other.contains(POLICY), "default_memory is vm-big's only: {other}");
    let beyond = dry_run(&client, "ka-sbx", "vm-big", json!({MEMORY: "8192", KERNEL: "x"})).await.unwrap_err();
    assert!(beyond.contains(KERNEL) && !beyond.contains(MEMORY), "vm-big may set default_memory only: {beyond}");
    // A probe namespace as verify labels it (made now: verify's sweep deletes one of no live run).
    let labels = json!({"app.kubernetes.io/managed-by": "osbx-verify"});
    apply(
        &client,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "osbx-verify-probe", "labels": labels}}),
    )
    .await;
    // The second binding (the probe namespaces') syncs on its own: the wait above proved the first.
    let probe = denied_in_time(&client, "osbx-verify-probe", "vm-big", json!({MEMORY: "8192"})).await;
    assert!(probe.contains(POLICY), "verify's probe namespaces are covered: {probe}");

    // Updates: a pod made before the policy stays updatable with the annotation it has (a
    // controller removing a finalizer, say); adding or changing one is denied.
    let merge = |patch: Value| Patch::Merge(patch);
    pods.patch("early", &PatchParams::default(), &merge(json!({"metadata": {"labels": {"touched": "yes"}}})))
        .await
        .expect("an annotation the pod already had does not block its updates");
    let changed = pods
        .patch("early", &PatchParams::default(), &merge(json!({"metadata": {"annotations": {KERNEL: "y"}}})))
        .await
        .unwrap_err()
        .to_string();
    assert!(changed.contains(POLICY), "a changed annotation is denied: {changed}");
    let added = pods
        .patch("plain", &PatchParams::default(), &merge(json!({"metadata": {"annotations": {KERNEL: "x"}}})))
        .await
        .unwrap_err()
        .to_string();
    assert!(added.contains(POLICY), "an added annotation is denied: {added}");
    for name in ["early", "plain"] {
        pods.delete(name, &kube::api::DeleteParams { grace_period_seconds: Some(0), ..Default::default() })
            .await
            .unwrap();
    }
    let start = Instant::now();
    while !pods.list(&ListParams::default()).await.unwrap().items.is_empty() {
        assert!(start.elapsed() < Duration::from_secs(30), "the test's pods were never deleted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let (code, c) = verify(dir.path(), &plane.kubeconfig).await;
    assert_eq!((code, c["outcome"].as_str()), (Some(0), Some("PASS")), "{c}");
    let evidence = c["evidence"].as_str().unwrap();
    for pool in ["vm", "vm-big"] {
        assert!(evidence.contains(&format!("pool {pool}'s pod")), "{pool} not proven: {evidence}");
    }
    assert!(evidence.contains(POLICY) && evidence.contains("own pod admitted"), "{evidence}");
    assert!(evidence.contains(KERNEL), "vm is tried with kernel_params: {evidence}");
    // Dry runs only: no pod exists.
    let pods = Api::<Pod>::all(client.clone()).list(&ListParams::default()).await.unwrap();
    assert_eq!(pods.items.len(), 0, "the check created pods");
}
