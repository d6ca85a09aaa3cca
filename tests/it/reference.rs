//! The homelab profile reproduces the hand-written reference commit
//! (`../shared/seed/003_46ecb5eba34fea99.txt`, read at test time) object for object.
//!
//! The commit text is a diff without file names; its hunks are in git's path order. Every new
//! file (`@@ -0,0 …`) is matched, in that order, with the files osbx renders sorted the same way,
//! so paths and file names are checked along with the content. YAML is compared as parsed objects
//! (comments and formatting may differ); the README is compared word for word.
//!
//! osbx deliberately sets chart values the hand-written commit left to the chart (found by
//! rendering the real chart, see the `charts` tests): `global: {}` (the umbrella chart's empty
//! `global:` makes every render warn), the controller's image tag, an empty
//! `controller.snapshot.containerdSocketPath` (else the chart passes `--containerd-socket-path`,
//! which controller v0.2.0 does not define: it would crash-loop) and both subcharts'
//! `namespaceOverride` (the chart installs into `opensandbox-system` whatever the release
//! namespace unless told: the profile's control-plane namespace, here that same name). The values
//! ConfigMap also carries `reconcile.fluxcd.io/watch: Enabled`, so that helm-controller upgrades
//! the release when the values change in git rather than at its next interval, and the pools
//! layer's Kustomization carries `healthCheckExprs` for its Pools (Flux then calls the layer
//! Ready only when the Pools are filled). They are taken out before comparing; everything else
//! must match.

use serde_json::{Value, json};

use crate::support::{osbx, shared, tree, write};

struct Hunk {
    header: String,
    lines: Vec<String>,
}

fn reference_hunks() -> Vec<Hunk> {
    let path = shared().join("seed/003_46ecb5eba34fea99.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let mut hunks: Vec<Hunk> = Vec::new();
    for line in text.lines() {
        if line.starts_with("@@ ") {
            hunks.push(Hunk { header: line.to_owned(), lines: Vec::new() });
        } else if let Some(h) = hunks.last_mut() {
            h.lines.push(line.to_owned());
        }
    }
    hunks
}

fn added(h: &Hunk) -> Vec<String> {
    h.lines.iter().filter_map(|l| l.strip_prefix('+')).map(str::to_owned).collect()
}

fn yaml_docs(text: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_str_multiple(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// The values osbx sets deliberately beyond the reference (see the module doc), removed; errors
/// if one of them is missing or different, so the list stays true.
fn without_deliberate_values(mut docs: Vec<Value>) -> Vec<Value> {
    for doc in docs.iter_mut().filter(|d| d["kind"] == "ConfigMap") {
        let labels = doc["metadata"].as_object_mut().unwrap().remove("labels");
        assert_eq!(labels, Some(json!({"reconcile.fluxcd.io/watch": "Enabled"})), "helm-controller watches the values");
        let text = doc["data"]["values.yaml"].as_str().unwrap_or_default().to_owned();
        let mut values: Value = serde_saphyr::from_str(&text).unwrap();
        let controller = &mut values["opensandbox-controller"]["controller"];
        assert_eq!(controller["image"], json!({"tag": "v0.2.0"}), "the controller image is pinned");
        assert_eq!(controller["snapshot"], json!({"containerdSocketPath": ""}), "no --containerd-socket-path");
        let controller = controller.as_object_mut().unwrap();
        controller.remove("image");
        controller.remove("snapshot");
        for chart in ["opensandbox-controller", "opensandbox-server"] {
            let sub = values[chart].as_object_mut().unwrap();
            assert_eq!(sub.remove("namespaceOverride"), Some(json!("opensandbox-system")), "{chart}.namespaceOverride");
        }
        assert_eq!(values["global"], json!({}), "global: {{}} silences helm's warning");
        values.as_object_mut().unwrap().remove("global");
        doc["data"]["values.yaml"] = values;
    }
    docs
}

/// The values of the reference's ConfigMap, parsed like ours.
fn parsed_values(mut docs: Vec<Value>) -> Vec<Value> {
    for doc in docs.iter_mut().filter(|d| d["kind"] == "ConfigMap") {
        let text = doc["data"]["values.yaml"].as_str().unwrap_or_default().to_owned();
        doc["data"]["values.yaml"] = serde_saphyr::from_str(&text).unwrap();
    }
    docs
}

fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn homelab_reproduces_the_reference_commit() {
    let hunks = reference_hunks();
    let new_files: Vec<Vec<String>> = hunks.iter().filter(|h| h.header.starts_with("@@ -0,0 ")).map(added).collect();
    assert_eq!(new_files.len(), 10, "the reference commit adds 10 files");

    let dir = tempfile::tempdir().unwrap();
    osbx().args(["-q", "render", "--profile", "homelab", "--out"]).arg(dir.path()).assert().success();
    let rendered = tree(dir.path());
    // The reference has no cluster kustomization (the bootstrap's) and no osbx state.
    let ours: Vec<(&String, &String)> = rendered
        .iter()
        .filter(|(p, _)| *p != "clusters/homelab/kustomization.yaml" && *p != ".osbx/profile-homelab.yaml")
        .collect();
    let paths: Vec<&str> = ours.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "clusters/homelab/apps/opensandbox-pools.yaml",
            "clusters/homelab/apps/opensandbox.yaml",
            "platform/sandbox-opensandbox-pools/kustomization.yaml",
            "platform/sandbox-opensandbox-pools/pools.yaml",
            "platform/sandbox-opensandbox/README.md",
            "platform/sandbox-opensandbox/helmrelease.yaml",
            "platform/sandbox-opensandbox/kustomization.yaml",
            "platform/sandbox-opensandbox/namespaces.yaml",
            "platform/sandbox-opensandbox/repository.yaml",
            "platform/sandbox-opensandbox/values.yaml",
        ]
    );
    for ((path, content), reference) in ours.iter().zip(&new_files) {
        let reference = reference.join("\n") + "\n";
        if std::path::Path::new(path).extension().is_some_and(|e| e.eq_ignore_ascii_case("md")) {
            let ours = osbx::render::strip_marker(content);
            assert_eq!(words(ours), words(&reference), "{path}");
        } else if path.ends_with("/values.yaml") {
            assert_eq!(
                without_deliberate_values(yaml_docs(content)),
                parsed_values(yaml_docs(&reference)),
                "{path} differs from the reference"
            );
        } else if path.ends_with("apps/opensandbox-pools.yaml") {
            // The pools layer's Flux health rule for its Pools (see the module doc).
            let mut ours = yaml_docs(content);
            let exprs = ours[0]["spec"].as_object_mut().unwrap().remove("healthCheckExprs");
            assert_eq!(
                exprs.as_ref().map(|e| e[0]["kind"].clone()),
                Some(json!("Pool")),
                "{path}: no Pool health rule"
            );
            assert_eq!(ours, yaml_docs(&reference), "{path} differs from the reference");
        } else {
            assert_eq!(yaml_docs(content), yaml_docs(&reference), "{path} differs from the reference");
        }
    }
}

#[test]
fn homelab_registers_both_layers_in_the_existing_cluster_kustomization() {
    let hunk = reference_hunks().into_iter().find(|h| h.header.starts_with("@@ -7,3 +7,5 @@")).unwrap();
    let expected_added = added(&hunk);
    assert_eq!(expected_added, ["  - apps/opensandbox.yaml", "  - apps/opensandbox-pools.yaml"]);

    let before = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n# Flux layers of this cluster\nresources:\n  - flux-system\n  - apps/spire-bootstrap.yaml\n  - apps/spire-agents.yaml\n  - apps/kata.yaml\n";
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "clusters/homelab/kustomization.yaml", before);
    osbx().args(["-q", "render", "--profile", "homelab", "--out"]).arg(dir.path()).assert().success();
    let after = std::fs::read_to_string(dir.path().join("clusters/homelab/kustomization.yaml")).unwrap();
    assert_eq!(after, format!("{before}{}\n", expected_added.join("\n")));
}
