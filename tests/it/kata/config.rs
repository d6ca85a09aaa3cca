//! `kata.annotations.<class>` against prepared hosts: the real configuration probe (the script
//! `osbx verify` runs) in a private mount namespace whose `/opt/kata/share/defaults/
//! kata-containers` holds the files kata-deploy 4.1.0's installer leaves for each class's handler
//! (`cluster::standin::host_view`), read through the stand-in kubelet as a host probe pod.
//!
//! Where the facts come from:
//! - the drop-ins are the real chart's: `helm template` of kata-deploy 4.1.0
//!   (`../shared/charts/kata-deploy-4.1.0`) with the values osbx renders for the profile, the text
//!   its ConfigMap gives the installer for each handler (`charts::kata_deploy_install`), placed
//!   where the installer copies it: `config.d/50-user-overrides.toml` of a shim's own handler,
//!   `config.d/50-overrides.toml` of a custom runtime (the build classes) (kata-deploy 4.1.0
//!   `binary/src/artifacts/install.rs` `install_default_runtime_drop_in`,
//!   `install_custom_runtime_configs`);
//! - the base file's `enable_annotations` is the shipped file's (Kata 4.1.0's build defaults,
//!   `DEFENABLEANNOTATIONS`: the Go runtime's `src/runtime/Makefile` enables `enable_iommu`,
//!   `kernel_params`, `kernel_verity_params`, runtime-rs's `src/runtime-rs/Makefile` also
//!   `default_vcpus`, `default_memory`; the reference's §2 names the latter for CLH runtime-rs) with
//!   what the chart tells the installer in `ALLOWED_HYPERVISOR_ANNOTATIONS_X86_64` appended,
//!   sorted and deduplicated, as `configure_hypervisor_annotations` does; a build class's base is a
//!   copy of its shim's (`install_custom_runtime_configs` copies it after that edit);
//! - the paths are `osbx::components::kata::shim::config_file`'s (containerd's `ConfigPath`).
//!
//! What the prepared host cannot show: the rest of the shipped file (only its hypervisor table's
//! `enable_annotations` is written), kata-deploy's installer itself (not run: its output is
//! written as its source says it writes it), kata-deploy's other drop-ins (`10-installation-
//! prefix`, `20-debug`, `30-kernel-params`: none sets `enable_annotations`), and that containerd
//! really loads the file `ConfigPath` names (no containerd here: the probe trusts kata-deploy's
//! layout, and an `INSTALLATION_PREFIX` or `multiInstallSuffix` would move it).

#![allow(clippy::print_stderr)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Value, json};

use super::{assert_check, world as kata_world};
use crate::cluster::standin::host_view::{Host, HostView};
use crate::node::report;
use crate::played::kata::{Runtime, Vmm};
use crate::turns::{self, Need};
use crate::verify::World;

const MEMORY: &str = "io.katacontainers.config.hypervisor.default_memory";

/// The profile: the kata layer with shims `qemu` and `clh-runtime-rs`; pool `vm` on `kata-qemu`,
/// pool `big` on `kata-clh-runtime-rs` allowed `default_memory`, build pool `build` on
/// `kata-qemu-build`.
fn profile() -> crate::builder::TestProfile {
    crate::verify::profile()
        .set(
            "layers",
            json!([
                {"name": "kata", "component": "kata"},
                {"name": "opensandbox", "component": "opensandbox"},
                {"name": "opensandbox-pools", "component": "pools", "dependsOn": ["opensandbox", "kata"]},
            ]),
        )
        .set("kata", json!({"shims": ["qemu", "clh-runtime-rs"], "defaultShim": "qemu"}))
        .pool_set("vm", "runtimeClassName", "kata-qemu")
        .pool("big", "kata", [0, 1, 0, 1])
        .pool_set("big", "runtimeClassName", "kata-clh-runtime-rs")
        .pool_set("big", "kata", json!({"allowedAnnotations": [MEMORY]}))
        .pool("build", "kata", [0, 1, 0, 1])
        .pool_set("build", "runtimeClassName", "kata-qemu-build")
        .pool_set("build", "builds", true)
        .set("verify.probeDeadlineSeconds", 60)
}

/// Kata 4.1.0's shipped `enable_annotations` for a shim of `runtime` (see the module doc).
fn shipped(runtime: osbx::components::kata::shim::Runtime) -> Vec<String> {
    let mut names = vec!["enable_iommu", "kernel_params", "kernel_verity_params"];
    if runtime == osbx::components::kata::shim::Runtime::Rust {
        names.extend(["default_vcpus", "default_memory"]);
    }
    names.into_iter().map(str::to_owned).collect()
}

/// What kata-deploy's installer appends for `shim`: `ALLOWED_HYPERVISOR_ANNOTATIONS` items are
/// `<shim>:<a>,<b>` (that shim) or bare names (every shim), space-separated.
fn appended(env: Option<&str>, shim: &str) -> Vec<String> {
    let mut out = Vec::new();
    for item in env.unwrap_or_default().split_whitespace() {
        match item.split_once(':') {
            Some((s, names)) if s == shim => out.extend(names.split(',').map(str::to_owned)),
            Some(_) => {}
            None => out.push(item.to_owned()),
        }
    }
    out
}

/// One class as the prepared host holds it.
struct Class {
    name: String,
    path: String,
    table: String,
    base: Vec<String>,
    /// `config.d/` files: name → TOML.
    drop_ins: BTreeMap<String, String>,
}

impl Class {
    /// The effective `enable_annotations`: the last file in name order that sets it, else the base.
    fn effective(&self) -> (Vec<String>, String) {
        let mut out = (self.base.clone(), self.path.clone());
        let dir = std::path::Path::new(&self.path).parent().unwrap().join("config.d");
        for (name, text) in &self.drop_ins {
            let doc: toml::Value = toml::from_str(text).unwrap();
            if let Some(list) =
                doc.get("hypervisor").and_then(|h| h.get(&self.table)).and_then(|t| t.get("enable_annotations"))
            {
                let names = list.as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
                out = (names, dir.join(name).display().to_string());
            }
        }
        out
    }
}

/// The classes of the profile as kata-deploy 4.1.0 installs them (with the rendered drop-ins).
fn installed(loaded: &osbx::profile::Profile, document: &Value) -> Vec<Class> {
    let (drop_ins, env) = crate::charts::kata_deploy_install(document);
    let mut classes = Vec::new();
    for class in loaded.sections.pools.kata_classes() {
        let (path, shim) = osbx::components::kata::shim::config_file(&class).expect("a class kata-deploy installs");
        let (base_shim, text) =
            drop_ins.get(&class).unwrap_or_else(|| panic!("the chart installs no handler for {class}"));
        assert_eq!(base_shim, shim.name, "{class}");
        let mut base: BTreeSet<String> = shipped(shim.runtime).into_iter().collect();
        base.extend(appended(env.as_deref(), shim.name));
        let file = if class == osbx::components::kata::build_runtime_class(shim.name) {
            "50-overrides.toml"
        } else {
            "50-user-overrides.toml"
        };
        classes.push(Class {
            name: class.clone(),
            path,
            table: shim.hypervisor_table().to_owned(),
            base: base.into_iter().collect(),
            drop_ins: text.iter().map(|t| (file.to_owned(), t.clone())).collect(),
        });
    }
    classes
}

/// A prepared host holding `classes`.
fn host(classes: &[Class]) -> HostView {
    let view = HostView::new(Host::this_machine());
    for c in classes {
        let names: Vec<String> = c.base.iter().map(|n| format!("{n:?}")).collect();
        view.install(&c.path, &format!("[hypervisor.{}]\nenable_annotations = [{}]\n", c.table, names.join(", ")));
        let dir = std::path::Path::new(&c.path).parent().unwrap().join("config.d");
        for (name, text) in &c.drop_ins {
            view.install(&dir.join(name).display().to_string(), text);
        }
    }
    view
}

/// Verify every class on `view` and hold each verdict to what its files call for.
async fn holds(
    world: &World,
    shim: &Arc<crate::played::kata::Shim>,
    loaded: &osbx::profile::Profile,
    classes: &[Class],
    label: &str,
) -> Vec<(String, &'static str)> {
    let view = Arc::new(host(classes));
    let s = shim.clone();
    world.set(move |sc| {
        sc.vm = Some(s);
        sc.host_view = Some(view);
    });
    let ids: Vec<String> = classes.iter().map(|c| format!("kata.annotations.{}", c.name)).collect();
    let (code, checks) = world.verify(&ids.join(",")).await;
    report(&checks);
    let mut outcomes = Vec::new();
    for c in classes {
        let allowed = loaded.sections.pools.kata_demands().allowed_on(&c.name);
        let (effective, set_by) = c.effective();
        let beyond: Vec<&String> = effective.iter().filter(|n| !allowed.contains(*n)).collect();
        let id = format!("kata.annotations.{}", c.name);
        eprintln!("kata-tier: {label}: {}: effective {effective:?} (set by {set_by}), allowed {allowed:?}", c.name);
        let mut words: Vec<String> = vec![format!("vf-node: {}", c.path)];
        if beyond.is_empty() {
            words.push(format!("enable_annotations = [{}]", effective.join(", ")));
            assert_check(&checks, &id, "PASS", &words.iter().map(String::as_str).collect::<Vec<_>>());
            outcomes.push((c.name.clone(), "PASS"));
        } else {
            let names: Vec<&str> = beyond.iter().map(|n| n.as_str()).collect();
            words.push(format!("enables {} beyond what the profile allows the pools on {}", names.join(", "), c.name));
            if set_by != c.path {
                words.push(format!("set last by drop-in {set_by}"));
            }
            words.push("render and apply the kata layer".into());
            assert_check(&checks, &id, "FAIL", &words.iter().map(String::as_str).collect::<Vec<_>>());
            outcomes.push((c.name.clone(), "FAIL"));
        }
    }
    let failed = outcomes.iter().any(|(_, o)| *o == "FAIL");
    assert_eq!(code, Some(i32::from(failed)), "{checks:#?}");
    outcomes
}

/// The configuration each class's handler loads, read by the real probe on prepared hosts: (a)
/// with the kata layer's rendered drop-ins every class PASSes, `kata-clh-runtime-rs` with exactly
/// the `default_memory` its pool `big` is allowed (d); (b) without any drop-in (kata-deploy 4.1.0's
/// installed default) every class FAILs naming the shipped annotations beyond what it allows; (c)
/// a later drop-in that re-opens `default_memory` on `kata-qemu`, where no pool is allowed it,
/// FAILs that class naming the drop-in, the others still PASS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configuration_probe_reads_what_each_class_enables_on_prepared_hosts() {
    let _turn = turns::take(Need::Kata).await;
    let (world, shim) = kata_world("kata-qemu", Vmm::Qemu { shared: true }, Runtime::Go).await;
    let p = profile();
    let path = p.write_to(world.dir.path());
    let document: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let loaded = osbx::profile::from_value("kata config", &document).unwrap().profile;
    let rendered = installed(&loaded, &document);
    let names: Vec<&str> = rendered.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["kata-clh-runtime-rs", "kata-qemu", "kata-qemu-build"]);

    // (a), (d): the rendered drop-ins.
    let all_pass = holds(&world, &shim, &loaded, &rendered, "rendered drop-ins").await;
    assert!(all_pass.iter().all(|(_, o)| *o == "PASS"), "{all_pass:?}");
    let big = rendered.iter().find(|c| c.name == "kata-clh-runtime-rs").unwrap();
    assert_eq!(big.effective().0, ["default_memory"], "the allowed name reached its class");

    // (b): no drop-in: kata-deploy 4.1.0's default.
    let bare: Vec<Class> = installed(&loaded, &document)
        .into_iter()
        .map(|mut c| {
            c.drop_ins.clear();
            c
        })
        .collect();
    let all_fail = holds(&world, &shim, &loaded, &bare, "no drop-in").await;
    assert!(all_fail.iter().all(|(_, o)| *o == "FAIL"), "{all_fail:?}");

    // (c): a later drop-in re-opens a name kata-qemu's pools are not allowed.
    let reopened: Vec<Class> = installed(&loaded, &document)
        .into_iter()
        .map(|mut c| {
            if c.name == "kata-qemu" {
                c.drop_ins.insert(
                    "60-reopen.toml".into(),
                    "[hypervisor.qemu]\nenable_annotations = [\"default_memory\"]\n".into(),
                );
            }
            c
        })
        .collect();
    let outcomes = holds(&world, &shim, &loaded, &reopened, "re-opened").await;
    assert_eq!(
        outcomes,
        [
            ("kata-clh-runtime-rs".to_owned(), "PASS"),
            ("kata-qemu".to_owned(), "FAIL"),
            ("kata-qemu-build".to_owned(), "PASS")
        ]
    );
}
