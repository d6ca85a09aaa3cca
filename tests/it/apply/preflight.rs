//! What `apply` refuses before any write: a cluster without Flux (or without a kind the render
//! uses), a user without the permissions, a cluster it cannot reach; and the warning about a Flux
//! repository with changes Flux cannot see.

use crate::cluster::{self, OwnPlane};
use crate::support::{git, osbx, outputs};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use super::*;

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
    let names = cluster::namespace_names(&client).await;
    for ns in ["kata-system", "spire-system", "opensandbox-system"] {
        assert!(!names.iter().any(|n| n == ns), "nothing written, but {ns} exists: {names:?}");
    }
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
    let names = cluster::namespace_names(&client).await;
    assert!(!names.iter().any(|n| n.starts_with("nf-")), "nothing written: {names:?}");
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
    // Before any write: no namespace of the profile's, no inventory.
    let names = cluster::namespace_names(&client).await;
    assert!(!names.iter().any(|n| n == "ro-system" || n == "ro-sbx"), "nothing written: {names:?}");
    let inventories = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), "ro-flux");
    assert!(inventories.get_opt("osbx-inventory-ro-ro").await.unwrap().is_none(), "no inventory written");
}

/// A kind the cluster does not serve yet is reviewed too: on a cluster with Flux only (the Pool
/// CRD comes with the OpenSandbox chart, an earlier layer of the same run), a user allowed
/// everything but the OpenSandbox group is refused before the first write, naming the pools it
/// could not write; preflight used to skip the kinds discovery did not know, so the run stopped
/// halfway, after the chart's layer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_the_cluster_does_not_serve_yet_is_reviewed_before_any_write() {
    let (plane, client) = flux_installed(&["flux"], "fr-flux").await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("profile.yaml"), profile("fr", &[("pod", "runc", [0, 1, 0, 2])])).unwrap();
    let user = cluster::user_kubeconfig(&plane.kubeconfig, "fr-deployer", dir.path());
    let groups = [
        "",
        "apps",
        "authorization.k8s.io",
        "source.toolkit.fluxcd.io",
        "kustomize.toolkit.fluxcd.io",
        "helm.toolkit.fluxcd.io",
    ];
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "fr-deployer"},
        "rules": [{"apiGroups": groups, "resources": ["*"], "verbs": ["*"]}, {"nonResourceURLs": ["*"], "verbs": ["get"]}]});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "fr-deployer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "fr-deployer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "fr-deployer"}]});
    for obj in [&role, &binding] {
        let (api, name) = cluster::api_for(&client, obj).await;
        api.patch(&name, &PatchParams::apply("test"), &Patch::Apply(obj)).await.unwrap();
    }

    let out = run(&user, dir.path(), &["apply", "--timeout", "20s"]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the current user may not do everything this apply needs"), "{stderr}");
    assert!(stderr.contains("pools.sandbox.opensandbox.io in namespace fr-sbx"), "{stderr}");
    let names = cluster::namespace_names(&client).await;
    assert!(!names.iter().any(|n| n == "fr-system" || n == "fr-sbx"), "nothing written: {names:?}");
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
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("pending.yaml"), "kind: x\n").unwrap();
    let out = run(&kubeconfig, dir.path(), &["apply", "--dry-run", "--repo", &repo.display().to_string()]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("has 1 uncommitted change(s): Flux reconciles what is pushed"), "{stderr}");
}
