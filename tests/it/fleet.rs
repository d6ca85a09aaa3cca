//! `osbx render --fleet`: three clusters from one base profile.

use std::collections::BTreeSet;
use std::path::Path;

use kube::api::{Patch, PatchParams};

use serde_json::{Value, json};

use crate::builder::TestFleet;
use crate::cluster::{self, api_for};
use crate::support::{git, osbx, outputs, tree};

fn fleet(lab_b_pool_max: u32) -> String {
    TestFleet::new("labs", "fresh-cluster")
        .cluster("lab-a", Value::Null)
        .cluster("lab-b", json!({"pools": {"items": [{"name": "vm", "capacity": {"poolMax": lab_b_pool_max}}]}}))
        .cluster("lab-c", json!({"spire": {"trustDomain": "c.example.org"}, "kata": {"chart": {"version": "4.1.1"}}}))
        .yaml()
}

fn render_fleet(dir: &Path, text: &str) -> std::collections::BTreeMap<String, String> {
    std::fs::write(dir.join("fleet.yaml"), text).unwrap();
    osbx()
        .args(["-q", "render", "--fleet"])
        .arg(dir.join("fleet.yaml"))
        .arg("--out")
        .arg(dir.join("repo"))
        .assert()
        .success();
    tree(&dir.join("repo"))
}

#[test]
fn a_fleet_renders_deterministically_and_shares_identical_layers() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = render_fleet(a.path(), &fleet(8));
    assert_eq!(first, render_fleet(b.path(), &fleet(8)), "byte-identical on every run");

    let dirs: BTreeSet<String> = first
        .keys()
        .filter_map(|p| p.strip_prefix("platform/"))
        .filter_map(|p| p.split('/').next())
        .map(str::to_owned)
        .collect();
    let dirs: Vec<&str> = dirs.iter().map(String::as_str).collect();
    assert_eq!(
        dirs,
        [
            "acceptance", // its profile and revision differ per cluster
            "acceptance-lab-b",
            "acceptance-lab-c",
            "kata",
            "kata-lab-c",  // lab-c pins another chart version
            "opensandbox", // identical everywhere: written once
            "opensandbox-pools",
            "opensandbox-pools-lab-b", // lab-b has a bigger Kata pool
            "spire-agents",
            "spire-agents-lab-b",
            "spire-agents-lab-c", // clusterName differs per cluster
            "spire-smoke",
            "spire-smoke-lab-c", // lab-c has its own trust domain
        ]
    );
    for cluster in ["lab-a", "lab-b", "lab-c"] {
        let app = &first[&format!("clusters/{cluster}/apps/opensandbox.yaml")];
        assert!(app.contains("path: ./platform/opensandbox\n"), "{cluster}: {app}");
        assert!(first.contains_key(&format!("clusters/{cluster}/kustomization.yaml")));
    }
    assert!(first["clusters/lab-b/apps/opensandbox-pools.yaml"].contains("path: ./platform/opensandbox-pools-lab-b\n"));
    assert!(first["clusters/lab-c/apps/opensandbox-pools.yaml"].contains("path: ./platform/opensandbox-pools\n"));
    assert!(first["platform/opensandbox-pools-lab-b/pools.yaml"].contains("poolMax: 8"));
    assert!(first["platform/spire-smoke-lab-c/smoke.yaml"].contains("spiffe://c.example.org/sandbox/smoke"));
}

#[test]
fn changing_one_clusters_override_changes_only_that_clusters_files() {
    let dir = tempfile::tempdir().unwrap();
    let before = render_fleet(dir.path(), &fleet(8));
    let after = render_fleet(dir.path(), &fleet(6));
    let changed: Vec<&String> = after.keys().chain(before.keys()).filter(|p| before.get(*p) != after.get(*p)).collect();
    assert!(!changed.is_empty());
    for path in changed {
        assert!(
            path.starts_with("clusters/lab-b/") || path.contains("-lab-b/"),
            "{path} changed but belongs to another cluster"
        );
    }
}

#[test]
fn check_and_commit_work_on_the_whole_fleet() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["config", "user.name", "T"]);
    git(&repo, &["config", "user.email", "t@example.com"]);
    std::fs::write(dir.path().join("fleet.yaml"), fleet(8)).unwrap();
    let out = osbx()
        .args(["render", "--commit", "--fleet"])
        .arg(dir.path().join("fleet.yaml"))
        .arg("--out")
        .arg(&repo)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    let files = git(&repo, &["show", "--name-only", "--format=", "HEAD"]);
    for cluster in ["lab-a", "lab-b", "lab-c"] {
        assert!(files.contains(&format!("clusters/{cluster}/kustomization.yaml")), "{files}");
    }
    osbx()
        .args(["render", "--check", "--fleet"])
        .arg(dir.path().join("fleet.yaml"))
        .arg("--out")
        .arg(&repo)
        .assert()
        .code(0);
    std::fs::write(dir.path().join("fleet.yaml"), fleet(6)).unwrap();
    let out = osbx()
        .args(["render", "--check", "--fleet"])
        .arg(dir.path().join("fleet.yaml"))
        .arg("--out")
        .arg(&repo)
        .output()
        .unwrap();
    let (stdout, _) = outputs(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout.contains("platform/opensandbox-pools-lab-b/pools.yaml") && stdout.contains("+    poolMax: 6"),
        "{stdout}"
    );
}

#[test]
fn an_override_error_points_into_the_fleet_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = fleet(8).replace("poolMax: 8", "poolMax: -3");
    // The override's list has one item, the merged profile's `vm` is items[1]: the error names the
    // merged field and points at the override's `items`.
    let line =
        1 + text.lines().position(|l| l.trim_start().starts_with("items:")).expect("the override is in the file");
    std::fs::write(dir.path().join("fleet.yaml"), &text).unwrap();
    let out = osbx()
        .args(["render", "--fleet"])
        .arg(dir.path().join("fleet.yaml"))
        .arg("--out")
        .arg(dir.path().join("repo"))
        .output()
        .unwrap();
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let at = format!("fleet.yaml (clusters[1].overrides.pools.items[1].capacity.poolMax):{line}:");
    assert!(stderr.contains(&at), "{at} not in {stderr}");
    assert!(stderr.contains("must not be negative (got -3)"), "{stderr}");
    assert!(!dir.path().join("repo").exists());
}

#[tokio::test]
async fn every_clusters_objects_are_accepted_by_the_api_server() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fleet.yaml"), fleet(8)).unwrap();
    let fleet = osbx::fleet::load(&dir.path().join("fleet.yaml"), &osbx::progress::Silent).unwrap();
    let client = cluster::client().await;
    cluster::install_all_crds().await;
    let renderer = osbx::commands::renderer(None).unwrap();
    for member in &fleet.members {
        let objects = renderer.render(member).unwrap().objects();
        cluster::ensure_namespaces(&client, &objects).await;
        for o in &objects {
            let (api, name) = api_for(&client, &o.object.value).await;
            api.patch(&name, &PatchParams::apply("osbx").dry_run(), &Patch::Apply(&o.object.value))
                .await
                .unwrap_or_else(|e| {
                    panic!("{}: {} {name} rejected: {e}", member.profile.cluster.name, o.object.value["kind"])
                });
        }
    }
}

#[test]
fn a_warning_from_the_base_is_printed_once_for_the_whole_fleet() {
    let dir = tempfile::tempdir().unwrap();
    let text = "apiVersion: osbx.dev/v1alpha1\nkind: Fleet\nmetadata: {name: labs}\nbase: homelab\nclusters:\n  - name: a\n  - name: b\n  - name: c\n";
    std::fs::write(dir.path().join("fleet.yaml"), text).unwrap();
    let out = osbx()
        .args(["render", "--fleet", "fleet.yaml", "--out", "repo"])
        .current_dir(dir.path())
        .env("OSBX_COLOR", "never")
        .output()
        .unwrap();
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // homelab's Kata pool keeps no warm VM under a 60 s create timeout: one line, not three.
    let cold: Vec<&str> = stderr.lines().filter(|l| l.contains("warning[kata.cold-start]")).collect();
    assert_eq!(cold.len(), 1, "{stderr}");
    assert!(
        cold[0].contains("(cluster a)") && cold[0].contains("[and 2 more cluster(s) with the same warning]"),
        "{stderr}"
    );
}

#[test]
fn rbac_prints_the_roles_of_one_cluster_of_a_fleet() {
    let dir = tempfile::tempdir().unwrap();
    let extra = json!({"name": "extra", "runtime": "runc",
                       "capacity": {"bufferMin": 1, "bufferMax": 1, "poolMin": 1, "poolMax": 2}});
    // A base without an acceptance layer: the rollout verifies from outside, waiting for the Pools.
    let text = TestFleet::new("labs", "runc-only")
        .cluster("lab-a", Value::Null)
        .cluster("lab-b", json!({"pools": {"items": [extra]}}))
        .yaml();
    std::fs::write(dir.path().join("fleet.yaml"), text).unwrap();
    let rbac = |cluster: &str| {
        let out = osbx()
            .args(["rbac", "--for", "rollout", "--fleet"])
            .arg(dir.path().join("fleet.yaml"))
            .args(["--cluster", cluster])
            .output()
            .unwrap();
        let (stdout, stderr) = outputs(&out);
        (out.status.code(), stdout, stderr)
    };
    let (code, b, stderr) = rbac("lab-b");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        b.starts_with("# osbx rbac --for rollout: what osbx needs for profile runc-only on cluster lab-b.\n"),
        "{b}"
    );
    assert!(b.contains("name: osbx-runc-only-lab-b-rollout"), "{b}");
    // lab-b's own pool, from its overrides, is waited for by name; lab-a has no such pool.
    let named = |text: &str, resource: &str| {
        let docs: Vec<Value> = text.split("\n---\n").skip(1).map(|d| serde_saphyr::from_str(d).unwrap()).collect();
        docs.iter()
            .filter(|d| d["kind"] == "Role")
            .flat_map(|d| d["rules"].as_array().unwrap().clone())
            .find(|r| r["resources"] == json!([resource]) && r.get("resourceNames").is_some())
            .map(|r| r["resourceNames"].clone())
    };
    let pool_rule = |text: &str| named(text, "pools").unwrap();
    assert!(pool_rule(&b).as_array().unwrap().contains(&json!("extra")), "{b}");
    let (code, a, stderr) = rbac("lab-a");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!pool_rule(&a).as_array().unwrap().contains(&json!("extra")), "{a}");
    let (code, _, stderr) = rbac("lab-x");
    assert_eq!(code, Some(2), "{stderr}");
    let line = format!(
        "error: --cluster: no cluster \"lab-x\" in {} (its clusters: lab-a, lab-b)",
        dir.path().join("fleet.yaml").display()
    );
    assert_eq!(stderr.trim_end(), line);
    // With an acceptance layer (fresh-cluster's), the rollout reads each cluster's own report
    // instead: that ConfigMap by name, and no Pool to wait for.
    let text = TestFleet::new("labs", "fresh-cluster")
        .cluster("lab-a", Value::Null)
        .cluster("lab-b", json!({"pools": {"items": [extra]}}))
        .yaml();
    std::fs::write(dir.path().join("fleet.yaml"), text).unwrap();
    let (code, b, stderr) = rbac("lab-b");
    assert_eq!(code, Some(0), "{stderr}");
    // The Job's report only: it is beside the report, which the serving pod writes.
    assert_eq!(named(&b, "configmaps"), Some(json!(["osbx-acceptance-report-verdicts"])), "{b}");
    assert_eq!(named(&b, "pools"), None, "{b}");
}

/// `osbx status --fleet`: one line per cluster, read concurrently; a cluster that cannot be
/// reached is shown as such (exit 2) while the others are still read.
#[tokio::test]
async fn status_of_a_fleet_is_one_line_per_cluster_and_names_an_unreachable_one() {
    let kubeconfig = cluster::plane().kubeconfig.clone();
    let dir = tempfile::tempdir().unwrap();
    let mut doc: Value = serde_saphyr::from_str(&TestFleet::new("look", "default").yaml()).unwrap();
    let reach = |name: &str, context: &str| json!({"name": name, "context": context, "kubeconfig": kubeconfig.display().to_string()});
    doc["clusters"] = json!([reach("lab-a", "osbx-test"), reach("lab-b", "no-such-context")]);
    std::fs::write(dir.path().join("fleet.yaml"), serde_saphyr::to_string(&doc).unwrap()).unwrap();
    let run = |output: &'static str| {
        let dir = dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            osbx()
                .current_dir(&dir)
                .args(["status", "--fleet", "fleet.yaml", "--repo", ".", "-o", output])
                .output()
                .unwrap()
        })
    };
    let out = run("json").await.unwrap();
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    let clusters = doc["clusters"].as_array().unwrap();
    assert_eq!(clusters.len(), 2, "{doc:#}");
    assert_eq!((clusters[0]["cluster"].as_str(), clusters[0]["layers"].as_u64()), (Some("lab-a"), Some(2)), "{doc:#}");
    assert!(clusters[0].get("error").is_none(), "lab-a was reachable: {doc:#}");
    assert!(clusters[1]["error"].as_str().is_some_and(|e| e.contains("no-such-context")), "{doc:#}");
    let out = run("text").await.unwrap();
    let (stdout, _) = outputs(&out);
    assert!(stdout.lines().any(|l| l.contains("lab-a") && l.contains("layers ") && l.contains("pools ")), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("✘ lab-b") && l.contains("unreadable")), "{stdout}");
}

/// `osbx status --fleet -o mermaid|dot` is refused (exit 2, nothing on stdout) before any
/// cluster is reached: a fleet's status is one line per cluster, and the graph formats draw one
/// cluster's layers, so printing the text lines instead would hand a picture tool prose.
#[test]
fn status_of_a_fleet_refuses_the_graph_formats() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("fleet.yaml"),
        TestFleet::new("look", "default").cluster("lab-a", Value::Null).yaml(),
    )
    .unwrap();
    for graph in ["mermaid", "dot"] {
        let out = osbx()
            .current_dir(dir.path())
            .env_remove("KUBECONFIG")
            .env("HOME", dir.path())
            .args(["status", "--fleet", "fleet.yaml", "--repo", ".", "-o", graph])
            .output()
            .unwrap();
        let (stdout, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(2), "-o {graph}: {stdout}{stderr}");
        assert_eq!(stdout, "", "-o {graph} printed data");
        assert_eq!(
            stderr.trim_end(),
            format!(
                "error: -o {graph}: --fleet prints one line per cluster, and the layer graph is drawn for one cluster; give -o text or -o json with --fleet, or drop --fleet to draw a cluster's graph"
            )
        );
    }
}
