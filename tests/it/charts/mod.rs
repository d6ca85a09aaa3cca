//! The profiles' HelmReleases rendered with the real upstream charts (`../shared/charts/`, see its
//! SOURCES.md) by a real helm, with the values helm-controller would pass: every shipped profile,
//! every member of `examples/fleet.yaml` and generated variants of the shipped profiles
//! (`variants`: renamed namespaces, other names, several pools and classes, components on and
//! off, extra values). One test per property; each iterates every release,
//! collects what is wrong and fails once with all of it (each line: who, chart, what, why).
//!
//! Shared work (profile renders, chart copies with built dependencies, `helm template` runs) is
//! done once per test binary and shared between the tests, which run in parallel. Nothing leaves
//! loopback: `helm dependency build` only packages `file://` dependencies, helm's homes are in a
//! scratch directory, and the config check's venv (`tests/opensandbox/venv`) is built once.
//! `OSBX_TEST_CHARTS` points the tests at another copy of the charts directory (same layout),
//! which must be complete as the shared one is: every release renders, or the test fails.

#![allow(clippy::print_stderr)]

mod cases;
mod checks;
mod dryrun;
pub(crate) mod helm;
mod manifest;
pub(crate) mod mirror;
mod placement;
mod server_config;
mod values;
pub(crate) mod variants;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use cases::chart;
use manifest::Baseline;

/// Values computed once per key for the whole test binary: the first caller computes, concurrent
/// callers of the same key wait for it, later ones get a copy.
pub struct OnceMap<K, V>(Mutex<BTreeMap<K, Arc<OnceLock<V>>>>);

impl<K: Ord, V: Clone> OnceMap<K, V> {
    /// An empty map (for a `static`).
    pub const fn new() -> Self {
        Self(Mutex::new(BTreeMap::new()))
    }

    /// The value of `key`, computed by `init` if nobody has.
    pub fn get_or_init(&self, key: K, init: impl FnOnce() -> V) -> V {
        let cell = self.0.lock().expect("OnceMap lock").entry(key).or_default().clone();
        cell.get_or_init(init).clone()
    }
}

/// One problem: whose render (`profile homelab`, `fleet labs, cluster lab-b`) and what is wrong
/// (`HelmRelease ns/name: chart dir: …`).
pub struct Finding {
    who: String,
    what: String,
}

impl Finding {
    /// A finding for `who`.
    pub fn new(who: String, what: String) -> Self {
        Self { who, what }
    }
}

/// Every release's baseline render, and why some have none, limited to the releases of `charts`
/// (all when empty) and those whose chart is not mapped at all.
fn baselines_of(charts: &[&str]) -> (Vec<Baseline>, Vec<Finding>) {
    let (baselines, problems) = manifest::baselines();
    let relevant = |c: &Result<&str, String>| c.as_ref().map_or(true, |c| charts.is_empty() || charts.contains(c));
    let findings = problems.into_iter().filter(|(r, _)| relevant(&r.chart)).map(|(_, f)| f).collect();
    (baselines, findings)
}

/// Print the helm statistics and fail with every finding; identical problems of several
/// releases (the same chart and values in several profiles) are listed once with all of them.
/// Every release is checked: a chart copy that cannot render (one that lacks its own `file://`
/// dependencies, say) is a finding like any other.
fn conclude(test: &str, start: Instant, findings: Vec<Finding>) {
    eprintln!("charts::{test}: {:.1} s; {}", start.elapsed().as_secs_f64(), helm::stats());
    let mut grouped: Vec<(String, Vec<String>)> = Vec::new();
    let mut index = HashMap::new();
    for f in findings {
        let i = *index.entry(f.what.clone()).or_insert_with(|| {
            grouped.push((f.what.clone(), Vec::new()));
            grouped.len() - 1
        });
        if !grouped[i].1.contains(&f.who) {
            grouped[i].1.push(f.who);
        }
    }
    let lines: Vec<String> = grouped.iter().map(|(what, who)| format!("- {}: {what}", who.join("; "))).collect();
    assert!(lines.is_empty(), "{test}: {} problem(s):\n{}", lines.len(), lines.join("\n"));
}

/// Every HelmRelease installs a chart the test has a shared copy of, pinned to that version:
/// the OpenSandbox GitRepository at tag helm/opensandbox/0.2.2 (chart path
/// ./kubernetes/charts/opensandbox), the kata-deploy OCIRepository at tag 4.1.0, spire 0.30.x and
/// spire-crds 0.6.x from the SPIRE HelmRepository; and its values resolve (every non-optional
/// `valuesFrom` object is in the osbx render). An unpinned chart is reported here and rendered
/// anyway by the other tests, with the version the pinned chart ships.
#[test]
fn every_helm_release_maps_to_a_pinned_shared_chart() {
    let start = Instant::now();
    let mut findings = Vec::new();
    for r in cases::releases() {
        if let Err(why) = &r.chart {
            findings.push(r.finding(why));
        }
        findings.extend(r.caveats.iter().map(|c| r.finding(c)));
        if let Err(why) = &r.values {
            findings.push(r.finding(&format!("values do not resolve: {why}")));
        }
    }
    assert!(cases::releases().len() >= cases::subjects().len(), "fewer HelmReleases than profiles");
    conclude("every_helm_release_maps_to_a_pinned_shared_chart", start, findings);
}

/// `helm template` of every release (with `--include-crds` and `--kube-version` of the test API
/// server) exits 0 and prints nothing on stderr beyond what the chart prints whatever its values
/// (see [`checks::CHART_OWN_WARNINGS`], itself checked): no error, no warning of osbx's values.
#[test]
fn charts_render_without_errors_or_warnings() {
    let start = Instant::now();
    let (baselines, mut findings) = baselines_of(&[]);
    for b in &baselines {
        let stderr = checks::without_chart_own_warnings(b.chart, &b.run.stderr);
        if !stderr.trim().is_empty() {
            findings.push(b.release.finding(&checks::warnings(b.chart, &stderr)));
        }
    }
    findings.extend(checks::chart_own_warnings_hold());
    conclude("charts_render_without_errors_or_warnings", start, findings);
}

/// Every object the charts render is accepted by a real API server: the charts' CRDs are
/// installed for real and Established, the namespaces created, and every other object passes a
/// server-side dry-run apply (field manager `osbx-chart-test`), on a plane of this test's own.
#[tokio::test]
async fn every_chart_object_passes_a_server_side_dry_run() {
    let start = Instant::now();
    let (baselines, mut findings) = tokio::task::spawn_blocking(|| baselines_of(&[])).await.expect("render the charts");
    findings.extend(dryrun::check(&baselines).await);
    conclude("every_chart_object_passes_a_server_side_dry_run", start, findings);
}

/// Every value osbx sets (each leaf of the merged values) is read by the chart: changing it
/// (string + `-osbx-probe`, integer + 1, bool flipped) changes `helm template`'s output. A key
/// whose change renders byte-identical output is dead configuration.
#[test]
fn every_value_osbx_sets_is_read_by_the_chart() {
    let start = Instant::now();
    let (baselines, mut findings) = baselines_of(&[]);
    findings.extend(checks::dead_keys(&baselines));
    conclude("every_value_osbx_sets_is_read_by_the_chart", start, findings);
}

/// The server's `config.toml` as the OpenSandbox chart assembles it (ConfigMap
/// `opensandbox-server-config`: the profile's configToml plus the chart's `[ingress]` table)
/// loads with the real server's config loader (PyPI `opensandbox-server` 0.2.2, the version the
/// 0.2.2 chart deploys) and has no key its config model does not know.
#[test]
fn server_config_toml_loads_in_the_real_server_without_unknown_keys() {
    let start = Instant::now();
    let (baselines, mut findings) = baselines_of(&[chart::OPENSANDBOX]);
    for b in baselines.iter().filter(|b| b.chart == chart::OPENSANDBOX) {
        let text = match server_config::config_toml(b) {
            Ok(text) => text,
            Err(why) => {
                findings.push(b.release.finding(&format!("chart {}: {why}", b.chart)));
                continue;
            }
        };
        findings.extend(checks::config_problems(b, text).into_iter().map(|w| b.release.finding(&w)));
    }
    conclude("server_config_toml_loads_in_the_real_server_without_unknown_keys", start, findings);
}

/// The API key reaches the server as the profile says: with `apiKey.secretRef`, the server
/// container's `OPENSANDBOX_SERVER_API_KEY` comes from exactly that Secret name and key; with
/// `apiKey.inline`, the real server reads that key as `[server].api_key` of the chart's
/// config.toml and no `OPENSANDBOX_SERVER_API_KEY` env overrides it.
#[test]
fn server_api_key_comes_from_the_profile_secret_or_inline_config() {
    let start = Instant::now();
    let (baselines, mut findings) = baselines_of(&[chart::OPENSANDBOX]);
    for b in baselines.iter().filter(|b| b.chart == chart::OPENSANDBOX) {
        findings.extend(checks::api_key_problems(b).into_iter().map(|w| b.release.finding(&w)));
    }
    conclude("server_api_key_comes_from_the_profile_secret_or_inline_config", start, findings);
}

/// kata-deploy creates exactly the RuntimeClasses the profile's Kata pools name
/// (`pools.kata_classes()`: pools with `runtime: kata`, default class `kata-clh-runtime-rs`).
#[test]
fn kata_deploy_creates_exactly_the_runtime_classes_of_the_kata_pools() {
    let start = Instant::now();
    let (baselines, mut findings) = baselines_of(&[chart::KATA]);
    for b in baselines.iter().filter(|b| b.chart == chart::KATA) {
        if let Some(what) = checks::runtime_class_mismatch(b) {
            findings.push(b.release.finding(&what));
        }
    }
    conclude("kata_deploy_creates_exactly_the_runtime_classes_of_the_kata_pools", start, findings);
}

/// kata-deploy gives block-backed emptyDirs (`[runtime] emptydir_mode = "block-plain"`, in the
/// drop-in its installer puts into the handler's `config.d`) to the build pools' classes only:
/// every Kata pool class of a build pool gets it (unless the pool names a shim's own class by
/// hand, which lint warns about), no other class does. At least the variants with build pools
/// on a rendered kata layer (fresh-cluster's "pools and classes": one on the default shim, one
/// on qemu) must have taken that path, so the test cannot pass by checking nothing.
#[test]
fn kata_deploy_gives_block_backed_empty_dirs_to_the_build_pools_classes_only() {
    let start = Instant::now();
    let (baselines, mut findings) = baselines_of(&[chart::KATA]);
    let mut through = Vec::new();
    for b in baselines.iter().filter(|b| b.chart == chart::KATA) {
        let (problems, block) = checks::block_storage_problems(b);
        findings.extend(problems.into_iter().map(|w| b.release.finding(&w)));
        if block > 0 {
            through.push((b.release.subject().label.clone(), block));
        }
    }
    conclude("kata_deploy_gives_block_backed_empty_dirs_to_the_build_pools_classes_only", start, findings);
    let pools = "variant \"pools and classes\" of profile fresh-cluster".to_owned();
    assert!(through.contains(&(pools, 2)), "the build classes did not reach kata-deploy's drop-ins: {through:?}");
}

/// kata-deploy, with the values osbx renders, lets no pod set a hypervisor annotation its pool is
/// not allowed (issue 52, item 4): every RuntimeClass's handler gets a drop-in whose
/// `[hypervisor.<table>]` sets `enable_annotations` to exactly what the profile allows the pools
/// on it (nothing, in every shipped profile), and the installer is told no
/// `ALLOWED_HYPERVISOR_ANNOTATIONS`. fresh-cluster's "pools and classes" variant must have taken
/// the path for both its shims' classes and build classes, so the test cannot pass by checking
/// nothing.
#[test]
fn kata_deploy_enables_no_hypervisor_annotation_a_pool_is_not_allowed() {
    let start = Instant::now();
    let (baselines, mut findings) = baselines_of(&[chart::KATA]);
    let mut through = Vec::new();
    for b in baselines.iter().filter(|b| b.chart == chart::KATA) {
        let subject = b.release.subject();
        let (problems, checked) = checks::hypervisor_annotation_problems(&b.objects, &subject.profile, b.chart);
        findings.extend(problems.into_iter().map(|w| b.release.finding(&w)));
        through.push((subject.label.clone(), checked));
    }
    conclude("kata_deploy_enables_no_hypervisor_annotation_a_pool_is_not_allowed", start, findings);
    let pools = "variant \"pools and classes\" of profile fresh-cluster";
    let checked: Vec<(String, String)> =
        through.iter().find(|(label, _)| label == pools).map(|(_, c)| c.clone()).unwrap_or_default();
    for (class, table) in [
        ("kata-clh-runtime-rs", "clh"),
        ("kata-clh-runtime-rs-build", "clh"),
        ("kata-qemu", "qemu"),
        ("kata-qemu-build", "qemu"),
    ] {
        assert!(
            checked.contains(&(class.to_owned(), table.to_owned())),
            "{pools}: {class} ([hypervisor.{table}]) was not checked: {checked:?}"
        );
    }
}

/// The same through the real kata-deploy 4.1.0 chart for every shim it knows (one render with all
/// of them enabled: every hypervisor table, `clh`, `qemu`, `dragonball`, `firecracker`, `openvmm`,
/// `remote`), with a build pool on every shim osbx has facts on, and pools allowed named
/// annotations (on a shim's class and on a build class): their classes enable exactly those
/// names and no other class does.
#[test]
fn kata_deploy_closes_hypervisor_annotations_for_every_shim_it_knows() {
    let start = Instant::now();
    let (_, mut document) =
        cases::shipped_documents().into_iter().find(|(n, _)| n == "fresh-cluster").expect("fresh-cluster");
    let shims: Vec<&str> = osbx::components::kata::known_shims("4.1.0").expect("4.1.0").to_vec();
    let capacity = serde_json::json!({"bufferMin": 0, "bufferMax": 1, "poolMin": 0, "poolMax": 1});
    let memory = "io.katacontainers.config.hypervisor.default_memory";
    let vcpus = "io.katacontainers.config.hypervisor.default_vcpus";
    let mut items = vec![
        serde_json::json!({"name": "vm", "runtime": "kata", "capacity": capacity,
                           "kata": {"allowedAnnotations": [memory]}}),
        serde_json::json!({"name": "vm-qemu-build", "runtime": "kata", "builds": true, "capacity": capacity,
                           "runtimeClassName": "kata-qemu-build", "kata": {"allowedAnnotations": [vcpus, memory]}}),
    ];
    for shim in shims.iter().filter(|s| **s != "qemu") {
        items.push(serde_json::json!({"name": format!("b-{shim}"), "runtime": "kata", "builds": true,
            "capacity": capacity, "runtimeClassName": osbx::components::kata::build_runtime_class(shim)}));
    }
    document["kata"]["shims"] = serde_json::json!(shims);
    document["pools"]["items"] = serde_json::json!(items);
    let label = "fresh-cluster with every kata-deploy 4.1.0 shim";
    let loaded = osbx::profile::from_value(label, &document).unwrap_or_else(|e| panic!("{label}: {e}"));
    let renderer = osbx::commands::renderer(None).expect("templates");
    let rendered = renderer.render(&loaded).unwrap_or_else(|e| panic!("{label}: render: {e}"));
    let objects: Vec<serde_json::Value> = rendered.objects().into_iter().map(|o| o.object.value).collect();
    let hr = objects
        .iter()
        .find(|o| o["kind"] == "HelmRelease" && o["metadata"]["name"] == "kata-deploy")
        .expect("the kata-deploy HelmRelease");
    let values_of = values::resolve(hr, &objects).expect("its values");
    let ns = hr["metadata"]["namespace"].as_str().expect("namespace");
    let run = helm::template(&helm::Job::new(chart::KATA, "kata-deploy", ns, &values_of));
    assert!(run.ok, "helm template of kata-deploy 4.1.0 failed: {}", run.stderr);
    let chart_objects = manifest::objects(&run).expect("helm's output");
    let (problems, checked) = checks::hypervisor_annotation_problems(&chart_objects, &loaded.profile, chart::KATA);
    eprintln!(
        "charts::kata_deploy_closes_hypervisor_annotations_for_every_shim_it_knows: {:.1} s",
        start.elapsed().as_secs_f64()
    );
    assert!(problems.is_empty(), "{label}:\n{}", problems.join("\n"));
    let tables: std::collections::BTreeSet<&str> = checked.iter().map(|(_, t)| t.as_str()).collect();
    let classes: std::collections::BTreeSet<&str> = checked.iter().map(|(c, _)| c.as_str()).collect();
    for shim in &shims {
        let class = osbx::components::kata::runtime_class(shim);
        assert!(classes.contains(class.as_str()), "{label}: {class} was not checked: {checked:?}");
    }
    for table in ["clh", "qemu", "dragonball", "firecracker", "openvmm", "remote"] {
        assert!(tables.contains(table), "{label}: no class on [hypervisor.{table}] was checked: {tables:?}");
    }
    // The allowed names reached exactly their classes (the check above compares every class
    // with the profile; here: the profile did allow something, so that comparison was not
    // trivially empty).
    let allowed = loaded.profile.sections.pools.kata_demands().allowed_on("kata-qemu-build");
    assert_eq!(allowed.len(), 2, "{allowed:?}");
}

/// Every ConfigMap, Secret and projected source the SPIRE agent DaemonSet mounts is created by a
/// chart render of the profile, by the osbx render, or is a ConfigMap the profile names as
/// operator-provided ([`checks::operator_provided_config_maps`]); otherwise the agent pods never
/// start.
#[test]
fn spire_agent_volumes_come_from_the_renders_or_the_profile() {
    let start = Instant::now();
    let (baselines, mut findings) = baselines_of(&[chart::SPIRE]);
    for b in baselines.iter().filter(|b| b.chart == chart::SPIRE) {
        let siblings: Vec<_> = baselines.iter().filter(|o| o.release.subject == b.release.subject).collect();
        findings.extend(checks::agent_volume_problems(b, &siblings).into_iter().map(|w| b.release.finding(&w)));
    }
    conclude("spire_agent_volumes_come_from_the_renders_or_the_profile", start, findings);
}

/// Every namespaced object a chart renders lands in the namespace the profile gives that chart
/// (the control-plane namespace for OpenSandbox, `kata.namespace`, `spire.namespace`), which osbx
/// renders as a Namespace; every ServiceAccount a workload runs as or a binding binds is rendered
/// there; and every Deployment, DaemonSet, Service and ServiceAccount `osbx verify` reads by name
/// (what `osbx rbac --for verify` grants) is rendered under that name and namespace: for the
/// shipped profiles, the fleet members and every generated variant.
#[test]
fn every_chart_object_lands_where_the_profile_says() {
    let start = Instant::now();
    let (baselines, mut findings) = baselines_of(&[]);
    for b in &baselines {
        let problems = placement::namespace_problems(b).into_iter().chain(placement::service_account_problems(b));
        findings.extend(problems.map(|w| b.release.finding(&w)));
    }
    for (i, subject) in cases::subjects().iter().enumerate() {
        let own: Vec<&manifest::Baseline> = baselines.iter().filter(|b| b.release.subject == i).collect();
        let problems = placement::lookup_problems(subject, &own);
        findings.extend(problems.into_iter().map(|w| Finding::new(subject.label.clone(), w)));
    }
    conclude("every_chart_object_lands_where_the_profile_says", start, findings);
}

/// The generated variants are exactly the listed ones: each edit on each shipped profile it
/// applies to, and all of them at once ("components on" only where the profile has no kata
/// layer), 30 in all; a variant that silently stopped being generated would check nothing. The
/// renamed variant of the profile that renders SPIRE moves the SPIRE namespaces too (the
/// agents' and the smoke fixture's), so the SPIRE chart is rendered into a renamed namespace.
#[test]
fn the_generated_variants_are_the_listed_ones() {
    let every = [
        "renamed namespaces",
        "other names",
        "release namespaces",
        "pools and classes",
        "components off",
        "components on",
        "extra values",
        "mirror",
        "all at once",
    ];
    let without_on: Vec<&str> = every.iter().copied().filter(|e| *e != "components on").collect();
    let shipped: [(&str, &[&str]); 4] =
        [("default", &every), ("fresh-cluster", &without_on), ("homelab", &without_on), ("runc-only", &every)];
    let mut expected: Vec<String> = shipped
        .iter()
        .flat_map(|(p, edits)| edits.iter().map(move |e| format!("variant \"{e}\" of profile {p}")))
        .collect();
    let mut actual: Vec<String> =
        cases::subjects().iter().filter(|s| s.origin == cases::Origin::Variant).map(|s| s.label.clone()).collect();
    expected.sort();
    actual.sort();
    assert_eq!(actual, expected);
    assert_eq!(actual.len(), 34);

    let renamed = cases::subjects()
        .iter()
        .find(|s| s.label == "variant \"renamed namespaces\" of profile fresh-cluster")
        .expect("the renamed fresh-cluster variant");
    let namespaces: Vec<&str> = renamed
        .objects
        .iter()
        .filter(|o| o["kind"] == "Namespace")
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    for ns in ["sbx-system", "sbx", "kata-runtime", "spiffe-agents", "spiffe-smoke"] {
        assert!(namespaces.contains(&ns), "{ns} not among the rendered Namespaces {namespaces:?}");
    }
    let spire = renamed
        .objects
        .iter()
        .filter(|o| {
            o["kind"] == "HelmRelease"
                && o["spec"]["chart"]["spec"]["chart"].as_str().is_some_and(|c| c.starts_with("spire"))
        })
        .map(|o| o["spec"]["targetNamespace"].as_str().or(o["metadata"]["namespace"].as_str()).unwrap_or_default())
        .collect::<Vec<_>>();
    assert!(!spire.is_empty() && spire.iter().all(|ns| *ns == "spiffe-agents"), "SPIRE releases into {spire:?}");
}

/// A variant no chart can honour (`opensandbox.values` or `spire.values` moving the control
/// plane or the agents away from where osbx looks, renaming the server, replacing its
/// config.toml) is refused by `osbx lint` (exit 1) at the field, with its line and column.
#[test]
fn variants_no_chart_can_honour_are_refused_by_lint_at_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let mut problems = Vec::new();
    for (i, (label, document, field)) in variants::refused().into_iter().enumerate() {
        let path = dir.path().join(format!("refused-{i}.yaml"));
        std::fs::write(&path, serde_saphyr::to_string(&document).unwrap()).unwrap();
        let out = crate::support::osbx().args(["lint", "-o", "json", "--profile"]).arg(&path).output().unwrap();
        let (stdout, stderr) = crate::support::outputs(&out);
        let report: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_default();
        let located = report["findings"].as_array().into_iter().flatten().any(|f| {
            f["field"] == field.as_str()
                && f["severity"] == "error"
                && f["line"].as_u64().is_some_and(|l| l > 0)
                && f["column"].as_u64().is_some_and(|c| c > 0)
        });
        if out.status.code() != Some(1) || !located {
            problems.push(format!(
                "{label}: osbx lint exits {:?} without an error located at `{field}`:\n{stdout}{stderr}",
                out.status.code()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The value of the first env entry `name` anywhere in `v`.
fn env(v: &serde_json::Value, name: &str) -> Option<String> {
    match v {
        serde_json::Value::Object(m) if m.get("name").and_then(|n| n.as_str()) == Some(name) => {
            m.get("value").and_then(|x| x.as_str()).map(str::to_owned)
        }
        serde_json::Value::Object(m) => m.values().find_map(|x| env(x, name)),
        serde_json::Value::Array(a) => a.iter().find_map(|x| env(x, name)),
        _ => None,
    }
}

/// Class → (shim, drop-in text), as [`kata_deploy_install`] reads them.
pub(crate) type KataDropIns = BTreeMap<String, (String, Option<String>)>;

/// What the real kata-deploy 4.1.0 chart, given the values osbx renders for the profile document
/// `document`, tells its installer for each RuntimeClass: class → (the shim whose configuration
/// the handler runs, the drop-in text the installer copies into its `config.d`, if any), and the
/// installer's `ALLOWED_HYPERVISOR_ANNOTATIONS_X86_64` (what it appends to every enabled shim's
/// base `enable_annotations`), if set. For tests that prepare a node as kata-deploy leaves it.
pub(crate) fn kata_deploy_install(document: &serde_json::Value) -> (KataDropIns, Option<String>) {
    let label = "a kata tier profile";
    let loaded = osbx::profile::from_value(label, document).unwrap_or_else(|e| panic!("{label}: {e}"));
    let renderer = osbx::commands::renderer(None).expect("templates");
    let rendered = renderer.render(&loaded).unwrap_or_else(|e| panic!("{label}: render: {e}"));
    let objects: Vec<serde_json::Value> = rendered.objects().into_iter().map(|o| o.object.value).collect();
    let hr = objects
        .iter()
        .find(|o| o["kind"] == "HelmRelease" && o["metadata"]["name"] == "kata-deploy")
        .expect("the kata-deploy HelmRelease");
    let values_of = values::resolve(hr, &objects).expect("its values");
    let ns = hr["metadata"]["namespace"].as_str().expect("namespace");
    let run = helm::template(&helm::Job::new(chart::KATA, "kata-deploy", ns, &values_of));
    assert!(run.ok, "helm template of kata-deploy 4.1.0 failed: {}", run.stderr);
    let chart_objects = manifest::objects(&run).expect("helm's output");
    let shims = loaded.profile.sections.kata.as_ref().map(|k| k.shims.clone()).unwrap_or_default();
    let drop_ins = checks::drop_ins(&chart_objects, &shims).unwrap_or_else(|e| panic!("{label}: {e}"));
    let allowed = chart_objects.iter().find_map(|o| env(o, "ALLOWED_HYPERVISOR_ANNOTATIONS_X86_64"));
    (drop_ins.into_iter().map(|(class, d)| (class, (d.shim, d.text))).collect(), allowed)
}
