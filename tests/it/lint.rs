//! `osbx lint`: each rule with its id, severity and location, the exit codes, and `render`
//! refusing errors while printing warnings.

use serde_json::Value;

use crate::support::{osbx, outputs, root, shared};

const BASE: &str = "\
apiVersion: osbx.dev/v1alpha1
kind: Profile
metadata: {name: lint}
cluster: {name: lint}
layers:
  - {name: opensandbox, component: opensandbox}
  - {name: pools, component: pools, dependsOn: [opensandbox]}
opensandbox:
  source: {url: https://github.com/opensandbox-group/OpenSandbox.git, ref: {tag: helm/opensandbox/0.2.2}}
  server:
    apiKey: {secretRef: {name: api-key}}
    config:
      runtime: {execdImage: example.com/execd:v1.0.22}
      kubernetes: {sandboxCreateTimeoutSeconds: 180}
pools:
  defaults: {image: example.com/sandbox:v1}
  items:
    - {name: pod, runtime: runc, capacity: {bufferMin: 1, bufferMax: 2, poolMin: 0, poolMax: 4}}
    - name: vm
      runtime: kata
      capacity: {bufferMin: 1, bufferMax: 2, poolMin: 0, poolMax: 4}
";

fn lint(text: &str, extra: &[&str]) -> (Option<i32>, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.yaml"), text).unwrap();
    let out = osbx()
        .current_dir(dir.path())
        .args(["lint", "--profile", "p.yaml", "-o", "json"])
        .args(extra)
        .output()
        .unwrap();
    let (stdout, stderr) = outputs(&out);
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}{stderr}"));
    (out.status.code(), v["findings"].as_array().unwrap().clone())
}

#[track_caller]
fn has(findings: &[Value], id: &str, severity: &str, at: &str) {
    let f = findings.iter().find(|f| f["id"] == id).unwrap_or_else(|| panic!("no {id} in {findings:#?}"));
    assert_eq!(f["severity"], severity, "{f}");
    assert_eq!(format!("{}:{}", f["line"], f["column"]), at, "{f}");
    assert!(!f["fix"].as_str().unwrap_or_default().is_empty(), "{f}");
}

#[test]
fn a_clean_profile_exits_0() {
    let (code, findings) = lint(BASE, &[]);
    assert_eq!((code, findings.len()), (Some(0), 0), "{findings:#?}");
}

#[test]
fn api_key_rules() {
    let (code, f) = lint(&BASE.replace("apiKey: {secretRef: {name: api-key}}", "apiKey: {inline: \"\"}"), &[]);
    assert_eq!(code, Some(0), "warnings only");
    has(&f, "api-key.empty", "warning", "11:14");
    let (code, f) = lint(&BASE.replace("apiKey: {secretRef: {name: api-key}}", "apiKey: {inline: s3cret}"), &[]);
    assert_eq!(code, Some(1));
    has(&f, "api-key.in-configmap", "error", "11:14");
    let text = serde_json::to_string(&f).unwrap();
    assert!(!text.contains("s3cret"), "the key itself is never printed");
}

#[test]
fn a_kata_pool_must_not_mount_the_host_spiffe_socket() {
    let text = BASE.replace(
        "      runtime: kata\n",
        "      runtime: kata\n      volumes: [{name: spiffe, csi: {driver: csi.spiffe.io, readOnly: true}}]\n",
    );
    let (code, f) = lint(&text, &[]);
    assert_eq!(code, Some(1));
    has(&f, "kata.host-socket", "error", "21:17");
}

#[test]
fn a_cold_kata_pool_under_a_short_timeout_is_a_warning() {
    let text = BASE.replace("      kubernetes: {sandboxCreateTimeoutSeconds: 180}\n", "").replace(
        "      runtime: kata\n      capacity: {bufferMin: 1",
        "      runtime: kata\n      capacity: {bufferMin: 0",
    );
    let (code, f) = lint(&text, &[]);
    assert_eq!(code, Some(0));
    has(&f, "kata.cold-start", "warning", "20:18");
}

#[test]
fn pool_fields_the_pinned_crd_drops() {
    let text = BASE.replace("helm/opensandbox/0.2.2", "helm/opensandbox/0.2.0").replace(
        "    - {name: pod, runtime: runc,",
        "    - {name: pod, runtime: runc, scaleStrategy: {maxUnavailable: 1},",
    );
    let (code, f) = lint(&text, &[]);
    assert_eq!(code, Some(1));
    has(&f, "pool.unknown-field", "error", "18:7");
    assert!(f[0]["message"].as_str().unwrap().contains("spec.scaleStrategy"), "{f:#?}");

    // Against a real CRD (../shared) with the strategy fields removed, as in the stale chart copy.
    let crd_text =
        std::fs::read_to_string(shared().join("crds/opensandbox/sandbox.opensandbox.io_pools.yaml")).unwrap();
    let mut crd: Value = serde_saphyr::from_str(&crd_text).unwrap();
    for v in crd["spec"]["versions"].as_array_mut().unwrap() {
        v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            .as_object_mut()
            .unwrap()
            .remove("scaleStrategy");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pools-crd.yaml");
    std::fs::write(&path, serde_json::to_string(&crd).unwrap()).unwrap();
    let text = BASE.replace(
        "    - {name: pod, runtime: runc,",
        "    - {name: pod, runtime: runc, scaleStrategy: {maxUnavailable: 1},",
    );
    let (code, f) = lint(&text, &["--pool-crd", path.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{f:#?}");
    has(&f, "pool.unknown-field", "error", "18:7");
    // The real, current CRD knows the field.
    let real = shared().join("crds/opensandbox/sandbox.opensandbox.io_pools.yaml");
    let (code, _) = lint(&text, &["--pool-crd", real.to_str().unwrap()]);
    assert_eq!(code, Some(0));
}

#[test]
fn unpinned_images_are_warnings() {
    let (code, f) = lint(&BASE.replace("image: example.com/sandbox:v1", "image: example.com/sandbox"), &[]);
    assert_eq!(code, Some(0));
    has(&f, "image.unpinned", "warning", "16:14");
}

#[test]
fn a_catch_all_identity_and_two_layers_writing_one_object_are_errors() {
    let spire = "spire:\n  trustDomain: example.org\n  server: {address: spire.example.org}\n  className: c\n  values: {spire-server: {enabled: true}}\n";
    let text = BASE.replace(
        "  - {name: pools, component: pools, dependsOn: [opensandbox]}\n",
        "  - {name: pools, component: pools, dependsOn: [opensandbox]}\n  - {name: spire-agents, component: spire-agents}\n  - {name: spire-smoke, component: spire-smoke}\n",
    ) + spire;
    let (code, f) = lint(&text, &[]);
    assert_eq!(code, Some(1));
    has(&f, "spire.catch-all", "error", "28:3");

    // The smoke namespace collides with the control-plane namespace: two layers write it.
    let text = text.replace("values: {spire-server: {enabled: true}}\n", "smoke: {namespace: opensandbox-system}\n");
    let (_, f) = lint(&text, &[]);
    let dup = f.iter().find(|x| x["id"] == "layers.duplicate-object").expect("duplicate");
    assert!(
        dup["message"]
            .as_str()
            .unwrap()
            .contains("Namespace/opensandbox-system is written by layers opensandbox and spire-smoke"),
        "{dup}"
    );
}

#[test]
fn an_invalid_profile_is_exit_1_and_an_unreadable_one_exit_2() {
    let (code, f) = lint(&BASE.replace("poolMax: 4}}\n    - name: vm", "poolMax: -4}}\n    - name: vm"), &[]);
    assert_eq!(code, Some(1));
    has(&f, "profile.invalid", "error", "18:85");
    let out = osbx().args(["lint", "--profile", "/nonexistent/p.yaml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn render_refuses_lint_errors_and_prints_warnings() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("p.yaml"),
        BASE.replace("apiKey: {secretRef: {name: api-key}}", "apiKey: {inline: s3cret}"),
    )
    .unwrap();
    let out = osbx().current_dir(dir.path()).args(["render", "--profile", "p.yaml", "--out", "repo"]).output().unwrap();
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("lint found errors; nothing written") && stderr.contains("api-key.in-configmap"),
        "{stderr}"
    );
    assert!(!dir.path().join("repo").exists());
    let out = osbx()
        .args(["render", "--profile"])
        .arg(root().join("profiles/homelab.yaml"))
        .arg("--out")
        .arg(dir.path().join("h"))
        .output()
        .unwrap();
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("warning[api-key.empty]") && stderr.contains("warning[kata.cold-start]"), "{stderr}");
}

/// BASE with a rendered spire-agents layer joined to an external server.
fn with_spire_agents(extra: &str) -> String {
    BASE.replace("  - {name: pools, component: pools, dependsOn: [opensandbox]}\n", "  - {name: pools, component: pools, dependsOn: [opensandbox]}\n  - {name: spire-agents, component: spire-agents}\n")
        + "spire:\n  trustDomain: example.org\n  server: {address: spire.example.org}\n  className: c\n  smoke: {}\n"
        + extra
}

#[test]
fn spire_agents_without_a_trust_bundle_are_an_error_render_refuses() {
    let (code, f) = lint(&with_spire_agents(""), &[]);
    assert_eq!(code, Some(1), "{f:#?}");
    has(&f, "spire.no-trust-bundle", "error", "23:1");
    let (code, f) =
        lint(&with_spire_agents("  trustBundle: {url: https://spire.example.org:8443, format: spiffe}\n"), &[]);
    assert!(!f.iter().any(|f| f["id"] == "spire.no-trust-bundle"), "{f:#?}");
    assert_eq!(code, Some(0), "{f:#?}");
    // The chart's own values can name a source too.
    let (_, f) =
        lint(&with_spire_agents("  values: {spire-agent: {trustBundleHostPath: /etc/spire/bundle.pem}}\n"), &[]);
    assert!(!f.iter().any(|f| f["id"] == "spire.no-trust-bundle"), "{f:#?}");
}

#[test]
fn a_chart_or_source_without_an_exact_pin_is_a_warning() {
    let (code, f) = lint(&BASE.replace("ref: {tag: helm/opensandbox/0.2.2}", "ref: {branch: main}"), &[]);
    assert_eq!(code, Some(0), "a warning: {f:#?}");
    has(&f, "chart.unpinned", "warning", "9:71");
    let f = f.iter().find(|f| f["id"] == "chart.unpinned").unwrap();
    assert!(f["message"].as_str().unwrap().contains("GitRepository/opensandbox-system/opensandbox follows"), "{f}");
    let (_, f) = lint(&BASE.replace("ref: {tag: helm/opensandbox/0.2.2}", "ref: {semver: \">=0.2.0\"}"), &[]);
    assert!(f.iter().any(|f| f["id"] == "chart.unpinned"), "a range is not a pin: {f:#?}");
    // Every shipped profile pins everything (spire-crds too).
    for profile in crate::support::shipped_profiles() {
        let out = osbx().args(["lint", "--profile", &profile, "-o", "json"]).output().unwrap();
        assert!(!outputs(&out).0.contains("chart.unpinned"), "{profile}: {}", outputs(&out).0);
    }
}

/// `--chart DIR` reads the pinned chart's values and templates: against the shared OpenSandbox
/// chart (commit 401a525, from before 0.2.2 added the node-agent subchart) exactly the node-agent
/// switch is dead; every other value osbx sets is read.
#[test]
fn values_the_pinned_chart_does_not_read_are_reported_with_chart() {
    let chart = shared().join("charts/opensandbox-401a525/opensandbox");
    let (code, f) = lint(BASE, &["--chart", chart.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{f:#?}");
    let dead: Vec<&str> =
        f.iter().filter(|f| f["id"] == "chart.unread-value").filter_map(|f| f["message"].as_str()).collect();
    assert_eq!(dead.len(), 1, "{dead:#?}");
    assert!(
        dead[0].contains("sets `opensandbox-node-agent.enabled`, which chart opensandbox 0.2.0 does not read"),
        "{dead:?}"
    );
    has(&f, "chart.unread-value", "error", "8:1");
    // A chart no release of the profile installs has nothing to say.
    let kata = shared().join("charts/kata-deploy-4.1.0/kata-deploy");
    let (code, f) = lint(BASE, &["--chart", kata.to_str().unwrap()]);
    assert_eq!(code, Some(0), "no kata-deploy release in BASE: {f:#?}");
}

/// `opensandbox.values` goes through the same check: a key the pinned chart reads is quiet, one
/// it does not read is reported at its own line under `opensandbox.values`.
#[test]
fn extra_opensandbox_values_the_chart_does_not_read_are_located_in_the_profile() {
    let chart = shared().join("charts/opensandbox-401a525/opensandbox");
    let text = BASE.replace(
        "  server:\n    apiKey",
        "  values:\n    opensandbox-server:\n      server: {nodeSelector: {role: control}}\n      noSuchKey: 1\n  server:\n    apiKey",
    );
    let (code, f) = lint(&text, &["--chart", chart.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{f:#?}");
    let unread: Vec<&Value> = f.iter().filter(|f| f["id"] == "chart.unread-value").collect();
    let at =
        |field: &str| unread.iter().find(|f| f["field"] == field).map(|f| format!("{}:{}", f["line"], f["column"]));
    assert_eq!(at("opensandbox.values.opensandbox-server.noSuchKey").as_deref(), Some("13:7"), "{unread:#?}");
    assert!(!unread.iter().any(|f| f["field"].as_str().unwrap_or_default().contains("nodeSelector")), "{unread:#?}");
    assert_eq!(unread.len(), 2, "the node-agent switch and the unknown key: {unread:#?}");
}

/// A Kata pool whose VM verify cannot inspect is a warning at its runtime class: a class that is
/// not `kata-<shim>`, and a shim whose checks do not apply (Firecracker shares no memory); a
/// class verify knows is quiet, and `verify.kataShim` names the shim of a custom class.
#[test]
fn a_kata_pool_verify_cannot_inspect_is_a_warning() {
    let with_class = |class: &str| {
        BASE.replace("      runtime: kata\n", &format!("      runtime: kata\n      runtimeClassName: {class}\n"))
    };
    let (code, f) = lint(&with_class("my-kata"), &[]);
    assert_eq!(code, Some(0), "{f:#?}");
    has(&f, "kata.uncheckable-shim", "warning", "21:7");
    let (_, f) = lint(&with_class("kata-fc"), &[]);
    let w = f.iter().find(|f| f["id"] == "kata.uncheckable-shim").unwrap_or_else(|| panic!("{f:#?}"));
    assert!(w["message"].as_str().unwrap().contains("Firecracker gives the guest block devices"), "{w}");
    let (_, f) = lint(&with_class("kata-qemu"), &[]);
    assert!(!f.iter().any(|f| f["id"] == "kata.uncheckable-shim"), "{f:#?}");
    let (_, f) = lint(&(with_class("my-kata") + "verify: {kataShim: qemu-runtime-rs}\n"), &[]);
    assert!(!f.iter().any(|f| f["id"] == "kata.uncheckable-shim"), "{f:#?}");
    let (code, f) = lint(&(with_class("my-kata") + "verify: {kataShim: qemu-fast}\n"), &[]);
    assert_eq!(code, Some(1), "an unknown shim is refused: {f:#?}");
}

/// A build pool warns (`kata.build-storage`) when its RuntimeClass is not one the rendered kata
/// layer gives block-backed emptyDirs: no kata layer rendered (at `builds`, the class being the
/// default), a plain shim class named by hand with the layer rendered (at `runtimeClassName`);
/// the build class the rendered layer installs is quiet, and so is a pool that runs no builds.
#[test]
fn a_build_pool_without_block_backed_empty_dirs_is_a_warning() {
    let build = |class: &str| {
        BASE.replace("      runtime: kata\n", &format!("      runtime: kata\n      builds: true\n{class}"))
    };
    let rendered = |text: String| {
        text.replace("layers:\n", "layers:\n  - {name: kata, component: kata}\n") + "kata: {shims: [clh-runtime-rs]}\n"
    };
    let (code, f) = lint(&build(""), &[]);
    assert_eq!(code, Some(0), "a warning: {f:#?}");
    has(&f, "kata.build-storage", "warning", "21:7");
    let w = f.iter().find(|f| f["id"] == "kata.build-storage").unwrap();
    assert_eq!(w["field"], "pools.items[1].builds", "{w}");
    assert!(
        w["message"].as_str().unwrap().contains("RuntimeClass kata-clh-runtime-rs-build, which osbx does not install"),
        "{w}"
    );

    let (code, f) = lint(&rendered(build("")), &[]);
    assert_eq!(code, Some(0), "{f:#?}");
    assert!(!f.iter().any(|f| f["id"] == "kata.build-storage"), "the layer gives the build class block-plain: {f:#?}");

    let (_, f) = lint(&rendered(build("      runtimeClassName: kata-clh-runtime-rs\n")), &[]);
    has(&f, "kata.build-storage", "warning", "23:7");
    let w = f.iter().find(|f| f["id"] == "kata.build-storage").unwrap();
    assert!(w["message"].as_str().unwrap().contains("which the kata layer installs with virtio-fs emptyDirs"), "{w}");

    let (_, f) = lint(&rendered(BASE.to_owned()), &[]);
    assert!(!f.iter().any(|f| f["id"] == "kata.build-storage"), "no build pool: {f:#?}");
}

/// The Kata annotation rules (issue 52, item 4): `kata.advisory` warns on a kata-deploy pin
/// below 4.3.0, naming the advisory and what the layer renders to close it, and is quiet at
/// 4.3.0; `kata.annotations-reopened` is an error for chart values that re-open
/// `io.katacontainers.*` (a shim's `allowedHypervisorAnnotations`, a drop-in replaced, a shim
/// enabled through the chart's values without osbx's drop-in, `disableAll: false`), located at
/// the value; `kata.allowed-annotation` says what a pool's allowed name opens; a pool carrying a
/// kata annotation it is not allowed, or naming one twice, is refused at load.
#[test]
fn kata_annotation_rules() {
    let with_kata = |kata: &str| {
        BASE.replace("layers:\n", "layers:\n  - {name: kata, component: kata}\n")
            .replace("      runtime: kata\n", "      runtime: kata\n      runtimeClassName: kata-clh-runtime-rs\n")
            + kata
    };
    let only = |f: &[Value], id: &str| -> Vec<Value> { f.iter().filter(|f| f["id"] == id).cloned().collect() };

    let (code, f) = lint(&with_kata("kata: {shims: [clh-runtime-rs]}\n"), &[]);
    assert_eq!(code, Some(0), "a warning only: {f:#?}");
    let advisory = only(&f, "kata.advisory");
    assert_eq!(advisory.len(), 1, "{f:#?}");
    assert_eq!(advisory[0]["severity"], "warning");
    assert_eq!(advisory[0]["field"], "kata.chart.version");
    let text = advisory[0]["message"].as_str().unwrap();
    for part in ["kata-deploy 4.1.0 is below 4.3.0", "CVSS 7.9", "enable_annotations = []", "osbx-kata-annotations"] {
        assert!(text.contains(part), "{part}: {text}");
    }
    assert!(only(&f, "kata.annotations-reopened").is_empty(), "{f:#?}");
    // At the fixed release, no advisory (4.3.0 is not a version osbx knows the shims of: the
    // shim list is not checked against it).
    let (_, f) = lint(
        &with_kata(
            "kata:\n  shims: [clh-runtime-rs]\n  chart: {url: oci://ghcr.io/kata-containers/kata-deploy-charts/kata-deploy, version: 4.3.0}\n",
        ),
        &[],
    );
    assert!(only(&f, "kata.advisory").is_empty(), "{f:#?}");

    let reopened = |values: &str, field: &str, says: &str| {
        let (code, f) = lint(&with_kata(&format!("kata:\n  shims: [clh-runtime-rs]\n  values:\n{values}")), &[]);
        assert_eq!(code, Some(1), "an error: {f:#?}");
        let found = only(&f, "kata.annotations-reopened");
        let e = found
            .iter()
            .find(|e| e["field"] == field && e["message"].as_str().unwrap().contains(says))
            .unwrap_or_else(|| panic!("no {field} saying {says:?} in {found:#?}"));
        assert_eq!(e["severity"], "error", "{e}");
        assert!(e["line"].as_u64().is_some_and(|l| l > 20), "located in the profile: {e}");
    };
    reopened(
        "    shims:\n      clh-runtime-rs: {allowedHypervisorAnnotations: [kernel_params]}\n",
        "kata.values.shims.clh-runtime-rs.allowedHypervisorAnnotations",
        "[\"kernel_params\"] re-open",
    );
    reopened(
        "    shims:\n      clh-runtime-rs: {dropIn: \"[runtime]\\nenable_debug = true\\n\"}\n",
        "kata.values.shims.clh-runtime-rs.dropIn",
        "sets no [hypervisor.clh] enable_annotations",
    );
    reopened(
        "    shims:\n      clh-runtime-rs: {dropIn: \"[hypervisor.clh]\\nenable_annotations = [\\\"default_memory\\\"]\\n\"}\n",
        "kata.values.shims.clh-runtime-rs.dropIn",
        "enables hypervisor annotations [\"default_memory\"]",
    );
    reopened(
        "    shims:\n      qemu: {enabled: true}\n",
        "kata.values.shims.qemu.enabled",
        "shim qemu is enabled by kata.values.shims.qemu.enabled, not by kata.shims",
    );
    reopened(
        "    shims: {disableAll: false}\n",
        "kata.values.shims.disableAll",
        "shim qemu-runtime-rs is enabled by kata.values.shims.disableAll",
    );
    // A shim enabled through the values with a drop-in that closes it is quiet.
    let (code, f) = lint(
        &with_kata(
            "kata:\n  shims: [clh-runtime-rs]\n  values:\n    shims:\n      qemu: {enabled: true, dropIn: \"[hypervisor.qemu]\\nenable_annotations = []\\n\"}\n",
        ),
        &[],
    );
    assert_eq!(code, Some(0), "{f:#?}");
    assert!(only(&f, "kata.annotations-reopened").is_empty(), "{f:#?}");

    // A pool allowed a name: what it opens, at the name.
    let allowed = with_kata("kata: {shims: [clh-runtime-rs]}\n").replace(
        "      runtimeClassName: kata-clh-runtime-rs\n",
        "      runtimeClassName: kata-clh-runtime-rs\n      kata: {allowedAnnotations: [io.katacontainers.config.hypervisor.default_memory]}\n",
    );
    let (code, f) = lint(&allowed, &[]);
    assert_eq!(code, Some(0), "{f:#?}");
    let w = only(&f, "kata.allowed-annotation");
    assert_eq!(w.len(), 1, "{f:#?}");
    assert_eq!(w[0]["field"], "pools.items[1].kata.allowedAnnotations[0]", "{}", w[0]);
    let text = w[0]["message"].as_str().unwrap();
    assert!(text.contains("pool vm may set io.katacontainers.config.hypervisor.default_memory"), "{text}");
    assert!(text.contains("RuntimeClass kata-clh-runtime-rs's Kata configuration enables default_memory"), "{text}");

    // Refused at load: a kata annotation the pool is not allowed, a name twice.
    let carrying = with_kata("kata: {shims: [clh-runtime-rs]}\n").replace(
        "      runtimeClassName: kata-clh-runtime-rs\n",
        "      runtimeClassName: kata-clh-runtime-rs\n      annotations: {io.katacontainers.config.hypervisor.kernel_params: quiet}\n",
    );
    let (code, _) = lint(&carrying, &[]);
    assert_eq!(code, Some(1), "a pool carrying a kata annotation it is not allowed is invalid");
    let twice = with_kata("kata: {shims: [clh-runtime-rs]}\n").replace(
        "      runtimeClassName: kata-clh-runtime-rs\n",
        "      runtimeClassName: kata-clh-runtime-rs\n      kata: {allowedAnnotations: [io.katacontainers.config.hypervisor.default_memory, io.katacontainers.config.hypervisor.default_memory]}\n",
    );
    let (code, _) = lint(&twice, &[]);
    assert_eq!(code, Some(1), "a name allowed twice is invalid");
}
