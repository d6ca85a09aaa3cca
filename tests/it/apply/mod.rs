//! `osbx apply` and `osbx diff` against a real kube-apiserver with the real CRDs; the stand-in
//! plays the Flux controllers and writes the Pools' status through the API.

use std::path::Path;
use std::process::Output;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::builder::TestProfile;
use crate::cluster::{self, OwnPlane, standin::Controllers};
use crate::support::{assert_golden, osbx, output_off_runtime, outputs};

mod changes;
mod faults;
mod preflight;
mod readiness;
mod secrets;

/// A profile whose namespaces all start with `p` (tests share one plane), with these pools.
fn profile(p: &str, pools: &[(&str, &str, [i64; 4])]) -> String {
    pools
        .iter()
        .fold(TestProfile::new(p), |profile, (name, runtime, capacity)| profile.pool(name, runtime, *capacity))
        .yaml()
}

fn controllers(p: &str) -> Controllers {
    Controllers {
        flux_namespaces: vec![format!("{p}-flux"), format!("{p}-system")],
        pool_namespaces: vec![format!("{p}-sbx")],
        ..Controllers::default()
    }
}

/// Run the osbx binary off the async runtime (the stand-in keeps running meanwhile).
async fn run(kubeconfig: &Path, dir: &Path, args: &[&str]) -> Output {
    let mut cmd = osbx();
    cmd.current_dir(dir).args(args).arg("--profile").arg(dir.join("profile.yaml")).arg("--kubeconfig").arg(kubeconfig);
    output_off_runtime(cmd).await
}

fn json_of(out: &Output) -> Value {
    let (stdout, stderr) = outputs(out);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: stdout={stdout} stderr={stderr}"))
}

fn actions(report: &Value) -> Vec<(String, String)> {
    report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["object"].as_str().unwrap().to_owned(), c["action"].as_str().unwrap().to_owned()))
        .collect()
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone()).patch(name, &PatchParams::apply("test"), &Patch::Apply(&ns)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_apply_reapply_change_and_prune_on_an_empty_cluster() {
    // "Flux installed": its CRDs and namespace. No OpenSandbox CRDs: the chart brings them.
    let (plane, client) = flux_installed(&["flux"], "lc-flux").await;
    let _controllers =
        Controllers { release_crds: vec![("opensandbox".into(), "opensandbox".into())], ..controllers("lc") }
            .spawn(client.clone());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("profile.yaml"),
        profile("lc", &[("pod", "runc", [1, 2, 1, 4]), ("vm", "kata", [0, 1, 0, 2])]),
    )
    .unwrap();

    // First apply: everything created, layer by layer, staged, and ready.
    let out = run(&plane.kubeconfig, dir.path(), &["apply", "-o", "json", "--timeout", "60s"]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report = json_of(&out);
    assert_eq!(report["ready"], true);
    let got = actions(&report);
    // Per layer: Namespaces (stage 1), then the rest by kind rank, group, kind, namespace, name.
    let expected = [
        "Namespace/lc-sbx",
        "Namespace/lc-system",
        "ConfigMap/lc-system/opensandbox-values",
        "HelmRelease/lc-system/opensandbox",
        "Kustomization/lc-flux/opensandbox",
        "GitRepository/lc-system/opensandbox",
        "Kustomization/lc-flux/opensandbox-pools",
        "Pool/lc-sbx/pod",
        "Pool/lc-sbx/vm",
    ];
    let subjects: Vec<&str> = got.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(subjects, expected, "apply order: definitions first, layers in dependsOn order");
    assert!(got.iter().all(|(_, a)| a == "created"), "{got:?}");
    assert!(report["requests"]["writes"].as_u64().unwrap() >= 9);

    // Re-apply: all unchanged, zero writes.
    let out = run(&plane.kubeconfig, dir.path(), &["apply", "-o", "json", "--timeout", "60s"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    let report = json_of(&out);
    assert!(actions(&report).iter().all(|(_, a)| a == "unchanged"), "{:?}", actions(&report));
    assert_eq!(report["requests"]["writes"], 0, "a no-op apply writes nothing: {}", report["requests"]);

    // diff agrees: nothing to do.
    let out = run(&plane.kubeconfig, dir.path(), &["diff"]).await;
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("0 to create, 0 to change, 9 unchanged, 0 to prune"), "{stdout}");

    // Change a pool and drop the other: diff shows both, apply --prune configures one and deletes
    // only the dropped one.
    std::fs::write(dir.path().join("profile.yaml"), profile("lc", &[("pod", "runc", [1, 3, 1, 6])])).unwrap();
    let out = run(&plane.kubeconfig, dir.path(), &["diff"]).await;
    let (stdout, _) = outputs(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("► Pool/lc-sbx/pod configured") && stdout.contains("+    bufferMax: 3"), "{stdout}");
    assert!(stdout.contains("► Pool/lc-sbx/vm deleted"), "{stdout}");
    assert!(stdout.contains("0 to create, 1 to change, 7 unchanged, 1 to prune"), "{stdout}");

    let out = run(&plane.kubeconfig, dir.path(), &["apply", "--prune", "-o", "json", "--timeout", "60s"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    let got = actions(&json_of(&out));
    let changed: Vec<&(String, String)> = got.iter().filter(|(_, a)| a != "unchanged").collect();
    assert_eq!(
        changed,
        [
            &("Pool/lc-sbx/pod".to_owned(), "configured".to_owned()),
            &("Pool/lc-sbx/vm".to_owned(), "deleted".to_owned())
        ]
    );
    let pools = pool_api(&client, "lc-sbx").await;
    assert!(pools.get_opt("vm").await.unwrap().is_none(), "dropped pool deleted");
    assert_eq!(pools.get("pod").await.unwrap().data["spec"]["capacitySpec"]["bufferMax"], 3);
}

/// The text output of `apply` and `diff` (stdout, and the summary line on stderr) is kept in
/// `tests/golden/`, like `examples/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_text_output_of_apply_and_diff_matches_the_golden_files() {
    let (plane, client) = flux_installed(&["flux"], "gd-flux").await;
    let _controllers =
        Controllers { release_crds: vec![("opensandbox".into(), "opensandbox".into())], ..controllers("gd") }
            .spawn(client.clone());
    let dir = tempfile::tempdir().unwrap();
    let write =
        |pools: &[(&str, &str, [i64; 4])]| std::fs::write(dir.path().join("profile.yaml"), profile("gd", pools));
    write(&[("pod", "runc", [1, 2, 1, 4]), ("vm", "kata", [0, 1, 0, 2])]).unwrap();
    // Data on stdout, then the last line on stderr (the outcome), without its glyph.
    let text = |out: &Output| {
        let (stdout, stderr) = outputs(out);
        let last = stderr.lines().last().unwrap_or_default();
        format!("{stdout}---\n{}\n", last.split_once(' ').map_or(last, |(_, rest)| rest))
    };
    let out = run(&plane.kubeconfig, dir.path(), &["apply", "--timeout", "60s"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    assert_golden("apply-first.txt", &text(&out));

    write(&[("pod", "runc", [1, 3, 1, 6])]).unwrap();
    let out = run(&plane.kubeconfig, dir.path(), &["diff"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", outputs(&out).1);
    assert_golden("diff-change-and-prune.txt", &outputs(&out).0);

    let out = run(&plane.kubeconfig, dir.path(), &["apply", "--prune", "--timeout", "60s"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    assert_golden("apply-change-and-prune.txt", &text(&out));
}

/// A plane of the test's own where Flux is installed: the CRDs of each of `crds`
/// (`tests/cluster/crds/<dir>`) and the namespace `flux_ns`; its admin client.
async fn flux_installed(crds: &[&str], flux_ns: &str) -> (OwnPlane, kube::Client) {
    let plane = tokio::task::spawn_blocking(OwnPlane::start).await.unwrap();
    let client = cluster::client_for(&plane.kubeconfig).await;
    for dir in crds {
        cluster::install_crds(&client, dir).await;
    }
    create_namespace(&client, flux_ns).await;
    (plane, client)
}

async fn pool_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let gvk = kube::core::GroupVersionKind::gvk("sandbox.opensandbox.io", "v1alpha1", "Pool");
    let (ar, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Shared-plane setup: all CRDs, the Flux namespace, and the profile on disk.
async fn setup(p: &str, pools: &[(&str, &str, [i64; 4])]) -> (kube::Client, tempfile::TempDir, std::path::PathBuf) {
    let client = cluster::client().await;
    cluster::install_all_crds().await;
    create_namespace(&client, &format!("{p}-flux")).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("profile.yaml"), profile(p, pools)).unwrap();
    (client, dir, cluster::plane().kubeconfig.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fresh_cluster_profile_brings_every_layer_up_in_order() {
    let (plane, client) = flux_installed(&["flux"], "flux-system").await;
    let _controllers = Controllers {
        flux_namespaces: ["flux-system", "kata-system", "spire-system", "opensandbox-system"]
            .map(String::from)
            .to_vec(),
        pool_namespaces: vec!["opensandbox".into()],
        // The charts bring their CRDs: SPIRE's with spire-crds, OpenSandbox's with its release.
        release_crds: vec![("spire-crds".into(), "spire".into()), ("opensandbox".into(), "opensandbox".into())],
        ..Controllers::default()
    }
    .spawn(client.clone());
    let dir = tempfile::tempdir().unwrap();
    // Without its acceptance layer first: nothing here runs the Job's pod (see below).
    let text = std::fs::read_to_string(crate::support::root().join("profiles/fresh-cluster.yaml")).unwrap();
    let mut without: Value = serde_saphyr::from_str(&text).unwrap();
    without["layers"].as_array_mut().unwrap().retain(|l| l["component"] != "acceptance");
    without.as_object_mut().unwrap().remove("acceptance");
    std::fs::write(dir.path().join("profile.yaml"), serde_saphyr::to_string(&without).unwrap()).unwrap();
    // `osbx apply -o json` of `profile` within `timeout`: its exit code, report and output.
    let apply = |profile: &str, timeout: &str| {
        let mut cmd = osbx();
        cmd.current_dir(dir.path())
            .args(["apply", "--profile", profile, "-o", "json", "--timeout", timeout, "--kubeconfig"])
            .arg(&plane.kubeconfig);
        async move {
            let out = output_off_runtime(cmd).await;
            let (stdout, stderr) = outputs(&out);
            let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}{stderr}"));
            (out.status.code(), report, format!("{stdout}{stderr}"))
        }
    };
    let (code, report, said) = apply("profile.yaml", "90s").await;
    assert_eq!(code, Some(0), "{said}");
    let got = actions(&report);
    assert!(got.iter().all(|(_, a)| a == "created"), "{got:?}");
    let first = |needle: &str| {
        got.iter().position(|(s, _)| s.contains(needle)).unwrap_or_else(|| panic!("{needle} not applied: {got:?}"))
    };
    // Layers in dependsOn order: kata, spire-agents, spire-smoke, opensandbox, pools.
    assert!(first("OCIRepository/kata-system/kata-deploy") < first("HelmRepository/spire-system/spire"));
    assert!(first("HelmRelease/spire-system/spire-agents") < first("ClusterSPIFFEID/sandbox-spire-smoke"));
    assert!(first("ClusterSPIFFEID/sandbox-spire-smoke") < first("HelmRelease/opensandbox-system/opensandbox"));
    assert!(first("HelmRelease/opensandbox-system/opensandbox") < first("Pool/opensandbox/vm"));
    assert_eq!(report["ready"], true);
    // The whole profile: the acceptance layer comes last, and apply waits for its Job, the
    // checks' verdict in the cluster; this plane has no kubelet to run it, so it is not ready
    // in time, and apply names it (exit 1).
    let (code, report, said) = apply("fresh-cluster", "5s").await;
    assert_eq!(code, Some(1), "{said}");
    let got = actions(&report);
    let created: Vec<&str> = got.iter().filter(|(_, a)| a == "created").map(|(s, _)| s.as_str()).collect();
    assert!(created.iter().any(|s| s.contains("Job/osbx-acceptance/osbx-acceptance")), "{got:?}");
    assert!(created.iter().all(|s| s.contains("acceptance")), "only the acceptance layer is new: {created:?}");
    assert_eq!(report["ready"], false);
    assert!(said.contains("Job/osbx-acceptance/osbx-acceptance"), "{said}");
}
