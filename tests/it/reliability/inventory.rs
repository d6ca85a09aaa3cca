//! Two applies at once: the inventory is written with optimistic concurrency, so whatever the
//! interleaving, it lists every object either apply created, and a later `--prune` deletes
//! exactly the stale ones.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::builder::TestProfile;
use crate::cluster;
use crate::support::outputs;

/// Rounds of two concurrent applies (each round a new pair of pools, so a lost update shows).
const ROUNDS: usize = 20;

async fn create_namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone()).patch(name, &PatchParams::apply("test"), &Patch::Apply(&ns)).await.unwrap();
}

fn write_profile(dir: &Path, file: &str, profile: &TestProfile) -> PathBuf {
    let path = dir.join(file);
    std::fs::write(&path, profile.yaml()).unwrap();
    path
}

/// Start `osbx apply --no-wait` for each profile at the same moment; their outputs.
async fn apply_together(kubeconfig: &Path, profiles: &[PathBuf], extra: &[&str]) -> Vec<Output> {
    let kubeconfig = kubeconfig.to_path_buf();
    let profiles = profiles.to_vec();
    let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let children: Vec<_> = profiles
            .iter()
            .map(|p| {
                std::process::Command::new(env!("CARGO_BIN_EXE_osbx"))
                    .env("OSBX_COLOR", "never")
                    .args(["apply", "--no-wait", "-o", "json", "--profile"])
                    .arg(p)
                    .arg("--kubeconfig")
                    .arg(&kubeconfig)
                    .args(&extra)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        children.into_iter().map(|c| c.wait_with_output().unwrap()).collect()
    })
    .await
    .unwrap()
}

/// The inventory's object subjects (`Kind/ns/name`) and whether osbx created each.
async fn inventory(client: &kube::Client, ns: &str, name: &str) -> Vec<(String, bool)> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns).get(name).await.unwrap();
    let text = cm.data.unwrap()["inventory.json"].clone();
    let entries: Vec<Value> = serde_json::from_str(&text).unwrap();
    entries
        .iter()
        .map(|e| {
            let ns = e["namespace"].as_str().map(|n| format!("{n}/")).unwrap_or_default();
            (format!("{}/{ns}{}", e["kind"].as_str().unwrap(), e["name"].as_str().unwrap()), e["created"] == true)
        })
        .collect()
}

async fn pool_names(client: &kube::Client, ns: &str) -> BTreeSet<String> {
    let gvk = kube::core::GroupVersionKind::gvk("sandbox.opensandbox.io", "v1alpha1", "Pool");
    let (ar, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    api.list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_applies_of_one_profile_at_once_lose_no_inventory_entry() {
    let client = cluster::client().await;
    cluster::install_all_crds().await;
    create_namespace(&client, "ic-flux").await;
    let kubeconfig = cluster::plane().kubeconfig.clone();
    let dir = tempfile::tempdir().unwrap();
    let base = TestProfile::new("ic").pool("base", "runc", [0, 1, 0, 2]);
    // Two pipelines apply two versions of the same profile (same inventory): each adds a pool
    // of its own, so an inventory write that drops the other's entries shows.
    let mut expected: BTreeSet<String> = BTreeSet::from(["base".to_owned()]);
    for round in 0..ROUNDS {
        let (a, b) = (format!("a{round}"), format!("b{round}"));
        let mut pa = base.clone();
        let mut pb = base.clone();
        for r in 0..=round {
            pa = pa.pool(&format!("a{r}"), "runc", [0, 1, 0, 2]);
            pb = pb.pool(&format!("b{r}"), "runc", [0, 1, 0, 2]);
        }
        let profiles = [write_profile(dir.path(), "a.yaml", &pa), write_profile(dir.path(), "b.yaml", &pb)];
        // Both succeed: a run retries its inventory write while the other's write came between
        // its read and its write, and the other writes it at most twice (before its first stage,
        // and at the end when it pruned), far fewer times than a run tries (8) before it stops
        // with `another osbx apply of this profile is running`.
        for out in apply_together(&kubeconfig, &profiles, &[]).await {
            assert_eq!(out.status.code(), Some(0), "round {round}: {}", outputs(&out).1);
        }
        expected.extend([a, b]);
        let listed: BTreeSet<String> = inventory(&client, "ic-flux", "osbx-inventory-ic-ic")
            .await
            .into_iter()
            .filter_map(|(s, created)| s.strip_prefix("Pool/ic-sbx/").map(|n| (n.to_owned(), created)))
            .map(|(n, created)| {
                assert!(created, "round {round}: Pool {n} recorded as not created by osbx");
                n
            })
            .collect();
        // Every pool either apply created is in the cluster and in the inventory.
        let live = pool_names(&client, "ic-sbx").await;
        for pool in &live {
            assert!(listed.contains(pool), "round {round}: Pool {pool} exists but the inventory lost it: {listed:?}");
        }
        assert_eq!(live, expected, "round {round}");
    }

    // A later --prune with the base profile deletes exactly the pools of the two pipelines.
    let base_path = write_profile(dir.path(), "base.yaml", &base);
    let out = &apply_together(&kubeconfig, &[base_path], &["--prune"]).await[0];
    let (stdout, stderr) = outputs(out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let deleted: BTreeSet<String> = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["action"] == "deleted")
        .map(|c| c["object"].as_str().unwrap().trim_start_matches("Pool/ic-sbx/").to_owned())
        .collect();
    let live_before: BTreeSet<String> = expected.iter().filter(|p| *p != "base").cloned().collect();
    assert_eq!(deleted, live_before, "prune deletes exactly the stale pools");
    assert_eq!(pool_names(&client, "ic-sbx").await, BTreeSet::from(["base".to_owned()]));
    let listed: Vec<String> =
        inventory(&client, "ic-flux", "osbx-inventory-ic-ic").await.into_iter().map(|(s, _)| s).collect();
    let pools: Vec<&String> = listed.iter().filter(|s| s.starts_with("Pool/")).collect();
    assert_eq!(pools, ["Pool/ic-sbx/base"], "the inventory forgot the pruned pools");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_profiles_sharing_a_namespace_apply_at_once() {
    let client = cluster::client().await;
    cluster::install_all_crds().await;
    create_namespace(&client, "is-flux").await;
    let kubeconfig = cluster::plane().kubeconfig.clone();
    let dir = tempfile::tempdir().unwrap();
    // Two profiles (two inventories) over one cluster's namespaces, each with its own pool.
    let one = TestProfile::new("is").set("metadata.name", "one").pool("one", "runc", [0, 1, 0, 2]);
    let two = TestProfile::new("is").set("metadata.name", "two").pool("two", "runc", [0, 1, 0, 2]);
    let paths = [write_profile(dir.path(), "one.yaml", &one), write_profile(dir.path(), "two.yaml", &two)];
    for round in 0..ROUNDS / 4 {
        for out in apply_together(&kubeconfig, &paths, &[]).await {
            assert_eq!(out.status.code(), Some(0), "round {round}: {}", outputs(&out).1);
        }
    }
    for (profile, pool) in [("one", "one"), ("two", "two")] {
        let listed: Vec<String> = inventory(&client, "is-flux", &format!("osbx-inventory-{profile}-is"))
            .await
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        assert!(listed.contains(&format!("Pool/is-sbx/{pool}")), "{profile}: {listed:?}");
        assert!(listed.contains(&"Namespace/is-sbx".to_owned()), "{profile}: {listed:?}");
    }
    assert_eq!(pool_names(&client, "is-sbx").await, BTreeSet::from(["one".to_owned(), "two".to_owned()]));
}
