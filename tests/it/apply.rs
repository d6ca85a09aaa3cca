//! `osbx apply` and `osbx diff` against a real kube-apiserver with the real CRDs; the stand-in
//! plays the Flux controllers and the OpenSandbox controller through the API.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::builder::TestProfile;
use crate::cluster::{self, OwnPlane, standin::Controllers};
use crate::support::{assert_golden, osbx, outputs};

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
    let profile = dir.join("profile.yaml");
    let mut full: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    full.extend([
        "--profile".into(),
        profile.display().to_string(),
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
    ]);
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || osbx().current_dir(dir).args(full).output().unwrap()).await.unwrap()
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
    let plane = tokio::task::spawn_blocking(OwnPlane::start).await.unwrap();
    let client = cluster::client_for(&plane.kubeconfig).await;
    // "Flux installed": its CRDs and namespace. No OpenSandbox CRDs: the chart brings them.
    cluster::install_crds(&client, "flux").await;
    create_namespace(&client, "lc-flux").await;
    let _controllers = Controllers { chart_installs_crds: true, ..controllers("lc") }.spawn(client.clone());
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
    let plane = tokio::task::spawn_blocking(OwnPlane::start).await.unwrap();
    let client = cluster::client_for(&plane.kubeconfig).await;
    cluster::install_crds(&client, "flux").await;
    create_namespace(&client, "gd-flux").await;
    let _controllers = Controllers { chart_installs_crds: true, ..controllers("gd") }.spawn(client.clone());
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

/// Preflight checks every Flux kind the render contains, not a fixed list: the fresh-cluster
/// profile's kata layer renders an `OCIRepository`, so a Flux without it is refused before
/// anything is written (it used to write the namespaces, skip the source and exit 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flux_without_a_kind_the_render_uses_is_a_preflight_error_and_nothing_is_written() {
    let plane = tokio::task::spawn_blocking(OwnPlane::start).await.unwrap();
    let client = cluster::client_for(&plane.kubeconfig).await;
    cluster::install_crds_except(&client, "flux", &["source.toolkit.fluxcd.io_ocirepositories.yaml"]).await;
    create_namespace(&client, "flux-system").await;
    let dir = tempfile::tempdir().unwrap();
    let out = tokio::task::spawn_blocking({
        let kubeconfig = plane.kubeconfig.clone();
        move || {
            osbx()
                .args(["apply", "--no-wait", "--profile", "fresh-cluster", "--kubeconfig"])
                .arg(kubeconfig)
                .current_dir(dir.path())
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("it does not serve source.toolkit.fluxcd.io/v1 OCIRepository"), "{stderr}");
    let names: Vec<String> = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    for ns in ["kata-system", "spire-system", "opensandbox-system"] {
        assert!(!names.iter().any(|n| n == ns), "nothing written, but {ns} exists: {names:?}");
    }
}

async fn pool_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let gvk = kube::core::GroupVersionKind::gvk("sandbox.opensandbox.io", "v1alpha1", "Pool");
    let (ar, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    Api::namespaced_with(client.clone(), ns, &ar)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_flux_is_a_preflight_error_and_nothing_is_written() {
    let plane = tokio::task::spawn_blocking(OwnPlane::start).await.unwrap();
    let client = cluster::client_for(&plane.kubeconfig).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("profile.yaml"), profile("nf", &[("pod", "runc", [0, 1, 0, 2])])).unwrap();
    let out = run(&plane.kubeconfig, dir.path(), &["apply"]).await;
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("Flux is not installed on this cluster"), "{stderr}");
    assert!(stderr.contains("helm.toolkit.fluxcd.io/v2 HelmRelease") && stderr.contains("flux install"), "{stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("stack backtrace"), "{stderr}");
    let names: Vec<String> = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(!names.iter().any(|n| n.starts_with("nf-")), "nothing written: {names:?}");
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
async fn a_failed_helm_install_fails_fast_naming_the_release() {
    let (client, dir, kubeconfig) = setup("ff", &[("pod", "runc", [0, 1, 0, 2])]).await;
    let _c = Controllers { helm_install_fails: Some("chart requires kubeVersion >=1.99".into()), ..controllers("ff") }
        .spawn(client.clone());
    let start = Instant::now();
    let out = run(&kubeconfig, dir.path(), &["apply", "--timeout", "120s"]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(start.elapsed() < Duration::from_secs(60), "fails fast, not at the 120 s timeout");
    assert!(stderr.contains("failed early"), "{stderr}");
    assert!(
        stderr.contains(
            "HelmRelease/ff-system/opensandbox status: 'Failed': InstallFailed: chart requires kubeVersion >=1.99"
        ),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_ready_is_not_ready_and_the_timeout_names_what_is_stalled() {
    let (client, dir, kubeconfig) = setup("st", &[("pod", "runc", [0, 1, 0, 2])]).await;
    let _c = Controllers { stale: true, ..controllers("st") }.spawn(client.clone());
    let out = run(&kubeconfig, dir.path(), &["apply", "--timeout", "6s"]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("timeout waiting for"), "{stderr}");
    for subject in [
        "GitRepository/st-system/opensandbox",
        "HelmRelease/st-system/opensandbox",
        "Kustomization/st-flux/opensandbox",
    ] {
        assert!(
            stderr.contains(&format!("{subject} status: 'InProgress': generation 1 not yet observed (observed 0)")),
            "{subject}: {stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_without_capacity_times_out_naming_it() {
    let (client, dir, kubeconfig) = setup("pc", &[("pod", "runc", [1, 2, 1, 4])]).await;
    let _c = Controllers { pools_stay_empty: true, ..controllers("pc") }.spawn(client.clone());
    let out = run(&kubeconfig, dir.path(), &["apply", "--timeout", "8s"]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("Pool/pc-sbx/pod status: 'InProgress': no status yet"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_name_the_other_manager_and_force_takes_ownership() {
    let (client, dir, kubeconfig) = setup("cf", &[("pod", "runc", [0, 1, 0, 2])]).await;
    let out = run(&kubeconfig, dir.path(), &["apply", "--no-wait"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    // Someone else takes over the pool's capacity with their own field manager.
    let pools = pool_api(&client, "cf-sbx").await;
    let theirs = json!({"apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": "Pool", "metadata": {"name": "pod", "namespace": "cf-sbx"},
                        "spec": {"capacitySpec": {"bufferMax": 5, "bufferMin": 0, "poolMax": 9, "poolMin": 0}}});
    pools.patch("pod", &PatchParams::apply("ops-team").force(), &Patch::Apply(&theirs)).await.unwrap();

    let out = run(&kubeconfig, dir.path(), &["apply", "--no-wait"]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("Pool/cf-sbx/pod") && stderr.contains("conflict") && stderr.contains("\"ops-team\""),
        "{stderr}"
    );
    assert!(stderr.contains(".spec.capacitySpec.bufferMax") && stderr.contains("--force-conflicts"), "{stderr}");
    assert_eq!(pools.get("pod").await.unwrap().data["spec"]["capacitySpec"]["bufferMax"], 5, "nothing written");

    let out = run(&kubeconfig, dir.path(), &["apply", "--no-wait", "--force-conflicts"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    assert_eq!(pools.get("pod").await.unwrap().data["spec"]["capacitySpec"]["bufferMax"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_masks_secret_values_and_sets_exit_codes() {
    let (client, dir, kubeconfig) = setup("df", &[("pod", "runc", [0, 1, 0, 2])]).await;
    // A template override adds a Secret to the layer.
    let templates = dir.path().join("tpl");
    crate::support::write(
        &templates,
        "opensandbox/secret.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: extra\n  namespace: {{ opensandbox.namespaces.controlPlane }}\nstringData:\n  token: s3cr3t-new-value\n  same: unchanged-value\n",
    );
    let tpl = templates.display().to_string();
    let out = run(&kubeconfig, dir.path(), &["apply", "--no-wait", "--templates", &tpl]).await;
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    let out = run(&kubeconfig, dir.path(), &["diff", "--templates", &tpl]).await;
    assert_eq!(out.status.code(), Some(0), "in sync: {}", outputs(&out).0);

    // Someone changes the Secret in the cluster.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), "df-system");
    let patch = json!({"stringData": {"token": "old-live-value"}});
    secrets.patch("extra", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();

    for output in ["text", "json"] {
        let out = run(&kubeconfig, dir.path(), &["diff", "--templates", &tpl, "-o", output]).await;
        let (stdout, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
        for secret in
            ["s3cr3t-new-value", "old-live-value", "unchanged-value", "czNjcjN0", "b2xkLWxpdmU", "dW5jaGFuZ2Vk"]
        {
            assert!(!stdout.contains(secret) && !stderr.contains(secret), "{secret} leaked: {stdout}");
        }
        if output == "text" {
            assert!(stdout.contains("► Secret/df-system/extra configured"), "{stdout}");
            assert!(stdout.contains("*** (before)") && stdout.contains("*** (after)"), "{stdout}");
            assert!(stdout.contains("0 to create, 1 to change"), "{stdout}");
        } else {
            let v: Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(v["summary"]["change"], 1);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_changes_nothing_and_prints_the_change_set() {
    let (client, dir, kubeconfig) = setup("dr", &[("pod", "runc", [0, 1, 0, 2])]).await;
    let out = run(&kubeconfig, dir.path(), &["apply", "--dry-run", "-o", "json"]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report = json_of(&out);
    assert!(actions(&report).iter().all(|(_, a)| a == "created"), "{report}");
    assert_eq!(report["requests"]["writes"], 0, "{}", report["requests"]);
    let names: Vec<String> = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(!names.contains(&"dr-system".to_owned()), "nothing created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_user_is_refused_by_preflight_naming_what_is_missing() {
    let (client, dir, kubeconfig) = setup("ro", &[("pod", "runc", [0, 1, 0, 2])]).await;
    let viewer = cluster::user_kubeconfig(&kubeconfig, "ro-viewer", dir.path());
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "ro-viewer-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "ro-viewer"}]});
    let (api, name) = cluster::api_for(&client, &binding).await;
    api.patch(&name, &PatchParams::apply("test"), &Patch::Apply(&binding)).await.unwrap();

    let out = run(&viewer, dir.path(), &["apply"]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the current user may not do everything this apply needs"), "{stderr}");
    assert!(stderr.contains("cannot create namespaces (cluster-wide)"), "{stderr}");
    assert!(stderr.contains("cannot patch helmreleases.helm.toolkit.fluxcd.io in namespace ro-system"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_cluster_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("profile.yaml"), profile("ur", &[("pod", "runc", [0, 1, 0, 2])])).unwrap();
    // The shared plane's credentials, pointed at a port nothing listens on.
    let text = std::fs::read_to_string(&cluster::plane().kubeconfig).unwrap();
    let mut kc: Value = serde_saphyr::from_str(&text).unwrap();
    kc["clusters"][0]["cluster"]["server"] = json!("https://127.0.0.1:9");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, serde_json::to_string(&kc).unwrap()).unwrap();
    for cmd in ["apply", "diff"] {
        let out = run(&kubeconfig, dir.path(), &[cmd, "--request-timeout", "5s"]).await;
        let (_, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {stderr}");
        assert!(stderr.contains("cannot reach the cluster at https://127.0.0.1:9"), "{cmd}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncommitted_changes_in_the_flux_repo_are_a_warning() {
    let (_client, dir, kubeconfig) = setup("gw", &[("pod", "runc", [0, 1, 0, 2])]).await;
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let git = |args: &[&str]| {
        assert!(std::process::Command::new("git").arg("-C").arg(&repo).args(args).output().unwrap().status.success());
    };
    git(&["init", "-q"]);
    std::fs::write(repo.join("pending.yaml"), "kind: x\n").unwrap();
    let out = run(&kubeconfig, dir.path(), &["apply", "--dry-run", "--repo", &repo.display().to_string()]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("has 1 uncommitted change(s): Flux reconciles what is pushed"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fresh_cluster_profile_brings_every_layer_up_in_order() {
    let plane = tokio::task::spawn_blocking(OwnPlane::start).await.unwrap();
    let client = cluster::client_for(&plane.kubeconfig).await;
    cluster::install_crds(&client, "flux").await;
    create_namespace(&client, "flux-system").await;
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
    let cwd = dir.path().to_path_buf();
    let kubeconfig = plane.kubeconfig.display().to_string();
    let out = tokio::task::spawn_blocking(move || {
        osbx()
            .current_dir(cwd)
            .args([
                "apply",
                "--profile",
                "fresh-cluster",
                "-o",
                "json",
                "--timeout",
                "90s",
                "--kubeconfig",
                &kubeconfig,
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_secret_is_created_and_rotated_and_never_printed() {
    let (client, dir, kubeconfig) = setup("sk", &[("pod", "runc", [0, 1, 0, 2])]).await;
    let _c = controllers("sk").spawn(client.clone());
    let (k1, k2) = ("k1-9f8e7d6c5b4a", "k2-0a1b2c3d4e5f");
    let secrets = [k1, k2, "azEtOWY4ZTdkNmM1YjRh", "azItMGExYjJjM2Q0ZTVm"]; // the keys and their base64
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, format!("{k2}\n")).unwrap();
    let mut transcript = String::new();
    let mut go = |out: Output, expect: i32, what: &str| {
        let (stdout, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(expect), "{what}: {stdout}{stderr}");
        let _ = write!(transcript, "== {what}\n{stdout}{stderr}");
        stdout
    };
    let with_key = |args: &[&str], key: Option<&str>| {
        let profile = dir.path().join("profile.yaml");
        let mut full: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        full.extend(["--profile".into(), profile.display().to_string()]);
        let mut cmd = osbx();
        cmd.current_dir(dir.path()).args(full);
        if args[0] != "render" && args[0] != "lint" {
            cmd.arg("--kubeconfig").arg(&kubeconfig);
        }
        match key {
            Some(k) => cmd.env("OSBX_API_KEY", k),
            None => cmd.env_remove("OSBX_API_KEY"),
        };
        cmd.output().unwrap()
    };
    go(with_key(&["render", "--out", "repo"], Some(k1)), 0, "render");
    go(with_key(&["lint", "-o", "json"], Some(k1)), 0, "lint");
    let diff = go(with_key(&["diff"], Some(k1)), 1, "diff before apply");
    assert!(
        diff.contains("► Secret/sk-system/api-key created") && diff.contains("api-key: '***'")
            || diff.contains("api-key: \"***\""),
        "{diff}"
    );
    let apply = go(with_key(&["apply", "-o", "json", "--timeout", "60s"], Some(k1)), 0, "apply");
    assert!(apply.contains("\"object\": \"Secret/sk-system/api-key\""), "{apply}");
    go(with_key(&["diff"], Some(k1)), 0, "diff in sync");
    // Rotation from a file: masked before/after, then configured.
    let key_arg = key_file.display().to_string();
    let rotate = go(with_key(&["apply", "--dry-run", "--api-key-file", &key_arg], None), 0, "apply --dry-run rotate");
    assert!(rotate.contains("Secret/sk-system/api-key configured"), "{rotate}");
    let apply = go(with_key(&["apply", "--api-key-file", &key_arg, "--timeout", "60s"], None), 0, "apply rotate");
    assert!(apply.contains("Secret/sk-system/api-key configured"), "{apply}");
    let stored: k8s_openapi::api::core::v1::Secret =
        Api::namespaced(client.clone(), "sk-system").get("api-key").await.unwrap();
    assert_eq!(stored.data.unwrap()["api-key"].0, k2.as_bytes());
    let verify = go(
        with_key(&["verify", "--only", "opensandbox.server", "-o", "json", "--api-key-file", &key_arg], None),
        1,
        "verify",
    );
    assert!(verify.contains("opensandbox.server"), "{verify}");
    // A later apply --prune without a key keeps the Secret: osbx writes it only when given a key,
    // and never prunes it for not having been given one.
    let prune = go(with_key(&["apply", "--prune", "--timeout", "60s"], None), 0, "apply --prune without a key");
    assert!(!prune.contains("Secret/sk-system/api-key deleted"), "{prune}");
    let kept: k8s_openapi::api::core::v1::Secret =
        Api::namespaced(client.clone(), "sk-system").get("api-key").await.unwrap();
    assert_eq!(kept.data.unwrap()["api-key"].0, k2.as_bytes());
    let diff = go(with_key(&["diff"], None), 0, "diff without a key");
    assert!(!diff.contains("api-key"), "{diff}");
    // Errors too: a broken kubeconfig.
    let bad = dir.path().join("bad-kubeconfig");
    std::fs::write(&bad, "not: [a kubeconfig").unwrap();
    let out = osbx()
        .env("OSBX_API_KEY", k1)
        .args(["apply", "--profile"])
        .arg(dir.path().join("profile.yaml"))
        .arg("--kubeconfig")
        .arg(&bad)
        .output()
        .unwrap();
    go(out, 2, "apply with a broken kubeconfig");
    for secret in secrets {
        assert!(!transcript.contains(secret), "{secret} leaked:\n{transcript}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_api_server_mid_apply_is_a_clear_error_and_a_rerun_converges() {
    let plane = tokio::task::spawn_blocking(OwnPlane::start).await.unwrap();
    let client = cluster::client_for(&plane.kubeconfig).await;
    for dir in ["flux", "opensandbox"] {
        cluster::install_crds(&client, dir).await;
    }
    create_namespace(&client, "ka-flux").await;
    let dir = tempfile::tempdir().unwrap();
    let pools: Vec<(String, &str, [i64; 4])> = (0..12).map(|i| (format!("p{i}"), "runc", [0, 1, 0, 2])).collect();
    let pools: Vec<(&str, &str, [i64; 4])> = pools.iter().map(|(n, r, c)| (n.as_str(), *r, *c)).collect();
    std::fs::write(dir.path().join("profile.yaml"), profile("ka", &pools)).unwrap();

    // A slow apply (2 requests per second), killed part-way.
    let bin = assert_cmd::cargo::cargo_bin("osbx");
    let child = std::process::Command::new(bin)
        .current_dir(dir.path())
        .args([
            "apply",
            "--no-wait",
            "--qps",
            "2",
            "--request-timeout",
            "5s",
            "--profile",
            "profile.yaml",
            "--kubeconfig",
        ])
        .arg(&plane.kubeconfig)
        .env("OSBX_COLOR", "never")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pool_api = cluster::pool_api_in(&client, "ka-sbx").await;
    // Wait until the apply is in the middle of the pools.
    cluster::wait_for("some pools applied", Duration::from_secs(60), || {
        let pool_api = pool_api.clone();
        async move { (pool_api.list(&ListParams::default()).await.ok()?.items.len() >= 2).then_some(()) }
    })
    .await;
    let argv = plane.kill_apiserver();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("stack backtrace"), "{stderr}");
    let in_flight = stderr.lines().find(|l| l.starts_with("error:")).unwrap_or_default().to_owned();
    assert!(
        in_flight.contains("Pool/ka-sbx/p") || in_flight.contains("/ka-"),
        "the error names the object in flight: {stderr}"
    );

    // After a restart, the rerun converges: every object once, nothing lost, inventory complete.
    let (plane_dir, kc) = (plane.dir().to_path_buf(), plane.kubeconfig.clone());
    tokio::task::spawn_blocking(move || cluster::restart_apiserver_in(&plane_dir, &kc, &argv)).await.unwrap();
    // The inventory was written with the first objects: it already lists every pool, so what the
    // killed run created is tracked (and prunable) even though the run never finished.
    let client = cluster::client_for(&plane.kubeconfig).await;
    let inventories = Api::<ConfigMap>::namespaced(client, "ka-flux")
        .list(&kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=osbx"))
        .await
        .unwrap();
    let entries: Vec<Value> =
        serde_json::from_str(&inventories.items[0].data.as_ref().unwrap()["inventory.json"]).unwrap();
    for i in 0..12 {
        assert!(
            entries.iter().any(|e| e["kind"] == "Pool" && e["name"] == format!("p{i}") && e["created"] == true),
            "pool p{i} not in the inventory: {entries:?}"
        );
    }
    let out = run(&plane.kubeconfig, dir.path(), &["apply", "--no-wait", "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    let report = json_of(&out);
    let got = actions(&report);
    assert_eq!(got.len(), 19, "{got:?}");
    assert!(got.iter().all(|(_, a)| a == "created" || a == "unchanged"), "{got:?}");
    let client = cluster::client_for(&plane.kubeconfig).await;
    let pool_api = cluster::pool_api_in(&client, "ka-sbx").await;
    let mut names: Vec<String> =
        pool_api.list(&ListParams::default()).await.unwrap().into_iter().filter_map(|p| p.metadata.name).collect();
    names.sort();
    let mut want: Vec<String> = (0..12).map(|i| format!("p{i}")).collect();
    want.sort();
    assert_eq!(names, want, "no pool lost or duplicated");
    let out = run(&plane.kubeconfig, dir.path(), &["diff"]).await;
    assert_eq!(out.status.code(), Some(0), "converged: {}", outputs(&out).0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_credentials_and_a_wrong_context_are_distinct_actionable_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("profile.yaml"), profile("ex", &[("pod", "runc", [0, 1, 0, 2])])).unwrap();
    let kubeconfig = cluster::plane().kubeconfig.clone();
    let plane_dir = kubeconfig.parent().unwrap();
    // A client certificate from the plane's own CA that expired yesterday.
    let script = r#"
import datetime, sys
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID, ExtendedKeyUsageOID
ca_cert = x509.load_pem_x509_certificate(open(sys.argv[1], "rb").read())
ca_key = serialization.load_pem_private_key(open(sys.argv[2], "rb").read(), password=None)
key = ec.generate_private_key(ec.SECP256R1())
now = datetime.datetime.now(datetime.timezone.utc)
cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "admin"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters")]))
    .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
    .not_valid_before(now - datetime.timedelta(days=2)).not_valid_after(now - datetime.timedelta(days=1))
    .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    .sign(ca_key, hashes.SHA256()))
open(sys.argv[3], "wb").write(cert.public_bytes(serialization.Encoding.PEM))
open(sys.argv[4], "wb").write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
"#;
    let (crt, key) = (dir.path().join("expired.crt"), dir.path().join("expired.key"));
    let status = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(plane_dir.join("client-ca.crt"))
        .arg(plane_dir.join("client-ca.key"))
        .arg(&crt)
        .arg(&key)
        .status()
        .unwrap();
    assert!(status.success());
    let b64 = |p: &std::path::Path| {
        let out = std::process::Command::new("base64").arg("-w0").arg(p).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let mut kc: Value = serde_saphyr::from_str(&std::fs::read_to_string(&kubeconfig).unwrap()).unwrap();
    kc["users"][0]["user"] = json!({"client-certificate-data": b64(&crt), "client-key-data": b64(&key)});
    let expired = dir.path().join("expired.kubeconfig");
    std::fs::write(&expired, serde_json::to_string(&kc).unwrap()).unwrap();

    let out = run(&expired, dir.path(), &["apply"]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("401 Unauthorized") && stderr.contains("expired"), "{stderr}");

    let out = run(&kubeconfig, dir.path(), &["apply", "--context", "no-such-context"]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot load kubeconfig") && stderr.contains("no-such-context"), "{stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("stack backtrace"));
}
