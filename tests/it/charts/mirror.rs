//! With `images.mirror` (the `mirror` variant of every shipped profile, and "all at once"): every
//! image the platform pulls — each rendered pod's, and each pod the real charts install, as the
//! real helm renders them with the values osbx passes, the pod templates in a chart's
//! ConfigMaps (kata-deploy's per-node Jobs) included — is on the mirror, and every such pod
//! pulls with the pull Secret. This walker is the test's own, not osbx's.

use std::time::Instant;

use serde_json::Value;

use super::variants::{MIRROR_ALL, MIRROR_HUB, MIRROR_PULL_SECRET};
use super::{Finding, baselines_of, conclude};

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
fn check(object: &Value) -> Vec<String> {
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
        if !secrets.iter().any(|s| s["name"] == MIRROR_PULL_SECRET) {
            out.push(format!("a pod spec pulls without {MIRROR_PULL_SECRET}: {secrets:?}"));
        }
    }
    out
}

#[test]
fn with_a_mirror_every_pod_of_the_platform_pulls_from_it_with_the_pull_secret() {
    let start = Instant::now();
    let (baselines, mut findings) = baselines_of(&[]);
    let mirrored = |p: &osbx::profile::Profile| p.images.mirror.is_set();
    let mut checked = 0;
    for subject in super::cases::subjects().iter().filter(|s| mirrored(&s.profile)) {
        for object in subject.objects.iter().filter(|o| o["kind"] != "HelmRelease") {
            for what in check(object) {
                let id = format!("{}/{}", object["kind"].as_str().unwrap_or_default(), object["metadata"]["name"]);
                findings.push(Finding::new(subject.label.clone(), format!("{id}: {what}")));
            }
        }
    }
    for b in baselines.iter().filter(|b| mirrored(&b.release.subject().profile)) {
        checked += 1;
        for object in &b.objects {
            for what in check(object) {
                let id = super::manifest::describe(object, Some(b.namespace_of(object)));
                findings.push(b.release.finding(&format!("chart {}: {id}: {what}", b.chart)));
            }
        }
    }
    assert!(checked >= 3, "the mirror variants expand too few releases: {checked}");
    conclude("with_a_mirror_every_pod_of_the_platform_pulls_from_it_with_the_pull_secret", start, findings);
}
