//! `osbx images`: every image the platform as rendered will pull, and who pulls it — the
//! containers of the rendered objects, of the objects each HelmRelease's chart installs
//! (expanded by helm with the values osbx renders, as the offline review expands them: the same
//! cache, no cluster), the images a component's configuration makes its controllers' pods pull
//! ([`crate::components::Component::pulled`]), and the probe images of verify's checks
//! ([`crate::verify::checks::images`]; the acceptance layer's own image is a rendered
//! container).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use crate::object::Object;
use crate::profile::LoadedProfile;
use crate::render::Rendered;
use crate::review::charts::{ChartError, Charts};
use crate::spec::syntax::ImageRef;

/// Who pulls an image.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub(crate) enum Puller {
    /// A container of a rendered object, or of an object a chart installs.
    Container {
        /// The cluster (the profile's `cluster.name`).
        cluster: String,
        /// The layer that renders the object or its HelmRelease.
        layer: String,
        /// The chart that installs the object (`name version`), when a chart does.
        #[serde(skip_serializing_if = "Option::is_none")]
        chart: Option<String>,
        /// `Kind/namespace/name`.
        object: String,
        /// The container's name.
        container: String,
    },
    /// Pods a component's controllers create from its configuration.
    Component {
        /// The cluster (the profile's `cluster.name`).
        cluster: String,
        /// The component's layer.
        layer: String,
        /// Which pods, and the setting that names the image.
        what: String,
    },
    /// A check's probe pods (`osbx verify`, and the acceptance layer's runs).
    Check {
        /// The cluster whose profile selects the check.
        cluster: String,
        /// The check's id.
        check: String,
    },
}

impl std::fmt::Display for Puller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Container { cluster, layer, chart, object, container } => {
                write!(f, "{cluster} / {layer}: {object} container {container}")?;
                chart.as_ref().map_or(Ok(()), |c| write!(f, " (chart {c})"))
            }
            Self::Component { cluster, layer, what } => write!(f, "{cluster} / {layer}: {what}"),
            Self::Check { cluster, check } => write!(f, "{cluster}: check {check}"),
        }
    }
}

/// Every image, each with who pulls it (sorted; an image once, its pullers in order).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(transparent)]
pub(crate) struct Images(pub BTreeMap<String, BTreeSet<Puller>>);

/// Each expanded chart's default values (`name version` → its `values.yaml`): where an image a
/// mirror does not cover is named ([`naming`], asked only for those images).
pub(crate) type ChartNames = BTreeMap<String, std::sync::Arc<Value>>;

/// What a mirror makes of the images: where each is copied from, and those it does not cover.
#[derive(Debug, Clone, Default)]
pub(crate) struct Mirrored {
    /// Each image on a mirror → the image it is a copy of (`images.mirror`'s inverse).
    pub sources: BTreeMap<String, String>,
    /// The images a profile with a mirror still pulls from elsewhere: a chart's image that no
    /// value osbx sets names, each with who pulls it and why.
    pub outside: BTreeMap<String, (BTreeSet<Puller>, String)>,
}

/// The dotted paths of `values` whose string names `image`'s repository: the whole reference,
/// `registry/repository`, or the repository alone (`library/x` also as `x`), as charts split an
/// image into `reference`, `repository`, `registry` and `tag` values.
#[must_use]
fn naming(values: &Value, image: &str) -> Vec<String> {
    let Ok(r) = ImageRef::parse(image) else { return Vec::new() };
    let mut names = vec![image.to_owned(), format!("{}/{}", r.registry, r.repository), r.repository.clone()];
    if let Some(short) = r.repository.strip_prefix("library/") {
        names.push(short.to_owned());
    }
    let mut out = Vec::new();
    for path in crate::chart::leaves(values) {
        let mut at = values;
        for key in &path {
            at = &at[key.as_str()];
        }
        let Some(text) = at.as_str() else { continue };
        let bare = text.split_once('@').map_or(text, |(name, _)| name);
        let bare = bare.rsplit_once(':').filter(|(_, tag)| !tag.contains('/')).map_or(bare, |(name, _)| name);
        if names.iter().any(|n| n == text || n == bare) {
            out.push(path.join("."));
        }
    }
    out
}

/// The profile fields that would set the chart values naming `image` (found in `named`, the
/// charts' defaults) for the containers `by` of those charts: `<section>.values.<path>` of the
/// component whose layer installs the chart, each with the chart (`kata.values.image.reference`
/// (chart kata-deploy 4.1.0)).
fn profile_fields(loaded: &LoadedProfile, image: &str, by: &BTreeSet<Puller>, named: &ChartNames) -> Vec<String> {
    let mut out = BTreeSet::new();
    for puller in by {
        let Puller::Container { layer, chart: Some(chart), .. } = puller else { continue };
        let section = loaded
            .profile
            .layers
            .iter()
            .find(|l| l.name == *layer)
            .and_then(crate::profile::LayerSpec::renders)
            .map(|c| c.section);
        let Some(defaults) = named.get(chart) else { continue };
        for path in naming(defaults, image) {
            out.insert(match section {
                Some(section) => format!("`{section}.values.{path}` (chart {chart})"),
                // A chart the profile's own layer installs: its values, wherever they are kept.
                None => format!("the value `{path}` of chart {chart}"),
            });
        }
    }
    out.into_iter().collect()
}

impl Mirrored {
    /// Note where each image `loaded` pulls (`of`, its own images) comes from on its mirror;
    /// `named` says which chart value names an image the mirror does not cover.
    pub(crate) fn add(&mut self, loaded: &LoadedProfile, of: &Images, named: &ChartNames) {
        let mirror = &loaded.profile.images.mirror;
        if !mirror.is_set() {
            return;
        }
        for (image, by) in &of.0 {
            if let Some(source) = mirror.source(image) {
                self.sources.insert(image.clone(), source);
                continue;
            }
            match mirror.image(image) {
                Ok(same) if same == *image => {}
                Ok(mirrored) => {
                    let values = profile_fields(loaded, image, by, named);
                    let why = if values.is_empty() {
                        format!(
                            "not from the mirror (it would be {mirrored}), and no value of its chart names it: the chart must be changed to take one"
                        )
                    } else {
                        format!(
                            "not from the mirror (it would be {mirrored}); osbx does not rewrite the chart value that names it: set {} to the copy on your mirror",
                            values.join(" or ")
                        )
                    };
                    self.outside
                        .entry(image.clone())
                        .or_insert_with(|| (BTreeSet::new(), why))
                        .0
                        .extend(by.iter().cloned());
                }
                Err(u) => {
                    self.outside
                        .entry(image.clone())
                        .or_insert_with(|| (BTreeSet::new(), u.why))
                        .0
                        .extend(by.iter().cloned());
                }
            }
        }
    }

    /// `crane copy SOURCE MIRRORED`, one line per image copied onto a mirror (an image that is
    /// not a reference is never written: the lines are for a shell).
    #[must_use]
    pub(crate) fn crane(&self) -> Vec<String> {
        self.sources
            .iter()
            .filter(|(to, from)| ImageRef::parse(to).is_ok() && ImageRef::parse(from).is_ok())
            .map(|(to, from)| format!("crane copy {from} {to}"))
            .collect()
    }
}

impl Images {
    /// Add what the profile `loaded`, rendered as `rendered`, pulls; each HelmRelease expanded
    /// by `charts` when given (as the review expands it).
    ///
    /// Returns the expanded charts' default values.
    ///
    /// # Errors
    /// A chart that cannot be expanded.
    pub(crate) fn add(
        &mut self,
        loaded: &LoadedProfile,
        rendered: &Rendered,
        charts: Option<&Charts>,
    ) -> Result<ChartNames, ChartError> {
        let mut named = ChartNames::new();
        let profile = &loaded.profile;
        let cluster = &profile.cluster.name;
        let objects = rendered.objects();
        let side: Vec<&Object> = objects.iter().map(|o| &o.object).collect();
        for o in &objects {
            if crate::flux::HELM_RELEASE.is(&o.object.id.gvk) {
                if let Some(charts) = charts {
                    let expansion = charts.expand(&o.object, &side)?;
                    let chart = format!("{} {}", expansion.chart.name, expansion.chart.version);
                    for (object, _) in &expansion.objects {
                        self.containers(cluster, &o.layer, Some(&chart), object);
                    }
                    named.insert(chart, expansion.defaults.clone());
                }
                continue;
            }
            self.containers(cluster, &o.layer, None, &o.object);
        }
        for layer in &profile.layers {
            let Some(component) = layer.renders() else { continue };
            for (image, what) in (component.pulled)(&profile.sections) {
                let puller =
                    Puller::Component { cluster: cluster.clone(), layer: layer.name.clone(), what: what.to_owned() };
                self.0.entry(image).or_default().insert(puller);
            }
        }
        for (image, checks) in crate::verify::checks::images(profile) {
            for check in checks {
                self.0.entry(image.clone()).or_default().insert(Puller::Check { cluster: cluster.clone(), check });
            }
        }
        Ok(named)
    }

    /// Add `other`'s images and their pullers.
    pub(crate) fn merge(&mut self, other: Self) {
        for (image, by) in other.0 {
            self.0.entry(image).or_default().extend(by);
        }
    }

    /// The containers of `object` that pull an image ([`Object::images`]).
    fn containers(&mut self, cluster: &str, layer: &str, chart: Option<&str>, object: &Object) {
        for (container, image) in object.images() {
            let puller = Puller::Container {
                cluster: cluster.to_owned(),
                layer: layer.to_owned(),
                chart: chart.map(str::to_owned),
                object: object.id.to_string(),
                container,
            };
            self.0.entry(image).or_default().insert(puller);
        }
    }

    /// As `skopeo sync --src yaml` reads them: per registry, each repository and its tags (and
    /// digests) — with a mirror, of the images it copies from — ; an image that does not parse
    /// is left out and returned.
    #[must_use]
    pub(crate) fn skopeo_sync(&self, mirrored: &Mirrored) -> (BTreeMap<String, Value>, Vec<String>) {
        let mut registries: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        let mut refused = Vec::new();
        // With a mirror, what it copies; the user's own images on it are not copied.
        let images: Vec<&String> =
            if mirrored.sources.is_empty() { self.0.keys().collect() } else { mirrored.sources.values().collect() };
        for image in images {
            match ImageRef::parse(image) {
                Ok(r) => {
                    let versions = registries.entry(r.registry).or_default().entry(r.repository).or_default();
                    // A digest is what is pulled, whatever tag is beside it.
                    versions.extend(r.digest.or(r.tag));
                }
                Err(why) => refused.push(format!("{image:?}: {why}")),
            }
        }
        let out = registries
            .into_iter()
            .map(|(registry, images)| (registry, serde_json::json!({"images": images})))
            .collect();
        (out, refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn images(profile: &str) -> Images {
        let (_, text) = crate::profile::embedded_text(profile).unwrap();
        let loaded = crate::profile::parse("p.yaml", text).unwrap();
        let rendered = crate::commands::renderer(None).unwrap().render(&loaded).unwrap();
        let mut images = Images::default();
        images.add(&loaded, &rendered, None).unwrap();
        images
    }

    /// Without the charts: the rendered pods (the pools, the acceptance layer's Job, CronJob and
    /// Deployment), the images in the server's configuration, and the checks' probe images,
    /// each with who pulls it.
    #[test]
    fn the_rendered_pods_the_components_and_the_checks_pull_their_images() {
        let all = images("fresh-cluster");
        let by = |image: &str| all.0.get(image).unwrap_or_else(|| panic!("no {image} in {:#?}", all.0.keys()));
        let acceptance = by("registry.example.org/osbx:0.1.0");
        for object in [
            "Job/osbx-acceptance/osbx-acceptance",
            "CronJob/osbx-acceptance/osbx-acceptance-deep",
            "Deployment/osbx-acceptance/osbx-acceptance",
        ] {
            assert!(
                acceptance.iter().any(|p| matches!(p, Puller::Container { object: o, container, .. } if o == object && container == "osbx")),
                "{object}: {acceptance:?}"
            );
        }
        let execd = all.0.iter().find(|(i, _)| i.contains("execd")).unwrap();
        assert!(
            execd.1.iter().any(|p| matches!(p, Puller::Component { layer, .. } if layer == "opensandbox")),
            "{execd:?}"
        );
        let probe = by("busybox:1.37");
        assert!(
            probe.iter().any(|p| matches!(p, Puller::Check { check, .. } if check == "kata.guest-kernel")),
            "{probe:?}"
        );
        assert!(
            by("python:3.13-alpine")
                .iter()
                .any(|p| matches!(p, Puller::Check { check, .. } if check == "kata.host-kvm"))
        );
        // A pool's image, from the Pool's pod template.
        assert!(
            all.0
                .values()
                .flatten()
                .any(|p| matches!(p, Puller::Container { object, .. } if object.starts_with("Pool/"))),
            "{all:#?}"
        );
        // No HelmRelease is read as a pod without its chart.
        assert!(
            !all.0
                .values()
                .flatten()
                .any(|p| matches!(p, Puller::Container { object, .. } if object.starts_with("HelmRelease/")))
        );
    }

    /// A chart's image the mirror does not cover is named with the value of the chart that
    /// names it (found in the chart's defaults, whichever way the chart splits the reference),
    /// and what to set it to; an image no value names says the chart must change.
    #[test]
    fn an_image_outside_the_mirror_names_the_chart_value_that_would_move_it() {
        let defaults = serde_json::json!({
            "image": {"reference": "quay.io/kata-containers/kata-deploy", "tag": ""},
            "monitor": {"image": {"registry": "quay.io", "repository": "kata-containers/kata-monitor"}},
            "helper": "docker.io/library/busybox:1.37",
            "other": {"image": "quay.io/kata-containers/kata-deploy-other"},
            "list": ["quay.io/kata-containers/kata-deploy"],
        });
        assert_eq!(naming(&defaults, "quay.io/kata-containers/kata-deploy:4.1.0"), ["image.reference"]);
        assert_eq!(
            naming(&defaults, &format!("quay.io/kata-containers/kata-monitor@sha256:{}", "0".repeat(64))),
            ["monitor.image.repository"]
        );
        assert_eq!(naming(&defaults, "busybox:1.37"), ["helper"]);
        assert!(naming(&defaults, "ghcr.io/spiffe/spire-agent:1.13.3").is_empty());

        let (_, text) = crate::profile::embedded_text("fresh-cluster").unwrap();
        let text = format!("{text}\nimages:\n  mirror:\n    \"*\": mirror.corp/all\n");
        let loaded = crate::profile::parse("p.yaml", text).unwrap();
        let by = |layer: &str| Puller::Container {
            cluster: "c".into(),
            layer: layer.into(),
            chart: Some("kata-deploy 4.1.0".into()),
            object: "DaemonSet/kube-system/kata-deploy".into(),
            container: "kube-kata".into(),
        };
        let mut of = Images::default();
        for image in ["quay.io/kata-containers/kata-deploy:4.1.0", "quay.io/unnamed/thing:1"] {
            of.0.entry(image.to_owned()).or_default().insert(by("kata"));
        }
        let mut named = ChartNames::new();
        named.insert("kata-deploy 4.1.0".into(), std::sync::Arc::new(defaults.clone()));
        let mut mirrored = Mirrored::default();
        mirrored.add(&loaded, &of, &named);
        let (pullers, why) = &mirrored.outside["quay.io/kata-containers/kata-deploy:4.1.0"];
        assert!(pullers.contains(&by("kata")));
        assert!(why.contains("set `kata.values.image.reference` (chart kata-deploy 4.1.0)"), "{why}");
        assert!(why.contains("it would be mirror.corp/all/quay.io/kata-containers/kata-deploy:4.1.0"), "{why}");
        let (_, why) = &mirrored.outside["quay.io/unnamed/thing:1"];
        assert!(why.contains("no value of its chart names it"), "{why}");
    }

    /// Every pod spec under `value` (a map with `containers`).
    fn pod_specs<'a>(value: &'a Value, out: &mut Vec<&'a Value>) {
        match value {
            Value::Object(map) if map.contains_key("containers") => out.push(value),
            Value::Object(map) => map.values().for_each(|v| pod_specs(v, out)),
            Value::Array(list) => list.iter().for_each(|v| pod_specs(v, out)),
            _ => {}
        }
    }

    /// Every shipped profile with a mirror for all registries and a pull Secret: every image
    /// osbx renders, configures or probes with is on the mirror, every pod spec osbx renders
    /// pulls with the Secret, and every chart is given both through its values.
    #[test]
    fn with_a_mirror_every_image_osbx_names_is_on_it_and_every_pod_has_the_pull_secret() {
        let renderer = crate::commands::renderer(None).unwrap();
        for (name, _) in crate::profile::embedded_profiles() {
            let (_, text) = crate::profile::embedded_text(&name).unwrap();
            let text = format!(
                "{text}\nimages:\n  mirror:\n    docker.io: mirror.corp/hub\n    \"*\": mirror.corp/all\n  pullSecrets: [mirror-pull]\n"
            );
            let loaded = crate::profile::parse("p.yaml", text).unwrap_or_else(|e| panic!("{name}: {e}"));
            let rendered = renderer.render(&loaded).unwrap();
            let mut all = Images::default();
            all.add(&loaded, &rendered, None).unwrap();
            for image in all.0.keys() {
                assert!(
                    image.starts_with("mirror.corp/hub/") || image.starts_with("mirror.corp/all/"),
                    "{name}: {image}"
                );
            }
            let mut mirrored = Mirrored::default();
            mirrored.add(&loaded, &all, &ChartNames::new());
            assert!(mirrored.outside.is_empty(), "{name}: {:?}", mirrored.outside);
            assert_eq!(mirrored.sources.len(), all.0.len(), "{name}: every image has its source");
            for o in rendered.objects() {
                let mut specs = Vec::new();
                pod_specs(&o.object.value, &mut specs);
                for spec in specs {
                    assert_eq!(
                        spec["imagePullSecrets"],
                        serde_json::json!([{"name": "mirror-pull"}]),
                        "{name}: {}",
                        o.object.id
                    );
                }
                // A chart's values: its images and pull Secrets are set there.
                if o.object.id.gvk.kind == "ConfigMap" && o.object.id.name.ends_with("values") {
                    let values = o.object.value["data"]["values.yaml"].as_str().unwrap();
                    assert!(values.contains("mirror-pull"), "{name}: {}: {values}", o.object.id);
                    assert!(values.contains("mirror.corp/all"), "{name}: {}: {values}", o.object.id);
                }
            }
            let a = &loaded.profile.verify;
            assert!(a.probe_image.starts_with("mirror.corp/hub/library/busybox:"), "{name}: {}", a.probe_image);
        }
    }

    #[test]
    fn skopeo_sync_lists_each_registry_s_repositories_and_tags() {
        let mut all = Images::default();
        for image in [
            "busybox:1.37",
            "docker:27-dind",
            "registry.example.org:5000/team/osbx@sha256:0123456789abcdef0123456789abcdef",
            "ghcr.io/spiffe/spire-agent:1.15.3",
            "cgr.dev/chainguard/bash:latest@sha256:90041f375e30f41aa7e0390075d8a69dc61900771d52fa98d63ee5d03d866a58",
            "Bad Image",
        ] {
            all.0.entry(image.to_owned()).or_default();
        }
        let (yaml, refused) = all.skopeo_sync(&Mirrored::default());
        assert_eq!(
            serde_json::to_value(&yaml).unwrap(),
            serde_json::json!({
                // A digest is what is pulled: the tag beside it is not listed.
                "cgr.dev": {"images": {"chainguard/bash": ["sha256:90041f375e30f41aa7e0390075d8a69dc61900771d52fa98d63ee5d03d866a58"]}},
                "docker.io": {"images": {"library/busybox": ["1.37"], "library/docker": ["27-dind"]}},
                "ghcr.io": {"images": {"spiffe/spire-agent": ["1.15.3"]}},
                "registry.example.org:5000": {"images": {"team/osbx": ["sha256:0123456789abcdef0123456789abcdef"]}},
            })
        );
        assert_eq!(refused.len(), 1, "{refused:?}");
    }
}
