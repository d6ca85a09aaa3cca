//! Every profile validation rule: the message, the field and the `file:line:column` it points at.

use osbx::profile::{self, ProfileError};

use crate::support::{osbx, outputs, shared};

/// A small valid profile; the tests below change one thing at a time.
const BASE: &str = "\
apiVersion: osbx.dev/v1alpha1
kind: Profile
metadata:
  name: test
cluster:
  name: test
layers:
  - name: kata
    external: true
  - name: opensandbox
    component: opensandbox
    interval: 10m
    dependsOn: [kata]
  - name: pools
    component: pools
    dependsOn: [opensandbox]
opensandbox:
  source:
    url: https://github.com/opensandbox-group/OpenSandbox.git
    ref: {tag: helm/opensandbox/0.2.2}
  server:
    apiKey: {secretRef: {name: api-key}}
    config:
      runtime: {execdImage: example.com/execd:v1}
pools:
  items:
    - name: pod
      runtime: runc
      image: example.com/sandbox:v1
      capacity: {bufferMin: 0, bufferMax: 1, poolMin: 0, poolMax: 4}
    - name: vm
      runtime: kata
      image: example.com/sandbox:v1
      capacity: {bufferMin: 1, bufferMax: 2, poolMin: 0, poolMax: 2}
";

fn with(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "{from:?} not in BASE");
    BASE.replacen(from, to, 1)
}

/// Load `text` and return its single diagnostic as `line:col: field: message`.
#[track_caller]
fn error_of(text: &str) -> String {
    let err = profile::parse("p.yaml", text.to_owned()).expect_err("profile should be rejected");
    let ProfileError::Invalid(diags) = &err else { panic!("unexpected error: {err}") };
    assert_eq!(diags.len(), 1, "expected one diagnostic, got {diags:#?}");
    let text = diags[0].to_string();
    text.strip_prefix("p.yaml:").unwrap_or(&text).to_owned()
}

#[test]
fn base_profile_is_valid() {
    let loaded = profile::parse("p.yaml", BASE.to_owned()).unwrap();
    let pools = loaded.profile.sections.pools.effective();
    assert_eq!(pools[1].runtime_class_name.as_deref(), Some("kata-clh-runtime-rs"), "kata default runtime class");
    assert_eq!(pools[0].runtime_class_name, None);
}

#[test]
fn unknown_field() {
    let e = error_of(&with("      runtime: runc\n", "      runtime: runc\n      replicas: 3\n"));
    assert!(e.starts_with("29:7: pools.items[0].replicas: unknown field `replicas`"), "{e}");
}

#[test]
fn wrong_type() {
    let e = error_of(&with("bufferMax: 1,", "bufferMax: lots,"));
    assert_eq!(e, "30:43: pools.items[0].capacity.bufferMax: expected an integer, found \"lots\"");
}

#[test]
fn missing_required_field() {
    let e = error_of(&with("      runtime: runc\n", ""));
    assert!(e.starts_with("29:7: pools.items[0].runtime: missing field `runtime`"), "{e}");
}

#[test]
fn duplicate_pool_names() {
    assert_eq!(error_of(&with("- name: vm", "- name: pod")), "31:7: pools.items[1].name: duplicate pool name \"pod\"");
}

#[test]
fn names_must_be_dns_labels() {
    assert_eq!(
        error_of(&with("- name: vm", "- name: CI_VM")),
        "31:7: pools.items[1].name: \"CI_VM\" is not a valid name: use only lower-case letters, digits and '-' (DNS-1123 label)"
    );
    assert_eq!(
        error_of(&with("  name: test\nlayers", "  name: -test\nlayers")),
        "6:3: cluster.name: \"-test\" is not a valid name: must start and end with a letter or digit (DNS-1123 label)"
    );
}

#[test]
fn bad_duration() {
    assert_eq!(
        error_of(&with("interval: 10m", "interval: 10 minutes")),
        "12:5: layers[1].interval: \"10 minutes\" is not a valid duration: use a number followed by ms, s, m, h (e.g. 10m, 1h30m)"
    );
}

#[test]
fn negative_capacity_is_named() {
    let text = with("bufferMin: 0, bufferMax: 1, poolMin: 0", "bufferMin: 0, bufferMax: 1, poolMin: -2");
    let err = profile::parse("p.yaml", text).unwrap_err();
    let lines: Vec<String> = err.diagnostics().iter().map(ToString::to_string).collect();
    assert_eq!(lines, ["p.yaml:30:46: pools.items[0].capacity.poolMin: must not be negative (got -2)"]);
}

#[test]
fn buffer_min_above_buffer_max() {
    assert_eq!(
        error_of(&with("bufferMin: 1, bufferMax: 2", "bufferMin: 3, bufferMax: 2")),
        "34:18: pools.items[1].capacity.bufferMin: bufferMin (3) is greater than bufferMax (2)"
    );
}

#[test]
fn pool_min_above_pool_max() {
    let text = with("poolMin: 0, poolMax: 2", "poolMin: 2, poolMax: 1");
    let err = profile::parse("p.yaml", text).unwrap_err();
    let lines: Vec<String> = err.diagnostics().iter().map(ToString::to_string).collect();
    assert!(
        lines.contains(
            &"p.yaml:34:46: pools.items[1].capacity.poolMin: poolMin (2) is greater than poolMax (1)".to_owned()
        ),
        "{lines:#?}"
    );
    assert!(
        lines.contains(
            &"p.yaml:34:32: pools.items[1].capacity.bufferMax: bufferMax (2) is greater than poolMax (1)".to_owned()
        ),
        "{lines:#?}"
    );
}

#[test]
fn buffer_max_above_pool_max() {
    assert_eq!(
        error_of(&with("bufferMax: 1, poolMin: 0, poolMax: 4", "bufferMax: 5, poolMin: 0, poolMax: 4")),
        "30:32: pools.items[0].capacity.bufferMax: bufferMax (5) is greater than poolMax (4)"
    );
}

#[test]
fn kata_pool_without_runtime_class() {
    assert_eq!(
        error_of(&with("      runtime: kata\n", "      runtime: kata\n      runtimeClassName: \"\"\n")),
        "33:7: pools.items[1].runtimeClassName: a kata pool needs a runtime class (omit the field for kata-clh-runtime-rs)"
    );
}

/// `builds` marks a Kata pool as running container builds: on a runc pool it means nothing and
/// is refused at the field.
#[test]
fn only_kata_pools_run_builds() {
    assert_eq!(
        error_of(&with(
            "      runtime: runc
",
            "      runtime: runc
      builds: true
"
        )),
        "29:7: pools.items[0].builds: only kata pools take `builds` (a runc pool's emptyDirs are on the node's disk already); remove it or set `runtime: kata`"
    );
    let builds_on_kata = with(
        "      runtime: kata
",
        "      runtime: kata
      builds: true
",
    );
    profile::parse("p.yaml", builds_on_kata).expect("a Kata build pool is valid");
}

#[test]
fn depends_on_unknown_layer() {
    assert_eq!(
        error_of(&with("dependsOn: [kata]", "dependsOn: [spire-agents]")),
        "13:17: layers[1].dependsOn[0]: unknown layer \"spire-agents\": declare it under layers (use `external: true` for a layer osbx does not render)"
    );
}

#[test]
fn layer_path_outside_the_repository() {
    assert_eq!(
        error_of(&with("    component: pools\n", "    component: pools\n    path: ../elsewhere\n")),
        "16:5: layers[2].path: \"../elsewhere\" leaves the repository (contains '..')"
    );
    assert_eq!(
        error_of(&with("    component: pools\n", "    component: pools\n    path: /etc/flux\n")),
        "16:5: layers[2].path: \"/etc/flux\" must be a relative path inside the repository"
    );
}

#[test]
fn depends_on_cycle() {
    let e = error_of(
        &with("  - name: kata\n    external: true\n", "  - name: kata\n    component: pools\n    dependsOn: [pools]\n")
            .replace("    component: pools\n    dependsOn: [opensandbox]", "    external: true\n    dependsOn: [kata]"),
    );
    assert!(e.contains("dependsOn cycle"), "{e}");
}

#[test]
fn wrong_api_version() {
    assert_eq!(
        error_of(&with("osbx.dev/v1alpha1", "osbx.dev/v9")),
        "1:1: apiVersion: unsupported apiVersion \"osbx.dev/v9\": expected \"osbx.dev/v1alpha1\""
    );
}

#[test]
fn yaml_syntax_error_has_a_location() {
    let e = error_of(&with("  name: test\nlayers", "  name: [test\nlayers"));
    assert!(e.starts_with(|c: char| c.is_ascii_digit()), "{e}");
}

/// BASE with a rendered kata layer.
fn with_kata(kata: &str) -> String {
    with("  - name: kata\n    external: true\n", "  - name: kata\n    component: kata\n") + kata
}

#[test]
fn kata_default_shim_must_be_enabled() {
    let e = error_of(&with_kata("kata:\n  shims: [clh-runtime-rs]\n  defaultShim: qemu-runtime-rs\n"));
    assert!(
        e.starts_with("37:3: kata.defaultShim: \"qemu-runtime-rs\" is not among the enabled shims [clh-runtime-rs]"),
        "{e}"
    );
}

#[test]
fn kata_pools_need_a_runtime_class_the_kata_layer_installs() {
    let text = with_kata("kata:\n  shims: [qemu-runtime-rs]\n  defaultShim: qemu-runtime-rs\n");
    assert_eq!(
        error_of(&text),
        "31:7: pools.items[1].runtimeClassName: RuntimeClass kata-clh-runtime-rs is not installed by the kata layer (it installs kata-qemu-runtime-rs)"
    );
}

/// A build pool without a class gets the build class of the default shim, which the kata layer
/// installs; one naming a build class of a shim the layer does not enable is refused, and so is
/// a kata-deploy older than 4.0 (Kata 3.x refuses `emptydir_mode = "block-plain"`).
#[test]
fn build_pools_need_a_build_class_the_kata_layer_installs_and_kata_4() {
    let build = |kata: &str, class: &str| {
        with_kata(kata).replacen(
            "      runtime: kata\n",
            &format!("      runtime: kata\n      builds: true\n{class}"),
            1,
        )
    };
    let kata = "kata:\n  shims: [clh-runtime-rs]\n";
    let p = profile::parse("p.yaml", build(kata, "")).expect("the default build class is installed");
    assert_eq!(p.profile.sections.pools.build_classes(), ["kata-clh-runtime-rs-build"]);
    assert_eq!(
        error_of(&build(kata, "      runtimeClassName: kata-qemu-build\n")),
        "34:7: pools.items[1].runtimeClassName: RuntimeClass kata-qemu-build is not installed by the kata layer (it installs kata-clh-runtime-rs; for a build pool, the build class of an enabled shim: kata-clh-runtime-rs-build)"
    );
    let both = "kata:\n  shims: [clh-runtime-rs, qemu]\n";
    profile::parse("p.yaml", build(both, "      runtimeClassName: kata-qemu-build\n")).expect("qemu's build class");
    assert_eq!(
        error_of(&build("kata:\n  chart: {version: 3.32.0}\n  shims: [clh-runtime-rs]\n", "")),
        "37:11: kata.chart.version: the build pools need emptydir_mode = \"block-plain\", which Kata 3.x does not know (it refuses the configuration): pin kata-deploy 4.0 or later"
    );
    profile::parse("p.yaml", with_kata("kata:\n  chart: {version: 3.32.0}\n  shims: [clh-runtime-rs]\n"))
        .expect("without build pools, an older kata-deploy is no concern of this rule");
}

#[test]
fn a_rendered_layer_needs_its_section() {
    assert_eq!(error_of(&with_kata("")), "9:5: layers[0].component: a kata layer needs a top-level `kata` section");
    let spire = with("  - name: kata\n    external: true\n", "  - name: kata\n    component: spire-smoke\n");
    assert_eq!(error_of(&spire), "9:5: layers[0].component: a SPIRE layer needs a top-level `spire` section");
}

#[test]
fn spire_trust_domain_has_no_scheme() {
    let text = with("  - name: kata\n    external: true\n", "  - name: kata\n    component: spire-agents\n")
        + "spire:\n  trustDomain: spiffe://example.org\n  server: {address: spire.example.org}\n  className: c\n";
    assert!(error_of(&text).contains("spire.trustDomain: \"spiffe://example.org\" is not a trust domain"));
}

#[test]
fn a_kata_shim_the_pinned_kata_deploy_does_not_know_is_refused_listing_the_ones_it_knows() {
    let text = with_kata("kata:\n  shims: [clh-runtme-rs]\n  defaultShim: clh-runtme-rs\n");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.yaml"), &text).unwrap();
    let out = osbx().args(["render", "--profile", "p.yaml", "--out", "repo"]).current_dir(dir.path()).output().unwrap();
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("p.yaml:36:11: kata.shims[0]: kata-deploy 4.1.0 has no shim \"clh-runtme-rs\": it would install no RuntimeClass for it (known: clh, clh-azure, clh-runtime-rs,"),
        "{stderr}"
    );
    assert!(!dir.path().join("repo").exists(), "nothing written");
}

/// osbx's table of the shims kata-deploy 4.1.0 knows is the chart's own (its values' `shims`).
#[test]
fn the_known_kata_shims_are_those_of_the_pinned_chart() {
    let values = std::fs::read_to_string(shared().join("charts/kata-deploy-4.1.0/kata-deploy/values.yaml")).unwrap();
    let values: serde_json::Value = serde_saphyr::from_str(&values).unwrap();
    let chart: Vec<&str> =
        values["shims"].as_object().unwrap().keys().map(String::as_str).filter(|k| *k != "disableAll").collect();
    assert_eq!(osbx::components::kata::known_shims("4.1.0").unwrap(), chart.as_slice());
}

/// SPIRE in BASE's place of the external kata layer, with `trust_bundle` as its trust bundle.
fn with_spire_agents(trust_bundle: &str) -> String {
    with("  - name: kata\n    external: true\n", "  - name: kata\n    component: spire-agents\n")
        + "spire:\n  trustDomain: example.org\n  server: {address: spire.example.org}\n  className: c\n"
        + trust_bundle
}

#[test]
fn a_trust_bundle_has_exactly_one_valid_source() {
    assert_eq!(
        error_of(&with_spire_agents("  trustBundle: {url: https://spire.example.org:8443, hostPath: /etc/b.pem}\n")),
        "39:3: spire.trustBundle: set exactly one of url (with format), hostPath and configMap"
    );
    assert_eq!(
        error_of(&with_spire_agents("  trustBundle: {url: spire.example.org/bundle}\n")),
        "39:17: spire.trustBundle.url: \"spire.example.org/bundle\" must start with https:// (or http://)"
    );
    assert_eq!(
        error_of(&with_spire_agents("  trustBundle: {hostPath: /etc/bundle.pem, format: pem}\n")),
        "39:44: spire.trustBundle.format: format describes a bundle at a url; a hostPath bundle is PEM"
    );
    assert!(
        error_of(&with_spire_agents("  trustBundle: {configMap: Spire_Bundle}\n"))
            .starts_with("39:17: spire.trustBundle.configMap: \"Spire_Bundle\" is not a valid name")
    );
    assert!(
        error_of(&with_spire_agents("  trustBundle: {url: https://x, format: jwks}\n")).contains("trustBundle.format")
    );
}

/// The homelab profile carries the reference runbook's SPIFFE smoke identity (its fixture is in
/// the external SPIRE layers), so `osbx verify` runs the SPIFFE checks instead of skipping them;
/// its rendered files are unchanged (the examples test holds them).
#[test]
fn homelab_verifies_the_reference_smoke_identity() {
    let loaded = osbx::profile::load(&osbx::profile::ProfileSource::Embedded("homelab".into())).unwrap();
    let smoke = loaded.profile.spiffe_smoke().expect("homelab has a smoke identity");
    assert_eq!(
        (
            smoke.namespace.as_str(),
            smoke.service_account.as_str(),
            smoke.id.as_str(),
            smoke.cluster_spiffe_id.as_deref()
        ),
        ("spire-smoke", "spire-smoke", "spiffe://ddupan.top/sandbox/smoke", Some("sandbox-spire-smoke"))
    );
}

/// The `sandbox-quota` component: its layer needs its section, the section names a limit, and a
/// compute quota needs container defaults (or the pools' resources), else every pod is refused.
#[test]
fn sandbox_quota_rules() {
    let layer = |section: &str| {
        with("  - name: kata\n    external: true\n", "  - name: kata\n    component: sandbox-quota\n")
            .replace("    dependsOn: [kata]\n", "")
            + section
    };
    assert_eq!(
        error_of(&layer("")),
        "9:5: layers[0].component: a sandbox-quota layer needs a top-level `sandboxQuota` section"
    );
    assert_eq!(
        error_of(&layer("sandboxQuota:\n  hard: {}\n")),
        "35:3: sandboxQuota.hard: name at least one limit (e.g. pods: 50, requests.cpu: \"20\")"
    );
    // A pool template without resources (the default one has them).
    let compute = error_of(
        &layer("sandboxQuota:\n  hard: {pods: 10, requests.cpu: \"4\"}\n")
            .replace("pools:\n  items:", "pools:\n  defaults: {command: [sleep]}\n  items:"),
    );
    assert!(compute.contains("sandboxQuota.containerDefaults: the quota names requests.cpu"), "{compute}");
    assert!(compute.contains("every sandbox pod would be refused"), "{compute}");
    let bad = error_of(&layer("sandboxQuota:\n  hard: {pods: lots}\n"));
    assert!(bad.contains("\"lots\" is not a Kubernetes quantity"), "{bad}");
    // Defaults (or the pools' own resources) make a compute quota valid.
    let ok =
        layer("sandboxQuota:\n  hard: {pods: 10, requests.cpu: \"4\"}\n  containerDefaults: {requests: {cpu: 100m}}\n");
    profile::parse("p.yaml", ok).unwrap();
}

/// The profile's chart fields become a HelmRelease's chart, a source's URL and reference, and the
/// paths a review fetches into: a name that is a path, an option or not of its kind is refused
/// at load, located (it lints clean before).
#[test]
fn chart_fields_are_names_not_paths() {
    let spire = |chart: &str| {
        with("  - name: kata\n    external: true\n", "  - name: kata\n    component: spire-agents\n")
            + "spire:\n  trustDomain: example.org\n  server: {address: spire.example.org}\n  className: c\n  chart:\n"
            + chart
    };
    assert_eq!(
        error_of(&spire("    name: ../../etc/x\n")),
        "40:5: spire.chart.name: \"../../etc/x\" is refused: a chart name is not a path: it may not hold '/' or '\\'"
    );
    assert!(error_of(&spire("    name: --untardir=/tmp\n")).starts_with("40:5: spire.chart.name: "));
    assert!(error_of(&spire("    version: ../1\n")).starts_with("40:5: spire.chart.version: \"../1\" is refused"));
    assert!(
        error_of(&spire("    repository: file:///etc\n"))
            .contains("spire.chart.repository: \"file:///etc\" is refused")
    );
    assert!(
        error_of(&with_kata("kata:\n  chart: {url: 'oci://ghcr.io/x/..', version: 4.1.0}\n"))
            .contains("kata.chart.url: \"oci://ghcr.io/x/..\" is refused")
    );
    assert!(
        error_of(&with_kata("kata:\n  chart: {version: ../../x}\n"))
            .contains("kata.chart.version: \"../../x\" is refused")
    );
    assert_eq!(
        error_of(&with("ref: {tag: helm/opensandbox/0.2.2}", "ref: {tag: ../../x}")),
        "20:11: opensandbox.source.ref.tag: \"../../x\" is refused: it is not a valid git reference name (git check-ref-format)"
    );
    let path = with("  server:\n", "  chart: {path: ../../../etc}\n  server:\n");
    let e = error_of(&path);
    assert!(e.starts_with("21:11: opensandbox.chart.path: \"../../../etc\" is refused: it may not hold '..'"), "{e}");
    let abs = with("  server:\n", "  chart: {path: /etc}\n  server:\n");
    assert!(error_of(&abs).contains("opensandbox.chart.path: \"/etc\" is refused: it is an absolute path"));
}

/// A pool image that is not an image reference (by the distribution grammar containerd and the
/// kubelet parse) is refused at load, located, whether on a pool or in the defaults; one that
/// is a reference (a registry with a port, a digest) loads.
#[test]
fn a_pool_image_that_is_not_an_image_reference_is_refused_at_load() {
    let e = error_of(&with("image: example.com/sandbox:v1\n", "image: \"evil.example/x:1 <img src=x> **bold**\"\n"));
    assert_eq!(
        e,
        "29:7: pools.items[0].image: \"evil.example/x:1 <img src=x> **bold**\" is not an image reference ([registry[:port]/]path[:tag][@digest]): tag \"1 <img src=x> **bold**\" is not 1 to 128 letters, digits, '_', '.' and '-' (starting with a letter, digit or '_')"
    );
    let e = error_of(&with("      image: example.com/sandbox:v1\n", "      image: example.com/Sandbox\n"));
    assert_eq!(
        e,
        "29:7: pools.items[0].image: \"example.com/Sandbox\" is not an image reference ([registry[:port]/]path[:tag][@digest]): path component \"Sandbox\" is not lower-case letters and digits joined by '.', '_', '__' or '-'"
    );
    let e = error_of(&with("pools:\n  items:\n", "pools:\n  defaults: {image: \"x y\"}\n  items:\n"));
    assert!(e.starts_with("26:14: pools.defaults.image: \"x y\" is not an image reference"), "{e}");
    let digest = format!("localhost:5000/sandbox:v1@sha256:{}", "0".repeat(64));
    profile::parse("p.yaml", with("image: example.com/sandbox:v1\n", &format!("image: {digest}\n"))).unwrap();
}
