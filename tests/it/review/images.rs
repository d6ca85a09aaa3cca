//! `osbx images` with the real charts: every HelmRelease of fresh-cluster expanded by the real
//! helm from the loopback sources (kata-deploy from OCI, SPIRE from a Helm repository,
//! OpenSandbox from git), as the review expands them, beside the rendered pods, the server's
//! configured images and the checks' probe images; `-o skopeo-sync` groups them by registry.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Case, profile, sources};
use crate::support::outputs;

/// Who pulls `image`, as `osbx images -o json` says.
fn pullers<'a>(all: &'a Value, image: &str) -> &'a Vec<Value> {
    all[image].as_array().unwrap_or_else(|| panic!("no {image}"))
}

/// `osbx images -o OUTPUT` of the case's profile, its charts expanded from the loopback sources.
fn images_of(case: &Case, output: &str) -> std::process::Output {
    let mut images = crate::support::osbx();
    images.args(["images", "-o", output, "-p"]).arg(case.profile_path());
    case.with_helm(&mut images);
    images.output().unwrap()
}

#[test]
fn images_lists_what_every_chart_installs_beside_the_rendered_pods_and_the_checks() {
    let sources = sources();
    let p = profile(Some(&sources));
    let case = Case::new(Some(sources), &p);
    let run = |output: &str| images_of(&case, output);
    let out = run("json");
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let all: Value = serde_json::from_str(&stdout).unwrap();
    let map = all.as_object().unwrap();
    // Each chart's pods, named by the chart's own values (read here from the chart as shipped).
    let values = std::fs::read_to_string(
        crate::support::root().join("../shared/charts/kata-deploy-4.1.0/kata-deploy/values.yaml"),
    )
    .unwrap();
    let doc: Value = serde_saphyr::from_str(&values).unwrap();
    let kata = doc["image"]["reference"].as_str().unwrap();
    let by_chart = |prefix: &str, chart: &str, layer: &str| {
        let (image, by) = map
            .iter()
            .find(|(i, _)| i.starts_with(prefix))
            .unwrap_or_else(|| panic!("no image {prefix}…: {:?}", map.keys().collect::<Vec<_>>()));
        assert!(
            by.as_array().unwrap().iter().any(|p| p["kind"] == "container"
                && p["layer"] == layer
                && p["chart"].as_str().is_some_and(|c| c.starts_with(chart))),
            "{image}: {by:#}"
        );
    };
    // The chart in job mode: its dispatcher image, named after the reference its values give.
    by_chart(kata, "kata-deploy ", "kata");
    by_chart("ghcr.io/spiffe/spire-agent:", "spire ", "spire-agents");
    let opensandbox: BTreeSet<&str> = map
        .values()
        .flat_map(|by| by.as_array().unwrap())
        .filter(|p| p["layer"] == "opensandbox" && p["chart"].is_string())
        .filter_map(|p| p["object"].as_str())
        .collect();
    assert!(
        opensandbox.iter().any(|o| o.starts_with("Deployment/")),
        "the chart's controller and server: {opensandbox:?}"
    );
    // What the render holds, the server's configuration and the checks, as without charts.
    assert!(
        pullers(&all, "registry.example.org/osbx:0.1.0")
            .iter()
            .any(|p| p["object"] == "Job/osbx-acceptance/osbx-acceptance")
    );
    assert!(
        map.iter()
            .any(|(i, by)| i.contains("/execd:") && by.as_array().unwrap().iter().any(|p| p["kind"] == "component"))
    );
    assert!(pullers(&all, "busybox:1.37").iter().any(|p| p["kind"] == "check" && p["check"] == "kata.guest-kernel"));
    // No chart's image is missed by the copier's list: each image's repository is under its
    // registry there.
    let out = run("skopeo-sync");
    let (text, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let sync: Value = serde_saphyr::from_str(&text).unwrap();
    for image in map.keys() {
        let registry = match image.split_once('/') {
            Some((host, _)) if host.contains(['.', ':']) || host == "localhost" => host,
            _ => "docker.io",
        };
        assert!(sync[registry]["images"].is_object(), "{image}: no {registry} in\n{text}");
    }
}

/// `--fleet`: every cluster's images, each puller naming its cluster; a cluster's own pool image
/// is named for that cluster alone.
#[test]
fn a_fleets_images_name_the_clusters_that_pull_each() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("profile.yaml"), serde_json::to_string_pretty(&profile(None)).unwrap()).unwrap();
    let fleet = serde_json::json!({
        "apiVersion": "osbx.dev/v1alpha1", "kind": "Fleet", "metadata": {"name": "labs"}, "base": "profile.yaml",
        "clusters": [
            {"name": "lab-a"},
            {"name": "lab-b", "overrides": {"pools": {"defaults": {"image": "registry.example/lab-b/code-interpreter:v2"}}}},
        ],
    });
    let path = dir.path().join("fleet.yaml");
    std::fs::write(&path, serde_json::to_string_pretty(&fleet).unwrap()).unwrap();
    let out =
        crate::support::osbx().args(["images", "--no-charts", "-o", "json", "--fleet"]).arg(&path).output().unwrap();
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let all: Value = serde_json::from_str(&stdout).unwrap();
    let clusters = |image: &str| -> BTreeSet<String> {
        pullers(&all, image).iter().filter_map(|p| p["cluster"].as_str()).map(str::to_owned).collect()
    };
    assert_eq!(clusters("registry.example/lab-b/code-interpreter:v2"), BTreeSet::from(["lab-b".to_owned()]));
    assert_eq!(clusters("registry.example.org/osbx:0.1.0"), BTreeSet::from(["lab-a".to_owned(), "lab-b".to_owned()]));
    let shared = all.as_object().unwrap().keys().find(|i| i.ends_with("/code-interpreter:v1.1.0")).unwrap();
    assert_eq!(clusters(shared), BTreeSet::from(["lab-a".to_owned()]), "lab-b's pools use its own image");
}

/// With `images.mirror` (the charts tests' `mirror` variant of fresh-cluster), every chart
/// expanded by osbx from the loopback sources: exit 0 (no chart image left outside the mirror),
/// every image on the mirror, and the images of the containers equal, one for one, those of
/// the same variant's render and of its charts as the charts tests' own helm runs and walker find
/// them; `-o crane` copies each image from its source.
#[test]
fn with_a_mirror_the_images_are_exactly_what_the_render_and_the_charts_pull_all_on_it() {
    use crate::charts::variants::{MIRROR_ALL, MIRROR_HUB, MIRROR_PULL_SECRET};
    let sources = sources();
    let mut p = profile(Some(&sources));
    p["images"] =
        serde_json::json!({"mirror": {"docker.io": MIRROR_HUB, "*": MIRROR_ALL}, "pullSecrets": [MIRROR_PULL_SECRET]});
    let case = Case::new(Some(sources), &p);
    let run = |output: &str| images_of(&case, output);
    let out = run("json");
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let all: Value = serde_json::from_str(&stdout).unwrap();
    let map = all.as_object().unwrap();
    for image in map.keys() {
        assert!(
            image.starts_with(&format!("{MIRROR_HUB}/")) || image.starts_with(&format!("{MIRROR_ALL}/")),
            "{image}"
        );
    }
    let listed: BTreeSet<String> = map
        .iter()
        .filter(|(_, by)| by.as_array().unwrap().iter().any(|p| p["kind"] == "container"))
        .map(|(i, _)| i.clone())
        .collect();
    let pulled = crate::charts::mirror::container_images("variant \"mirror\" of profile fresh-cluster");
    assert_eq!(listed, pulled, "osbx images (left) against the render and the charts' pods (right)");
    // The copier's list: one line per image, each from its source.
    let out = run("crane");
    let (text, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), map.len(), "{text}");
    assert!(
        lines.iter().any(|l| *l == format!("crane copy busybox:1.37 {MIRROR_HUB}/library/busybox:1.37")
            || l.starts_with("crane copy docker.io/library/busybox:1.37 ")),
        "{text}"
    );
}
