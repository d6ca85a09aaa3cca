//! The `acceptance` component: the acceptance checks run in the cluster itself, from the
//! `acceptance` section.
//!
//! The layer renders a namespace, a ServiceAccount bound to exactly the roles `osbx rbac --for
//! verify --in-cluster` derives (the render asks the derivation, [`crate::render::Roles`]), the
//! profile as a ConfigMap, a Job that runs `osbx verify` once per revision (Flux's Ready of the
//! layer, and of every layer that `dependsOn` it, then means the checks passed at that revision),
//! a CronJob that runs them every `deepInterval` between revisions under the Job's identity, a
//! Deployment that runs the read-only ones every `interval` and serves every check's metrics
//! (`osbx verify --serve`),
//! and a `PodMonitor` or `VMPodScrape` for it when the profile names one. Each run publishes its
//! report to the ConfigMap [`Acceptance::report`] names. The layer renders after every other one,
//! with their revision ([`Component::after_others`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tera::Context;

use super::{Component, Sections, Site};
use crate::object::{KnownKind, ObjectRef};
use crate::spec::Violations;
use crate::spec::values::Resources;

/// The table entry of this component.
pub(crate) static COMPONENT: Component = Component {
    after_others: true,
    images: |s, images, v| {
        if let Some(a) = &mut s.acceptance {
            images.rewrite(&mut a.image, "acceptance.image", v);
        }
    },
    ..Component::without_chart(
        "acceptance",
        "the acceptance checks in the cluster: a Job per revision, a CronJob between revisions and a Deployment serving their metrics",
        "acceptance",
        validate,
        view,
    )
};

/// The annotation of the Job's (and the Deployment's) pod template that carries the revision of
/// the other layers it checks; what changes it re-creates the Job.
pub const REVISION_ANNOTATION: &str = "osbx.dev/revision";

/// The kind of the layer's Job (`batch/v1` Job).
pub const JOB: KnownKind = KnownKind::new("batch", "v1", "Job");

/// The kind of the layer's CronJob (`batch/v1` CronJob).
pub const CRON_JOB: KnownKind = KnownKind::new("batch", "v1", "CronJob");

/// How many hex digits of a SHA-256 a revision keeps.
pub const REVISION_DIGITS: usize = 16;

/// The revision a Job of an acceptance layer checks (its pod template's [`REVISION_ANNOTATION`]).
#[must_use]
pub fn job_revision(job: &crate::object::Object) -> Option<&str> {
    job.value["spec"]["template"]["metadata"]["annotations"][REVISION_ANNOTATION].as_str()
}

/// Whether `text` has the shape of a revision osbx renders ([`REVISION_DIGITS`] hex digits).
#[must_use]
pub fn is_revision(text: &str) -> bool {
    text.len() == REVISION_DIGITS && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The run whose report a gate may trust: the layer's Job (read for its uid) at `revision`,
/// checking by `criteria`, publishing to `report`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Expected {
    /// The ConfigMap the run publishes to.
    pub(crate) report: ObjectRef,
    /// The layer's Job.
    pub(crate) job: ObjectRef,
    /// The revision the Job checks (its pod template's [`REVISION_ANNOTATION`]).
    pub(crate) revision: String,
    /// The digest of the criteria ([`Acceptance::criteria`]).
    pub(crate) criteria: String,
}

/// What scrapes the serving pod's metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum Scrape {
    /// The Prometheus Operator's `PodMonitor` (`monitoring.coreos.com/v1`).
    PodMonitor,
    /// The VictoriaMetrics Operator's `VMPodScrape` (`operator.victoriametrics.com/v1beta1`).
    VMPodScrape,
}

/// The acceptance checks, run in the cluster.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("required" = ["image"]))]
pub struct Acceptance {
    /// The osbx image the Job and the Deployment run, built from the repository's
    /// `Containerfile` (a tag or a digest, from your registry or a mirror).
    pub image: String,
    /// Namespace of the ServiceAccount, the Job, the Deployment and the report.
    pub namespace: String,
    /// The namespace the in-cluster runs create their probe pods in (rendered by the layer,
    /// with the Pod Security level its probes need); the only namespace where the layer's
    /// identity may create pods, besides the SPIFFE smoke namespace.
    pub probe_namespace: String,
    /// Name of the ServiceAccount, the Job, the Deployment and the ConfigMaps
    /// (`<name>-profile`, `<name>-report`).
    pub name: String,
    /// How often the Deployment runs the checks that only read.
    pub interval: String,
    /// How often a CronJob runs every selected check between revisions (the probes, sandboxes
    /// and builds too), under the Job's identity; its verdicts reach the serving pod's metrics.
    /// A divisor of an hour (`1m` … `30m`, `60m`) or of a day (`1h` … `12h`, `24h`), which a
    /// CronJob's schedule can state; `null`: no CronJob (those checks run once per revision).
    pub deep_interval: Option<String>,
    /// The port the metrics are served on (`/metrics`, OpenMetrics).
    pub port: u16,
    /// Render a scrape object for the metrics: `PodMonitor` or `VMPodScrape`.
    pub scrape: Option<Scrape>,
    /// Requests and limits of the osbx container.
    pub resources: Option<Resources>,
    /// Run only these checks (ids or prefixes, as `osbx verify --only`); all when empty.
    pub only: Vec<String>,
    /// Skip these checks (ids or prefixes, as `osbx verify --skip`).
    pub skip: Vec<String>,
}

impl Default for Acceptance {
    fn default() -> Self {
        Self {
            image: String::new(),
            namespace: "osbx-acceptance".into(),
            probe_namespace: "osbx-acceptance-probes".into(),
            name: "osbx-acceptance".into(),
            interval: "15m".into(),
            deep_interval: Some("6h".into()),
            port: 9464,
            scrape: None,
            resources: None,
            only: Vec::new(),
            skip: Vec::new(),
        }
    }
}

impl Acceptance {
    /// The ConfigMap each run publishes its report to.
    #[must_use]
    pub fn report(&self) -> ObjectRef {
        KnownKind::CONFIG_MAP.object(Some(&self.namespace), &format!("{}-report", self.name))
    }

    /// The revision the rendered Job checks (its pod template's [`REVISION_ANNOTATION`]), from
    /// the objects of a render (`None`: no such Job among them).
    pub fn revision_in<'a>(&self, mut objects: impl Iterator<Item = &'a crate::object::Object>) -> Option<String> {
        objects
            .find(|o| {
                o.id.gvk.kind == "Job" && o.id.name == self.name && o.id.namespace.as_deref() == Some(&self.namespace)
            })
            .and_then(job_revision)
            .map(str::to_owned)
    }

    /// The Job the layer renders (the checks at one revision).
    #[must_use]
    pub fn job(&self) -> ObjectRef {
        JOB.object(Some(&self.namespace), &self.name)
    }

    /// The digest of the criteria a run of the layer checks by: this section and the profile's
    /// `verify` section, as rendered ([`REVISION_DIGITS`] hex digits of a SHA-256 of both as
    /// JSON). Stated here once: the render mixes it into the revision (a change to either re-runs
    /// the Job and restarts the serving pod), each run publishes the digest of the profile it
    /// read, and `osbx rollout` trusts only a report of the wave's.
    #[must_use]
    pub(crate) fn criteria(&self, verify: &impl Serialize) -> String {
        let both = json!({"acceptance": self, "verify": verify});
        crate::hash::sha256_hex(both.to_string().as_bytes())[..REVISION_DIGITS].to_owned()
    }

    /// The run a verdict of this render must come from: the layer's Job at the revision the
    /// rendered Job checks, for `criteria` (the profile's: [`Acceptance::criteria`]; `None`: no
    /// such Job among `objects`).
    pub(crate) fn expected<'a>(
        &self,
        criteria: String,
        objects: impl Iterator<Item = &'a crate::object::Object>,
    ) -> Option<Expected> {
        Some(Expected { report: self.report(), job: self.job(), revision: self.revision_in(objects)?, criteria })
    }

    /// The CronJob that runs every selected check each `deepInterval` (`None`: the profile
    /// asks for none).
    #[must_use]
    pub fn cron_job(&self) -> Option<ObjectRef> {
        self.deep_interval.as_ref()?;
        Some(CRON_JOB.object(Some(&self.namespace), &format!("{}-deep", self.name)))
    }

    /// The serving pod's ServiceAccount (it creates nothing): namespace and `<name>-serve`.
    #[must_use]
    pub fn serving_account(&self) -> (String, String) {
        (self.namespace.clone(), format!("{}-serve", self.name))
    }

    /// The ServiceAccount the checks run as: namespace and name.
    #[must_use]
    pub fn service_account(&self) -> (String, String) {
        (self.namespace.clone(), self.name.clone())
    }
}

fn validate(s: &Sections, site: &Site<'_>, v: &mut Violations) {
    let Some(a) = &s.acceptance else {
        if let Some((i, _)) = site.layer_of(&COMPONENT) {
            v.push(format!("layers[{i}].component"), "an acceptance layer needs a top-level `acceptance` section");
        }
        return;
    };
    if a.image.trim().is_empty() {
        v.push("acceptance.image", "name the osbx image to run (built from the repository's Containerfile)");
    } else if a.image.chars().any(char::is_whitespace) {
        v.push("acceptance.image", format!("{:?} is not an image reference", a.image));
    }
    v.dns_label("acceptance.namespace", &a.namespace);
    v.dns_label("acceptance.probeNamespace", &a.probe_namespace);
    if a.probe_namespace == a.namespace {
        v.push(
            "acceptance.probeNamespace",
            "use a namespace of its own: its probe pods may run privileged, and the layer's own pods (which hold its token) run in `namespace`",
        );
    }
    // `<name>-report` and `<name>-profile` must be names too, and `<name>-deep` a CronJob's
    // (at most 52 characters: its Jobs add 11).
    if a.name.len() > 56 {
        v.push("acceptance.name", "at most 56 characters (`-profile` is added to it)");
    } else if a.deep_interval.is_some() && a.name.len() > 47 {
        v.push(
            "acceptance.name",
            "at most 47 characters with a `deepInterval` (the CronJob `<name>-deep` names its Jobs)",
        );
    }
    v.dns_label("acceptance.name", &a.name);
    v.duration("acceptance.interval", &a.interval);
    if let Some(deep) = &a.deep_interval
        && let Err(why) = schedule(deep)
    {
        v.push("acceptance.deepInterval", why);
    }
    for (field, ids) in [("acceptance.only", &a.only), ("acceptance.skip", &a.skip)] {
        for (i, id) in ids.iter().enumerate() {
            if id.is_empty() || id.contains(|c: char| c == ',' || c.is_whitespace()) {
                v.push(format!("{field}[{i}]"), format!("{id:?} is not a check id or prefix"));
            }
        }
    }
    if a.port < 1024 {
        v.push("acceptance.port", "use a port of 1024 or more: the container runs as a user without privileges");
    }
    let Some((i, layer)) = site.layer_of(&COMPONENT) else { return };
    // The verdict covers every layer: each must be Ready before the checks run.
    let mut reached = std::collections::BTreeSet::new();
    let mut next = vec![layer];
    while let Some(name) = next.pop() {
        if let Some((_, deps, _)) = site.all.iter().find(|(n, _, _)| *n == name) {
            for d in *deps {
                if reached.insert(d.as_str()) {
                    next.push(d.as_str());
                }
            }
        }
    }
    let missing: Vec<&str> =
        site.layers.iter().map(|(_, n, _)| *n).filter(|n| *n != layer && !reached.contains(n)).collect();
    if !missing.is_empty() {
        v.push(
            format!("layers[{i}].dependsOn"),
            format!(
                "the acceptance layer checks every layer, so it must come after each: add {} to its dependsOn",
                missing.join(", ")
            ),
        );
    }
    if site.all.iter().any(|(n, _, wait)| *n == layer && !wait) {
        v.push(format!("layers[{i}].wait"), "the acceptance layer's Ready is its Job's verdict: leave `wait` true");
    }
}

/// The CronJob schedule of an interval: every `m` minutes of each hour (`m` divides 60), every
/// `h` hours of each day (`h` divides 24), or daily; what no schedule states is refused.
fn schedule(interval: &str) -> Result<String, String> {
    let refused = || {
        format!(
            "{interval:?}: a CronJob can run every divisor of an hour (1m, 2m, … 30m, 60m) or of a day (1h, 2h, … 12h, 24h); use one of those"
        )
    };
    let millis = crate::spec::syntax::parse_duration(interval).map(|d| d.as_millis()).ok_or_else(refused)?;
    if millis == 0 || millis % 60_000 != 0 {
        return Err(refused());
    }
    let minutes = millis / 60_000;
    match minutes {
        1 => Ok("* * * * *".into()),
        m if m < 60 && 60 % m == 0 => Ok(format!("*/{m} * * * *")),
        60 => Ok("0 * * * *".into()),
        m if m % 60 == 0 && m < 24 * 60 && (24 * 60) % m == 0 => Ok(format!("0 */{} * * *", m / 60)),
        m if m == 24 * 60 => Ok("0 0 * * *".into()),
        _ => Err(refused()),
    }
}

/// `acceptance`: the section, with the report's name and the sandbox namespace its probes read.
fn view(s: &Sections, _: &Site<'_>, ctx: &mut Context) {
    if let Some(a) = &s.acceptance {
        let mut v = serde_json::to_value(a).unwrap_or_default();
        v["report"] = json!(a.report().name);
        v["profileConfigMap"] = json!(format!("{}-profile", a.name));
        v["revisionAnnotation"] = json!(REVISION_ANNOTATION);
        v["cronJob"] = json!(a.cron_job().map(|c| c.name));
        v["deepSchedule"] = json!(a.deep_interval.as_deref().and_then(|d| schedule(d).ok()));
        // The label of verify's probe namespaces, which the kata layer's admission policy binds.
        let (key, value) = super::kata::annotations::PROBE_NAMESPACE_LABEL;
        v["probeLabel"] = json!({"key": key, "value": value});
        let mut selection = Vec::new();
        for (flag, ids) in [("--only", &a.only), ("--skip", &a.skip)] {
            if !ids.is_empty() {
                selection.extend([flag.to_owned(), ids.join(",")]);
            }
        }
        v["selection"] = json!(selection);
        v["scrapeApiVersion"] = json!(match a.scrape {
            Some(Scrape::PodMonitor) => "monitoring.coreos.com/v1",
            Some(Scrape::VMPodScrape) => "operator.victoriametrics.com/v1beta1",
            None => "",
        });
        ctx.insert("acceptance", &v);
    }
}

#[cfg(test)]
mod tests;
