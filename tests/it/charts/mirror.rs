//! With `images.mirror` (the `mirror` variant of every shipped profile, and "all at once"): every
//! image the platform pulls — each rendered pod's, and each pod the real charts install, as the
//! real helm renders them with the values osbx passes, the pod templates in a chart's
//! ConfigMaps (kata-deploy's per-node Jobs) included — is on the mirror, and every such pod
//! pulls with the pull Secret, but for the one pod whose chart has no value for it
//! ([`NO_PULL_SECRETS`]). This walker is the test's own, not osbx's.

use std::collections::BTreeSet;
use std::time::Instant;

use serde_json::Value;

use super::variants::{MIRROR_ALL, MIRROR_HUB, MIRROR_PULL_SECRET};
use super::{Finding, baselines_of, conclude};

/// The pods a chart gives no pull Secret, whatever its values (each a chart fact, with where it
/// comes from): the chart as `chart dir` and the pod's object as `Kind/name`.
/// - kata-deploy 4.1.0's post-delete hook `templates/kata-cleanup-rbac-job.yaml` (the Job that
///   removes the kept RBAC after an uninstall) writes no `imagePullSecrets`, unlike its other
///   pods; docs/images.md names it.
const NO_PULL_SECRETS: &[(&str, &str)] = &[("kata-deploy-4.1.0/kata-deploy", "Job/kata-deploy-rb-cleanup")];

/// Every pod spec under `value` (a map with `containers`), ConfigMap data parsed as YAML.
fn pod_specs(value: &Value, out: &mut Vec<Value>) {
    match value {
        Value::Object(map) if map.contains_key("containers") => out.push(value.clone()),
        Value::Object(map) => {
            if value["kind"] == "ConfigMap" {
                for text in map.get("data").and_then(Value::as_object).into_iter().flat_map(|d| d.values()) {
                    let docs: Vec<Value> =
                        text.as_str().and_then(|t| serde_saphyr::from_multiple(t).ok()).unwrap_or_default();
                    for d in &docs {
                        pod_specs(d, out);
                    }
                }
            }
            map.values().for_each(|v| pod_specs(v, out));
        }
        Value::Array(list) => list.iter().for_each(|v| pod_specs(v, out)),
        _ => {}
    }
}

/// What is wrong with one object's pods: images off the mirror, pods without the pull Secret.
fn check(object: &Value, secret_given: bool) -> Vec<String> {
    if object["kind"] == "CustomResourceDefinition" {
        return Vec::new();
    }
    let mut specs = Vec::new();
    pod_specs(object, &mut specs);
    let mut out = Vec::new();
    for spec in specs {
        let lists = ["initContainers", "containers", "ephemeralContainers"];
        for c in lists.iter().filter_map(|l| spec[*l].as_array()).flatten() {
            let image = c["image"].as_str().unwrap_or_default();
            if !image.starts_with(&format!("{MIRROR_HUB}/")) && !image.starts_with(&format!("{MIRROR_ALL}/")) {
                out.push(format!("container {} pulls {image:?}, not from the mirror", c["name"]));
            }
        }
        let secrets = spec["imagePullSecrets"].as_array().cloned().unwrap_or_default();
        if secret_given && !secrets.iter().any(|s| s["name"] == MIRROR_PULL_SECRET) {
            out.push(format!("a pod spec pulls without {MIRROR_PULL_SECRET}: {secrets:?}"));
        }
    }
    out
}

/// Every container's image in `subject`'s render (but its HelmReleases) and in what its charts
/// install as the real helm renders them (this walker's), for the comparison with
/// `osbx images` (tests/it/review/images.rs).
pub(crate) fn container_images(subject: &str) -> BTreeSet<String> {
    let (baselines, _) = baselines_of(&[]);
    let s = super::cases::subjects().iter().find(|s| s.label == subject).unwrap_or_else(|| panic!("no {subject}"));
    let installed = baselines.iter().filter(|b| b.release.subject().label == subject).flat_map(|b| b.objects.iter());
    let mut specs = Vec::new();
    for object in s.objects.iter().filter(|o| o["kind"] != "HelmRelease").chain(installed) {
        if object["kind"] != "CustomResourceDefinition" {
            pod_specs(object, &mut specs);
        }
    }
    let lists = ["initContainers", "containers", "ephemeralContainers"];
    specs
        .iter()
        .flat_map(|spec| lists.iter().filter_map(|l| spec[*l].as_array()).flatten())
        .filter_map(|c| c["image"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn with_a_mirror_every_pod_of_the_platform_pulls_from_it_with_the_pull_secret() {
    let start = Instant::now();
    let (baselines, mut findings) = baselines_of(&[]);
    let mirrored = |p: &osbx::profile::Profile| p.images.mirror.is_set();
    let mut checked = 0;
    for subject in super::cases::subjects().iter().filter(|s| mirrored(&s.profile)) {
        for object in subject.objects.iter().filter(|o| o["kind"] != "HelmRelease") {
            for what in check(object, true) {
                let id = format!("{}/{}", object["kind"].as_str().unwrap_or_default(), object["metadata"]["name"]);
                findings.push(Finding::new(subject.label.clone(), format!("{id}: {what}")));
            }
        }
    }
    for b in baselines.iter().filter(|b| mirrored(&b.release.subject().profile)) {
        checked += 1;
        for object in &b.objects {
            let id = format!(
                "{}/{}",
                object["kind"].as_str().unwrap_or_default(),
                object["metadata"]["name"].as_str().unwrap_or_default()
            );
            for what in check(object, !NO_PULL_SECRETS.contains(&(b.chart, id.as_str()))) {
                let id = super::manifest::describe(object, Some(b.namespace_of(object)));
                findings.push(b.release.finding(&format!("chart {}: {id}: {what}", b.chart)));
            }
        }
    }
    assert!(checked >= 3, "the mirror variants expand too few releases: {checked}");
    conclude("with_a_mirror_every_pod_of_the_platform_pulls_from_it_with_the_pull_secret", start, findings);
}
