//! The Kata tier (`tests/run kata`): verify's Kata checks against real VMs and real hosts.
//!
//! Real: QEMU from Debian (TCG, so no test needs this host's KVM) booting Debian's cloud kernel
//! as the mirror serves it, whose guest runs the guest-kernel probe (and the QEMU of each Kata
//! pool pod, whose exit the reclaim probe sees); the QEMU process, its QMP
//! socket and its memory maps, read by the real host probe run on this machine; this machine's
//! `/dev/kvm`, `/sys/module` and `/dev/vhost-vsock`, whatever they are, and prepared hosts (the
//! real probe in a private mount namespace, `cluster::standin::host_view`) for every kind of
//! KVM. Played (no registry serves them): the Kata shim's pod-to-VM step and Cloud
//! Hypervisor's API (`tests/played/kata.rs`, `cloud_hypervisor.py`). The cluster is the verify
//! tests' stand-in world (its kubelet hands Kata pods to the played shim and runs host probes
//! here).
//!
//! Each test names the wrong verdict the checks gave before (from issue 23's measurements): a
//! Go-runtime guest without the systemd marker failed `kata.guest-kernel`; PVM passed
//! `kata.host-kvm`; a host probe that never ran blamed VT-x; Cloud Hypervisor's kept-open
//! connection timed out `kata.vmm-shared-memory`, which also knew only runtime-rs CH.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::played::kata::{Parts, Runtime, Shim, Vmm};
use crate::support::root;
use crate::verify::World;

/// The real parts: QEMU (installed by `tests/cluster/qemu`), the guest kernel and busybox
/// (unpacked by `tests/cluster/debs`).
fn parts() -> Parts {
    static QEMU: OnceLock<PathBuf> = OnceLock::new();
    static DEBS: OnceLock<PathBuf> = OnceLock::new();
    let qemu = QEMU.get_or_init(|| {
        let out = std::process::Command::new(root().join("tests/cluster/qemu")).output().expect("tests/cluster/qemu");
        assert!(out.status.success(), "tests/cluster/qemu: {}", String::from_utf8_lossy(&out.stderr));
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    });
    let debs = DEBS.get_or_init(|| {
        let out = std::process::Command::new(root().join("tests/cluster/debs")).output().expect("tests/cluster/debs");
        assert!(out.status.success(), "tests/cluster/debs: {}", String::from_utf8_lossy(&out.stderr));
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    });
    // Debian's cloud kernel as the mirror served it when `tests/cluster/debs` ran.
    let boot = debs.join("linux-image-cloud-amd64/boot");
    let kernel = std::fs::read_dir(&boot)
        .expect("the guest kernel package")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-")))
        .expect("vmlinuz");
    let python = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3");
    let release = kernel.file_name().unwrap_or_default().to_string_lossy().trim_start_matches("vmlinuz-").to_owned();
    Parts {
        modules: debs.join("linux-image-cloud-amd64/lib/modules").join(release),
        workload_image,
        virtiofsd: PathBuf::from("/usr/lib/qemu/virtiofsd"),
        python: PathBuf::from(String::from_utf8_lossy(&python.stdout).trim()),
        qemu: qemu.clone(),
        kernel,
        busybox: debs.join("busybox-static/bin/busybox"),
        cloud_hypervisor: root().join("tests/played/cloud_hypervisor.py"),
    }
}

/// The workload probe image's disk (`tests/cluster/guest-image`: Debian's dockerd), built once.
fn workload_image() -> PathBuf {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let out = std::process::Command::new(root().join("tests/cluster/guest-image"))
                .output()
                .expect("tests/cluster/guest-image");
            assert!(out.status.success(), "tests/cluster/guest-image: {}", String::from_utf8_lossy(&out.stderr));
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        })
        .clone()
}

/// The guest kernel's release (`uname -r` in the guest): its `vmlinuz-<release>` name.
fn guest_release() -> String {
    let kernel = parts().kernel;
    let name = kernel.file_name().unwrap_or_default().to_string_lossy();
    name.strip_prefix("vmlinuz-").unwrap_or_else(|| panic!("{name} is not vmlinuz-<release>")).to_owned()
}

/// A world whose Kata pool runs `class` through a played shim of `vmm` and `runtime`; returns
/// the world and the shim (kept alive by the world's scenario).
async fn world(class: &str, vmm: Vmm, runtime: Runtime) -> (World, Arc<Shim>) {
    let world = World::start().await;
    let shim = Arc::new(Shim::new(parts(), vmm, runtime));
    let s = shim.clone();
    world.set(move |sc| sc.vm = Some(s));
    runtime_class(&world.client, class).await;
    crate::verify::profile()
        .pool_set("vm", "runtimeClassName", class)
        .set("verify.kataRunDir", shim.run_dir.display().to_string())
        .set("verify.containerdTaskDir", shim.task_dir.display().to_string())
        .set("verify.probeDeadlineSeconds", 90)
        .write_to(world.dir.path());
    (world, shim)
}

/// The RuntimeClass kata-deploy creates for `class`.
async fn runtime_class(client: &kube::Client, class: &str) {
    let rc = json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": class}, "handler": class,
                    "overhead": {"podFixed": {"cpu": "250m", "memory": "160Mi"}},
                    "scheduling": {"nodeSelector": {"katacontainers.io/kata-runtime": "true"}}});
    let (api, name) = crate::cluster::api_for(client, &rc).await;
    api.patch(&name, &PatchParams::apply("osbx-kata-test").force(), &Patch::Apply(&rc)).await.unwrap();
}

#[track_caller]
fn assert_check(checks: &[Value], id: &str, outcome: &str, fragments: &[&str]) {
    crate::node::assert_check(checks, id, outcome, fragments);
}

mod config;
mod guest;
mod host;
mod memory;
mod reclaim;
mod workload;
