//! What the checks iterate: every shipped profile and every member of the fleet example, rendered
//! once; their HelmReleases with the values helm-controller would pass and the shared chart that
//! stands in for the chart Flux would fetch.

use std::sync::OnceLock;

use serde_json::Value;

use super::Finding;
use super::helm::Job;
use super::values;
use crate::support::root;

/// A rendered profile (or fleet member, or generated variant).
pub struct Subject {
    /// `profile homelab`, `fleet labs, cluster lab-b`, `variant "other names" of profile default`.
    pub label: String,
    /// Where it comes from.
    pub origin: Origin,
    /// The profile (for a fleet member: the merged one).
    pub profile: osbx::profile::Profile,
    /// The objects osbx renders.
    pub objects: Vec<Value>,
    /// Its layers, as apply, diff, verify and rbac see them.
    pub layers: Vec<osbx::deploy::Layer>,
}

/// Where a subject comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Origin {
    /// `profiles/*.yaml`.
    Shipped,
    /// A member of `examples/fleet.yaml`.
    Fleet,
    /// Generated from a shipped profile ([`super::variants`]).
    Variant,
}

/// The shared upstream charts the tests render, relative to the charts root.
pub mod chart {
    /// `helm/opensandbox/0.2.2` (stand-in: upstream commit 401a525, see SOURCES.md).
    pub const OPENSANDBOX: &str = "opensandbox-401a525/opensandbox";
    /// kata-deploy 4.1.0.
    pub const KATA: &str = "kata-deploy-4.1.0/kata-deploy";
    /// spire 0.30.0.
    pub const SPIRE: &str = "spire-0.30.0/spire";
    /// spire-crds 0.6.0 (the one tagged with spire 0.30.0).
    pub const SPIRE_CRDS: &str = "spire-0.30.0/spire-crds";
}

/// A HelmRelease of a subject.
pub struct Release {
    /// Index into [`subjects`].
    pub subject: usize,
    /// `namespace/name` of the HelmRelease.
    pub id: String,
    /// Helm release name (`spec.releaseName`, else `[targetNamespace-]name` like helm-controller).
    pub helm_name: String,
    /// Release namespace (`spec.targetNamespace`, else the HelmRelease's namespace).
    pub namespace: String,
    /// The shared chart, or why the test cannot map the chart this release installs.
    pub chart: Result<&'static str, String>,
    /// Mapped, but with a caveat the mapping check reports (e.g. no version pin).
    pub caveats: Vec<String>,
    /// The values helm-controller passes, or why they cannot be resolved.
    pub values: Result<Value, String>,
}

impl Release {
    /// The subject it belongs to.
    pub fn subject(&self) -> &'static Subject {
        &subjects()[self.subject]
    }

    /// A finding about this release: `what` prefixed with `HelmRelease ns/name`.
    pub fn finding(&self, what: &str) -> Finding {
        Finding::new(self.subject().label.clone(), format!("HelmRelease {}: {what}", self.id))
    }

    /// The `helm template` job for these values, or why there is none.
    pub fn job_with(&self, values: &Value) -> Result<Job, String> {
        let chart = self.chart.clone()?;
        Ok(Job::new(chart, &self.helm_name, &self.namespace, values))
    }

    /// The job for the unmodified values.
    pub fn job(&self) -> Result<Job, String> {
        let values = self.values.clone()?;
        self.job_with(&values)
    }
}

/// Every shipped profile (`profiles/*.yaml`), every member of `examples/fleet.yaml`, then every
/// generated variant ([`super::variants::variants`]).
pub fn subjects() -> &'static [Subject] {
    static SUBJECTS: OnceLock<Vec<Subject>> = OnceLock::new();
    SUBJECTS.get_or_init(|| {
        let renderer = osbx::commands::renderer(None).expect("load the embedded templates");
        let render = |label: String, origin: Origin, loaded: &osbx::profile::LoadedProfile| {
            let rendered = renderer.render(loaded).unwrap_or_else(|e| panic!("{label}: render: {e}"));
            let layers = osbx::deploy::layers(&loaded.profile, &rendered);
            let objects = rendered.objects().into_iter().map(|o| o.object.value).collect();
            Subject { label, origin, profile: loaded.profile.clone(), objects, layers }
        };
        let mut out = Vec::new();
        for name in shipped_profiles() {
            let source = osbx::profile::ProfileSource::Embedded(name.clone());
            let loaded = osbx::profile::load(&source).unwrap_or_else(|e| panic!("load profile {name}: {e}"));
            out.push(render(format!("profile {name}"), Origin::Shipped, &loaded));
        }
        let fleet_path = root().join("examples/fleet.yaml");
        let fleet = osbx::fleet::load(&fleet_path, &osbx::progress::Silent)
            .unwrap_or_else(|e| panic!("load {}: {e}", fleet_path.display()));
        for member in &fleet.members {
            let label = format!("fleet {}, cluster {}", fleet.name, member.profile.cluster.name);
            out.push(render(label, Origin::Fleet, member));
        }
        for (label, document) in super::variants::variants() {
            let loaded = osbx::profile::from_value(&label, &document).unwrap_or_else(|e| panic!("{label}: {e}"));
            out.push(render(label, Origin::Variant, &loaded));
        }
        out
    })
}

/// Every shipped profile's document: (name, parsed YAML).
pub fn shipped_documents() -> Vec<(String, Value)> {
    shipped_profiles()
        .into_iter()
        .map(|name| {
            let (_, text) = osbx::profile::embedded_text(&name).unwrap_or_else(|e| panic!("profile {name}: {e}"));
            let document: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("profile {name}: {e}"));
            (name, document)
        })
        .collect()
}

/// The names of `profiles/*.yaml`, sorted.
fn shipped_profiles() -> Vec<String> {
    let dir = root().join("profiles");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".yaml").map(str::to_owned))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no profiles in {}", dir.display());
    names
}

/// Every HelmRelease of every subject, in subject order.
pub fn releases() -> &'static [Release] {
    static RELEASES: OnceLock<Vec<Release>> = OnceLock::new();
    RELEASES.get_or_init(|| {
        let mut out = Vec::new();
        for (i, subject) in subjects().iter().enumerate() {
            for hr in subject.objects.iter().filter(|o| o["kind"] == "HelmRelease") {
                out.push(release(i, subject, hr));
            }
        }
        out
    })
}

fn release(subject: usize, s: &Subject, hr: &Value) -> Release {
    let name = hr["metadata"]["name"].as_str().unwrap_or_default();
    let hr_ns = hr["metadata"]["namespace"].as_str().unwrap_or("default");
    let target = hr["spec"]["targetNamespace"].as_str().filter(|t| !t.is_empty());
    let helm_name = match (hr["spec"]["releaseName"].as_str().filter(|r| !r.is_empty()), target) {
        (Some(r), _) => r.to_owned(),
        (None, Some(t)) => format!("{t}-{name}"),
        (None, None) => name.to_owned(),
    };
    let mut caveats = Vec::new();
    let chart = map_chart(hr, &s.objects, &mut caveats);
    Release {
        subject,
        id: format!("{hr_ns}/{name}"),
        helm_name,
        namespace: target.unwrap_or(hr_ns).to_owned(),
        chart,
        caveats,
        values: values::resolve(hr, &s.objects),
    }
}

/// The Flux source object `sourceRef` points at (default namespace: the HelmRelease's).
fn source<'a>(objects: &'a [Value], reference: &Value, hr_ns: &str) -> Result<&'a Value, String> {
    let kind = reference["kind"].as_str().unwrap_or_default();
    let name = reference["name"].as_str().unwrap_or_default();
    let ns = reference["namespace"].as_str().unwrap_or(hr_ns);
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name && o["metadata"]["namespace"] == ns)
        .ok_or_else(|| format!("its source {kind} {ns}/{name} is not in the osbx render"))
}

/// Which shared chart stands in for the chart `hr` installs; an unknown chart or version is an
/// error that names it.
fn map_chart(hr: &Value, objects: &[Value], caveats: &mut Vec<String>) -> Result<&'static str, String> {
    let hr_ns = hr["metadata"]["namespace"].as_str().unwrap_or("default");
    let spec = &hr["spec"];
    if spec["postRenderers"].as_array().is_some_and(|p| !p.is_empty()) {
        return Err("spec.postRenderers is set: this test does not apply post-renderers".into());
    }
    if !spec["chartRef"].is_null() {
        let src = source(objects, &spec["chartRef"], hr_ns)?;
        let (url, tag) = (src["spec"]["url"].as_str().unwrap_or_default(), &src["spec"]["ref"]["tag"]);
        return match (src["kind"].as_str(), url.rsplit('/').next(), tag.as_str()) {
            (Some("OCIRepository"), Some("kata-deploy"), Some("4.1.0")) if src["spec"]["ref"]["semver"].is_null() => {
                Ok(chart::KATA)
            }
            _ => Err(format!(
                "cannot map chartRef {} {} (url {url}, ref {}): the test has only kata-deploy 4.1.0 (OCIRepository tag 4.1.0)",
                src["kind"].as_str().unwrap_or_default(),
                src["metadata"]["name"].as_str().unwrap_or_default(),
                src["spec"]["ref"]
            )),
        };
    }
    let cs = &spec["chart"]["spec"];
    if cs["valuesFiles"].as_array().is_some_and(|v| !v.is_empty()) || cs["valuesFile"].is_string() {
        return Err("spec.chart.spec.valuesFiles is set: this test does not read chart values files".into());
    }
    let name = cs["chart"].as_str().unwrap_or_default();
    let version = cs["version"].as_str().unwrap_or_default();
    let src = source(objects, &cs["sourceRef"], hr_ns)?;
    let url = src["spec"]["url"].as_str().unwrap_or_default();
    match src["kind"].as_str().unwrap_or_default() {
        "GitRepository" => map_git_chart(name, url, &src["spec"]["ref"]),
        "HelmRepository" => map_repo_chart(name, version, url, caveats),
        kind => {
            Err(format!("cannot map chart {name:?} from a {kind}: the test knows GitRepository and HelmRepository"))
        }
    }
}

fn map_git_chart(path: &str, url: &str, reference: &Value) -> Result<&'static str, String> {
    let path = path.trim_start_matches("./").trim_end_matches('/');
    let repo = url.trim_end_matches('/').trim_end_matches(".git");
    let known_repo = ["https://github.com/opensandbox-group/OpenSandbox", "https://github.com/alibaba/OpenSandbox"];
    if !known_repo.contains(&repo) || path != "kubernetes/charts/opensandbox" {
        return Err(format!(
            "cannot map chart path {path:?} of GitRepository {url}: the test has only ./kubernetes/charts/opensandbox of OpenSandbox"
        ));
    }
    match reference["tag"].as_str() {
        Some("helm/opensandbox/0.2.2") => Ok(chart::OPENSANDBOX),
        _ => Err(format!(
            "cannot map OpenSandbox ref {reference}: the shared copy (commit 401a525) stands in for tag helm/opensandbox/0.2.2 only"
        )),
    }
}

fn map_repo_chart(name: &str, version: &str, url: &str, caveats: &mut Vec<String>) -> Result<&'static str, String> {
    if url.trim_end_matches('/') != "https://spiffe.github.io/helm-charts-hardened" {
        return Err(format!(
            "cannot map chart {name:?} of HelmRepository {url}: the test has only the SPIRE hardened charts"
        ));
    }
    let allows = |exact: &str, minor: &str| {
        let v = version.trim().trim_start_matches(['=', 'v']);
        v == exact
            || [format!("{minor}.x"), format!("{minor}.*"), format!("~{minor}.0"), format!("~{minor}")]
                .contains(&v.to_owned())
    };
    match name {
        "spire" if allows("0.30.0", "0.30") => Ok(chart::SPIRE),
        "spire-crds" if version.is_empty() => {
            caveats.push(
                "chart spire-crds has no version: Flux installs whatever is newest (`*`); pin 0.6.0, the spire-crds \
                 released with spire 0.30.0 (rendered here in its place)"
                    .into(),
            );
            Ok(chart::SPIRE_CRDS)
        }
        "spire-crds" if allows("0.6.0", "0.6") => Ok(chart::SPIRE_CRDS),
        _ => Err(format!(
            "cannot map chart {name:?} version {version:?} of {url}: the test has spire 0.30.x and spire-crds 0.6.x only"
        )),
    }
}
