//! The `acceptance` component: the acceptance checks run in the cluster itself, from the
//! `acceptance` section.
//!
//! The layer renders a namespace, a ServiceAccount bound to exactly the roles `osbx rbac --for
//! verify --in-cluster` derives (the render asks the derivation, [`crate::render::Roles`]), the
//! profile as a ConfigMap, a Job that runs `osbx verify` once per revision (Flux's Ready of the
//! layer, and of every layer that `dependsOn` it, then means the checks passed at that revision),
//! a Deployment that runs them every `interval` and serves their metrics (`osbx verify --serve`),
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
    ..Component::without_chart(
        "acceptance",
        "the acceptance checks in the cluster: a Job per revision and a Deployment serving their metrics",
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
mod tests {
    use serde_json::{Value, json};

    /// fresh-cluster with `over` merged into it.
    fn fresh(over: &Value) -> Result<crate::profile::LoadedProfile, String> {
        let (_, text) = crate::profile::embedded_text("fresh-cluster").unwrap();
        let mut doc: Value = serde_saphyr::from_str(&text).unwrap();
        crate::merge::merge(&mut doc, over);
        crate::profile::from_value("fresh-cluster", &doc).map_err(|e| format!("{e:?}"))
    }

    fn layer(loaded: &crate::profile::LoadedProfile) -> Vec<crate::object::Object> {
        let rendered = crate::commands::renderer(None).unwrap().render(loaded).unwrap();
        rendered.objects().into_iter().filter(|o| o.layer == "acceptance").map(|o| o.object).collect()
    }

    fn find<'a>(objects: &'a [crate::object::Object], kind: &str) -> Option<&'a crate::object::Object> {
        objects.iter().find(|o| o.id.gvk.kind == kind)
    }

    #[test]
    fn the_layer_must_come_after_every_other_and_wait() {
        let layers = |deps: Value, wait: bool| {
            let (_, text) = crate::profile::embedded_text("fresh-cluster").unwrap();
            let doc: Value = serde_saphyr::from_str(&text).unwrap();
            let mut layers = doc["layers"].clone();
            let last = layers.as_array_mut().unwrap().last_mut().unwrap();
            last["dependsOn"] = deps;
            last["wait"] = json!(wait);
            json!({"layers": layers})
        };
        let e = fresh(&layers(json!(["opensandbox-pools"]), true)).unwrap_err();
        assert!(e.contains("add spire-smoke to its dependsOn"), "{e}");
        let e = fresh(&layers(json!(["opensandbox-pools", "spire-smoke"]), false)).unwrap_err();
        assert!(e.contains("leave `wait` true"), "{e}");
        let e = fresh(&json!({"acceptance": {"image": " ", "interval": "often", "port": 80}})).unwrap_err();
        for field in ["acceptance.image", "acceptance.interval", "acceptance.port"] {
            assert!(e.contains(field), "{field}: {e}");
        }
        assert!(fresh(&json!({})).is_ok());
    }

    /// The Job's revision is a digest of the other layers and of the criteria: a change to any of
    /// them, or to the `verify` or `acceptance` section alone, re-creates the Job (a new spec,
    /// with Flux's `force`) and restarts the serving pod (its pod template carries it too).
    #[test]
    fn the_job_changes_with_every_other_layer_and_flux_may_re_create_it() {
        let revision = |over: Value| {
            let loaded = fresh(&over).unwrap();
            let objects = layer(&loaded);
            let job = find(&objects, "Job").unwrap();
            assert_eq!(job.value["metadata"]["annotations"]["kustomize.toolkit.fluxcd.io/force"], "enabled");
            let a = loaded.profile.sections.acceptance.as_ref().unwrap();
            a.revision_in(objects.iter()).unwrap()
        };
        let base = revision(json!({}));
        assert_eq!(base.len(), 16);
        assert_ne!(revision(json!({"pools": {"defaults": {"imagePullPolicy": "Always"}}})), base);
        assert_ne!(revision(json!({"opensandbox": {"controller": {"replicas": 2}}})), base);
        let criteria = |over: Value| {
            let loaded = fresh(&over).unwrap();
            loaded.profile.sections.acceptance.as_ref().unwrap().criteria(&loaded.profile.verify)
        };
        let base_criteria = criteria(json!({}));
        for over in [
            json!({"acceptance": {"interval": "5m"}}),
            json!({"acceptance": {"image": "registry.example.org/osbx:fixed"}}),
            json!({"acceptance": {"skip": ["spiffe"]}}),
            json!({"verify": {"probeDeadlineSeconds": 61}}),
            json!({"verify": {"workload": {"buildLimitSeconds": 600}}}),
        ] {
            assert_ne!(revision(over.clone()), base, "{over}");
            assert_ne!(criteria(over.clone()), base_criteria, "{over}");
        }
        // The serving pod restarts with the criteria: its template carries the revision.
        let loaded = fresh(&json!({"verify": {"probeDeadlineSeconds": 61}})).unwrap();
        let objects = layer(&loaded);
        let serve = find(&objects, "Deployment").unwrap();
        let annotations = &serve.value["spec"]["template"]["metadata"]["annotations"];
        assert_eq!(
            annotations[super::REVISION_ANNOTATION].as_str(),
            Some(revision(json!({"verify": {"probeDeadlineSeconds": 61}})).as_str())
        );
        assert_eq!(criteria(json!({})), base_criteria, "the digest is stable");
    }

    /// A selection of checks that names no check of the profile, or selects none, is refused
    /// where the profile says it (`file:line:column`, the field), naming the checks there are.
    #[test]
    fn a_selection_naming_no_check_is_refused_at_its_place() {
        let (_, text) = crate::profile::embedded_text("fresh-cluster").unwrap();
        let render = |extra: &str| {
            let text = text.replace("acceptance:\n", &format!("acceptance:\n{extra}"));
            assert!(text.contains(extra), "fresh-cluster has an acceptance section");
            let loaded = crate::profile::parse("p.yaml", text.clone()).unwrap();
            let e = crate::commands::renderer(None).unwrap().render(&loaded).map(|_| ()).unwrap_err();
            (e.to_string(), text)
        };
        let (e, text) = render("  only: [nodes.ready, opensandbox.lifecyle]\n");
        let line = text.lines().position(|l| l.contains("opensandbox.lifecyle")).unwrap() + 1;
        assert!(e.contains(&format!("p.yaml:{line}:")), "{e}");
        assert!(e.contains("acceptance.only[1]") && e.contains("\"opensandbox.lifecyle\""), "{e}");
        assert!(e.contains("nodes.ready") && e.contains("opensandbox.lifecycle.pod"), "names the checks: {e}");
        assert!(!e.contains("acceptance.only[0]"), "{e}");
        let (e, _) = render("  skip: [kata.nope]\n");
        assert!(e.contains("acceptance.skip[0]"), "{e}");
        // Everything skipped: the runs would prove nothing.
        let (e, _) = render("  only: [nodes]\n  skip: [nodes.ready]\n");
        assert!(e.contains("acceptance.only") && e.contains("prove nothing"), "{e}");
        // A prefix of whole segments names its checks.
        let loaded = fresh(&json!({"acceptance": {"only": ["kata", "opensandbox.lifecycle"]}})).unwrap();
        assert!(crate::commands::renderer(None).unwrap().render(&loaded).is_ok());
    }

    /// A fleet writes a layer whose files differ between clusters to a directory of its own: the
    /// same objects there are the same revision (what `osbx status` and `osbx rollout` expect
    /// from a render of the profile alone).
    #[test]
    fn the_revision_is_of_the_objects_not_of_where_the_repository_keeps_them() {
        let mut loaded = fresh(&json!({})).unwrap();
        let a = loaded.profile.sections.acceptance.clone().unwrap();
        let base = a.revision_in(layer(&loaded).iter()).unwrap();
        for l in loaded.profile.layers.iter_mut().filter(|l| l.name != "acceptance") {
            l.path = Some(format!("{}-lab-a", l.repo_path()));
        }
        let rendered = crate::commands::renderer(None).unwrap().render(&loaded).unwrap();
        let moved = rendered.files.iter().filter(|f| f.path.contains("-lab-a/")).count();
        assert!(moved > 5, "the layers moved: {:?}", rendered.files.iter().map(|f| &f.path).collect::<Vec<_>>());
        assert_eq!(a.revision_in(layer(&loaded).iter()).unwrap(), base);
        // What is in them still counts.
        loaded.profile.sections.pools.items[0].capacity.pool_max += 1;
        assert_ne!(a.revision_in(layer(&loaded).iter()).unwrap(), base);
    }

    #[test]
    fn names_namespaces_and_scrape_kinds_follow_the_profile() {
        let loaded = fresh(
            &json!({"acceptance": {"namespace": "checks", "name": "gate", "scrape": "VMPodScrape", "port": 9100}}),
        )
        .unwrap();
        let objects = layer(&loaded);
        let ns = |o: &crate::object::Object| o.id.namespace.clone();
        assert!(objects.iter().any(|o| o.id.gvk.kind == "Namespace" && o.id.name == "checks"));
        for kind in ["ServiceAccount", "Job", "Deployment", "ConfigMap", "VMPodScrape"] {
            let o = find(&objects, kind).unwrap_or_else(|| panic!("no {kind}"));
            assert_eq!(ns(o).as_deref(), Some("checks"), "{kind}");
        }
        let scrape = find(&objects, "VMPodScrape").unwrap();
        assert_eq!(scrape.id.gvk.group, "operator.victoriametrics.com");
        let serve = find(&objects, "Deployment").unwrap();
        let args = serve.value["spec"]["template"]["spec"]["containers"][0]["args"].clone();
        for arg in ["gate-report", "0.0.0.0:9100", "--serve"] {
            assert!(args.as_array().unwrap().iter().any(|a| a.as_str().unwrap().contains(arg)), "{arg}: {args}");
        }
        let pm = fresh(&json!({"acceptance": {"scrape": "PodMonitor"}})).unwrap();
        assert_eq!(find(&layer(&pm), "PodMonitor").unwrap().id.gvk.group, "monitoring.coreos.com");
        assert!(find(&layer(&fresh(&json!({})).unwrap()), "PodMonitor").is_none());
        // A namespace another layer renders is theirs: not rendered twice; the probe namespace
        // is the layer's own.
        let shared = fresh(&json!({"acceptance": {"namespace": "opensandbox"}})).unwrap();
        let namespaces: Vec<String> =
            layer(&shared).iter().filter(|o| o.id.gvk.kind == "Namespace").map(|o| o.id.name.clone()).collect();
        assert_eq!(namespaces, ["osbx-acceptance-probes"]);
    }

    /// The layer renders the namespace its runs create probe pods in, at the Pod Security level
    /// the selected checks need (a host probe uses its node: `privileged`; else `baseline`), and
    /// both pods are told to use it. Sharing the layer's own namespace is refused.
    #[test]
    fn the_probe_namespace_is_rendered_at_the_level_its_probes_need() {
        let level = |over: Value| {
            let objects = layer(&fresh(&over).unwrap());
            let probes = objects.iter().find(|o| o.id.gvk.kind == "Namespace" && o.id.name == "probes").unwrap();
            assert_eq!(probes.value["metadata"]["labels"]["app.kubernetes.io/managed-by"], "osbx-verify");
            for kind in ["Job", "Deployment"] {
                let args = &find(&objects, kind).unwrap().value["spec"]["template"]["spec"]["containers"][0]["args"];
                let args: Vec<&str> = args.as_array().unwrap().iter().filter_map(Value::as_str).collect();
                assert!(args.windows(2).any(|w| w == ["--probe-namespace", "probes"]), "{kind}: {args:?}");
            }
            probes.value["metadata"]["labels"]["pod-security.kubernetes.io/enforce"].as_str().unwrap().to_owned()
        };
        assert_eq!(level(json!({"acceptance": {"probeNamespace": "probes"}})), "privileged");
        assert_eq!(level(json!({"acceptance": {"probeNamespace": "probes", "skip": ["kata"]}})), "privileged");
        assert_eq!(
            level(
                json!({"acceptance": {"probeNamespace": "probes", "only": ["nodes", "kata.guest-kernel", "spiffe"]}})
            ),
            "baseline"
        );
        let e = fresh(&json!({"acceptance": {"probeNamespace": "osbx-acceptance"}})).unwrap_err();
        assert!(e.contains("acceptance.probeNamespace") && e.contains("of its own"), "{e}");
    }

    /// Every selected check runs each `deepInterval` in a CronJob under the Job's identity,
    /// its Jobs deleted a minute after they end; its schedule is what the interval says, an
    /// interval no schedule states is refused, and `null` renders none.
    #[test]
    fn a_cron_job_runs_every_check_at_the_deep_interval_as_the_job() {
        let cron = |over: Value| find(&layer(&fresh(&over).unwrap()), "CronJob").cloned();
        let c = cron(json!({"acceptance": {"name": "gate", "deepInterval": "30m"}})).unwrap();
        assert_eq!((c.id.name.as_str(), c.id.namespace.as_deref()), ("gate-deep", Some("osbx-acceptance")));
        let spec = &c.value["spec"];
        assert_eq!(
            (spec["schedule"].as_str(), spec["concurrencyPolicy"].as_str()),
            (Some("*/30 * * * *"), Some("Forbid"))
        );
        let job = &spec["jobTemplate"]["spec"];
        assert_eq!(job["ttlSecondsAfterFinished"], 60);
        assert_eq!(job["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"], json!([1]));
        let pod = &job["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], "gate", "the Job's identity");
        assert_eq!(pod["restartPolicy"], "Never");
        let args: Vec<&str> =
            pod["containers"][0]["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert!(args.windows(2).any(|w| w == ["--cron-job", "gate-deep"]), "{args:?}");
        assert!(!args.contains(&"--read-only"), "{args:?}");
        // The same pod as the Job's, but for who it says it is.
        let objects = layer(&fresh(&json!({"acceptance": {"name": "gate", "deepInterval": "30m"}})).unwrap());
        let of_job = &find(&objects, "Job").unwrap().value["spec"];
        assert_eq!(of_job["podFailurePolicy"], job["podFailurePolicy"]);
        assert_eq!(of_job["template"]["spec"]["volumes"], pod["volumes"]);
        for (interval, schedule) in [
            ("1m", "* * * * *"),
            ("15m", "*/15 * * * *"),
            ("60m", "0 * * * *"),
            ("1h", "0 * * * *"),
            ("6h", "0 */6 * * *"),
            ("24h", "0 0 * * *"),
        ] {
            let c = cron(json!({"acceptance": {"deepInterval": interval}})).unwrap();
            assert_eq!(c.value["spec"]["schedule"], schedule, "{interval}");
        }
        assert_eq!(cron(json!({})).unwrap().value["spec"]["schedule"], "0 */6 * * *", "the default");
        assert!(cron(json!({"acceptance": {"deepInterval": null}})).is_none());
        for bad in ["7m", "90s", "5h", "48h", "30s", "often"] {
            let e = fresh(&json!({"acceptance": {"deepInterval": bad}})).unwrap_err();
            assert!(e.contains("acceptance.deepInterval") && e.contains("divisor of an hour"), "{bad}: {e}");
        }
        let long = "a".repeat(50);
        let e = fresh(&json!({"acceptance": {"name": long}})).unwrap_err();
        assert!(e.contains("at most 47 characters"), "{e}");
        assert!(fresh(&json!({"acceptance": {"name": long, "deepInterval": null}})).is_ok());
    }

    /// The profile in the ConfigMap loads back as the same profile (the Job reads it).
    #[test]
    fn the_profile_in_the_layer_loads_back() {
        let loaded = fresh(&json!({})).unwrap();
        let objects = layer(&loaded);
        let map = objects.iter().find(|o| o.id.name == "osbx-acceptance-profile").unwrap();
        let text = map.value["data"]["profile.yaml"].as_str().unwrap();
        let doc: Value = serde_saphyr::from_str(text).unwrap();
        let again = crate::profile::from_value("again", &doc).unwrap();
        assert_eq!(serde_json::to_value(&again.profile).unwrap(), serde_json::to_value(&loaded.profile).unwrap());
    }
}
