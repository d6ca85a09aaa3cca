//! What each Kata shim runs the VM with, and so what `osbx verify` can read of it on the node.
//!
//! Facts (Kata 3.32 / kata-deploy 4.1.0): the Go runtime keeps a sandbox's sockets in
//! `/run/vc/vm/<sandbox id>/` (Cloud Hypervisor's API `clh-api.sock`, QEMU's `qmp.sock`), the
//! Rust runtime (`*-runtime-rs`) in `/run/kata/<sandbox id>/` (`ch-api.sock`, `qmp.sock`);
//! Dragonball is a VMM inside the runtime-rs shim process, with no API socket; Firecracker gives
//! the guest block devices, not virtio-fs, so it needs no shared memory; QEMU reaches the agent
//! over vhost-vsock (`/dev/vhost-vsock` on the host), Cloud Hypervisor, Firecracker and
//! Dragonball over a hybrid vsock (a Unix socket); the confidential shims (SEV-SNP, TDX, s390x
//! SE, and the `coco-dev` development flavour) pull images inside the guest and share no file
//! system with the host; `remote` runs the VM elsewhere (peer pods).

use std::fmt;

/// The virtual machine monitor behind a shim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vmm {
    /// QEMU (`qemu-system-*`).
    Qemu,
    /// Cloud Hypervisor (`cloud-hypervisor`, with its HTTP API on a Unix socket).
    CloudHypervisor,
    /// Dragonball, built into the runtime-rs shim.
    Dragonball,
    /// Firecracker (its guest RAM is private memory: no shared-memory check applies).
    Firecracker,
    /// OpenVMM (Azure).
    OpenVmm,
    /// A VM outside the node (peer pods).
    Remote,
}

impl fmt::Display for Vmm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Qemu => "QEMU",
            Self::CloudHypervisor => "Cloud Hypervisor",
            Self::Dragonball => "Dragonball",
            Self::Firecracker => "Firecracker",
            Self::OpenVmm => "OpenVMM",
            Self::Remote => "a remote VM",
        })
    }
}

/// The Kata runtime a shim belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// The Go runtime (`containerd-shim-kata-v2`).
    Go,
    /// The Rust runtime (`*-runtime-rs`).
    Rust,
}

/// One shim: its VMM, runtime and how it shares memory and files with the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shim {
    /// The shim's name (`clh-runtime-rs`).
    pub name: &'static str,
    /// Its VMM.
    pub vmm: Vmm,
    /// Its runtime.
    pub runtime: Runtime,
    /// Confidential (or guest-pull): no file system shared with the host, so no shared memory.
    pub confidential: bool,
}

impl Shim {
    /// The directory of a sandbox's sockets, under `/run`.
    #[must_use]
    pub fn run_dir(&self) -> &'static str {
        match self.runtime {
            Runtime::Go => "/run/vc/vm",
            Runtime::Rust => "/run/kata",
        }
    }

    /// The directories whose `<dir>/<sandbox id>` a sandbox holds on the node while it runs and
    /// must be gone after its delete, given its run directory (`run_dir`, or
    /// `verify.kataRunDir`): the run directory; for the Go runtime its persisted state in the
    /// sibling `sbs` (`/run/vc/sbs`; runtime-rs keeps it in the run directory); and the host's
    /// shared directory of the sandbox (`/run/kata-containers/shared/sandboxes`, both runtimes).
    #[must_use]
    pub fn sandbox_dirs(&self, run_dir: &str) -> Vec<String> {
        let mut dirs = vec![run_dir.trim_end_matches('/').to_owned()];
        if self.runtime == Runtime::Go
            && let Some(parent) = std::path::Path::new(run_dir.trim_end_matches('/')).parent()
        {
            dirs.push(parent.join("sbs").display().to_string());
        }
        dirs.push(SHARED_SANDBOXES.to_owned());
        dirs
    }

    /// The VMM's API socket in the sandbox directory, when it has one verify reads.
    #[must_use]
    pub fn api_socket(&self) -> Option<&'static str> {
        match (self.vmm, self.runtime) {
            (Vmm::CloudHypervisor, Runtime::Go) => Some("clh-api.sock"),
            (Vmm::CloudHypervisor, Runtime::Rust) => Some("ch-api.sock"),
            (Vmm::Qemu, _) => Some("qmp.sock"),
            _ => None,
        }
    }

    /// Whether the host needs `/dev/vhost-vsock` (QEMU talks to the agent over vhost-vsock).
    #[must_use]
    pub fn needs_vhost_vsock(&self) -> bool {
        self.vmm == Vmm::Qemu
    }

    /// Why the VMM's shared memory is not a thing to check for this shim, if it is not.
    #[must_use]
    pub fn shared_memory_not_applicable(&self) -> Option<String> {
        match self.vmm {
            Vmm::Firecracker => {
                Some("Firecracker gives the guest block devices, not virtio-fs: it shares no memory".into())
            }
            Vmm::Remote => Some("the VM runs outside the node (peer pods)".into()),
            Vmm::OpenVmm => Some("osbx does not know how OpenVMM exposes guest memory".into()),
            _ if self.confidential => Some(format!(
                "{} is confidential (or guest-pull): the guest shares no file system with the host, and its memory is private",
                self.name
            )),
            _ => None,
        }
    }

    /// The table of its VMM in the Kata configuration (`[hypervisor.<table>]`), where
    /// `enable_annotations` lists the hypervisor annotations a pod may set. The mapping is
    /// kata-deploy 4.1.0's own (`get_hypervisor_name` in
    /// `tools/packaging/kata-deploy/binary/src/artifacts/install.rs`: every `qemu*` shim `qemu`,
    /// the `clh*` shims `clh`, `fc` `firecracker`, `openvmm-azure-runtime-rs` `openvmm`), and the
    /// tables of Kata 4.1.0's `src/runtime/config/*.toml.in` and `src/runtime-rs/config/*.toml.in`.
    #[must_use]
    pub fn hypervisor_table(&self) -> &'static str {
        match self.vmm {
            Vmm::Qemu => "qemu",
            Vmm::CloudHypervisor => "clh",
            Vmm::Dragonball => "dragonball",
            Vmm::Firecracker => "firecracker",
            Vmm::OpenVmm => "openvmm",
            Vmm::Remote => "remote",
        }
    }

    /// Why the node's KVM is not a thing to check for this shim, if it is not.
    #[must_use]
    pub fn host_kvm_not_applicable(&self) -> Option<String> {
        (self.vmm == Vmm::Remote).then(|| "the VM runs outside the node (peer pods)".to_owned())
    }
}

/// Where kata-deploy 4.1.0 installs the Kata configuration on a node (its default prefix
/// `/opt/kata`; osbx sets no `INSTALLATION_PREFIX` or `multiInstallSuffix`, which would move it):
/// every handler's configuration file and its `config.d/` are under it.
pub const CONFIG_ROOT: &str = "/opt/kata/share/defaults/kata-containers";

/// The configuration file the handler of RuntimeClass `class` loads (containerd's
/// `options.ConfigPath` for it), as kata-deploy 4.1.0 installs it: for a shim's own class
/// `kata-<shim>`, `<root>/runtimes/<shim>/configuration-<shim>.toml` (Go shims) or
/// `<root>/runtime-rs/runtimes/<shim>/…` (Rust shims), a copy of the shipped file with
/// `allowedHypervisorAnnotations` appended to its `enable_annotations`, the shim's `dropIn` as
/// `config.d/50-user-overrides.toml` (`binary/src/artifacts/install.rs` `setup_runtime_directory`,
/// `configure_hypervisor_annotations`, `install_default_runtime_drop_in`; `utils/system.rs`
/// `get_kata_containers_config_path`; `runtime/containerd.rs`); for a build class (a
/// `customRuntimes` entry whose handler is the class), `<root>/custom-runtimes/<handler>/
/// configuration-<baseConfig>.toml`, a copy of the shim's file as kata-deploy modified it, its
/// `dropIn` as `config.d/50-overrides.toml` (`install_custom_runtime_configs`,
/// `configure_custom_containerd_runtime`). Both runtimes then merge every file of `config.d/` in
/// name order over it. `None` for a class that is not `kata-<shim>` or `kata-<shim>-build`.
#[must_use]
pub fn config_file(class: &str) -> Option<(String, &'static Shim)> {
    let shim = of_class(class)?;
    let file = format!("configuration-{}.toml", shim.name);
    if class == super::build_runtime_class(shim.name) {
        return Some((format!("{CONFIG_ROOT}/custom-runtimes/{class}/{file}"), shim));
    }
    let runtime = if shim.runtime == Runtime::Rust { "runtime-rs/" } else { "" };
    Some((format!("{CONFIG_ROOT}/{runtime}runtimes/{}/{file}", shim.name), shim))
}

/// The host's shared directories of the sandboxes (`<dir>/<sandbox id>/{shared,mounts}` for the
/// Go runtime, `{ro,rw}` for runtime-rs), removed when a sandbox stops.
pub(crate) const SHARED_SANDBOXES: &str = "/run/kata-containers/shared/sandboxes";

/// Where both runtimes record a block emptyDir's `disk.img` while a sandbox uses it: one
/// directory per volume, named by the base64 of the volume's path (`<base64>/mountInfo.json`).
pub(crate) const DIRECT_VOLUMES: &str = "/run/kata-containers/shared/direct-volumes";

/// The kubelet's pod directories: a block emptyDir's backing file is
/// `<dir>/<pod UID>/volumes/kubernetes.io~empty-dir/<volume>/disk.img`.
pub(crate) const KUBELET_PODS: &str = "/var/lib/kubelet/pods";

/// Every shim kata-deploy 4.1.0 installs, with its VMM and runtime.
pub(crate) const SHIMS: &[Shim] = &[
    shim("clh", Vmm::CloudHypervisor, Runtime::Go, false),
    shim("clh-azure", Vmm::CloudHypervisor, Runtime::Go, false),
    shim("clh-runtime-rs", Vmm::CloudHypervisor, Runtime::Rust, false),
    shim("clh-azure-runtime-rs", Vmm::CloudHypervisor, Runtime::Rust, false),
    shim("dragonball", Vmm::Dragonball, Runtime::Rust, false),
    shim("fc", Vmm::Firecracker, Runtime::Go, false),
    shim("qemu", Vmm::Qemu, Runtime::Go, false),
    shim("qemu-runtime-rs", Vmm::Qemu, Runtime::Rust, false),
    shim("qemu-nvidia-cpu", Vmm::Qemu, Runtime::Go, false),
    shim("qemu-nvidia-cpu-runtime-rs", Vmm::Qemu, Runtime::Rust, false),
    shim("qemu-nvidia-gpu", Vmm::Qemu, Runtime::Go, false),
    shim("qemu-nvidia-gpu-runtime-rs", Vmm::Qemu, Runtime::Rust, false),
    shim("qemu-nvidia-gpu-snp", Vmm::Qemu, Runtime::Go, true),
    shim("qemu-nvidia-gpu-snp-runtime-rs", Vmm::Qemu, Runtime::Rust, true),
    shim("qemu-nvidia-gpu-tdx", Vmm::Qemu, Runtime::Go, true),
    shim("qemu-nvidia-gpu-tdx-runtime-rs", Vmm::Qemu, Runtime::Rust, true),
    shim("qemu-snp", Vmm::Qemu, Runtime::Go, true),
    shim("qemu-snp-runtime-rs", Vmm::Qemu, Runtime::Rust, true),
    shim("qemu-tdx", Vmm::Qemu, Runtime::Go, true),
    shim("qemu-tdx-runtime-rs", Vmm::Qemu, Runtime::Rust, true),
    shim("qemu-se", Vmm::Qemu, Runtime::Go, true),
    shim("qemu-se-runtime-rs", Vmm::Qemu, Runtime::Rust, true),
    shim("qemu-coco-dev", Vmm::Qemu, Runtime::Go, true),
    shim("qemu-coco-dev-runtime-rs", Vmm::Qemu, Runtime::Rust, true),
    shim("remote", Vmm::Remote, Runtime::Go, false),
    shim("openvmm-azure-runtime-rs", Vmm::OpenVmm, Runtime::Rust, false),
];

const fn shim(name: &'static str, vmm: Vmm, runtime: Runtime, confidential: bool) -> Shim {
    Shim { name, vmm, runtime, confidential }
}

/// A shim by name.
#[must_use]
pub(crate) fn by_name(name: &str) -> Option<&'static Shim> {
    SHIMS.iter().find(|s| s.name == name)
}

/// The shim behind a RuntimeClass kata-deploy created (`kata-<shim>`, or the build class
/// `kata-<shim>-build` the kata layer creates from that shim's configuration).
#[must_use]
pub(crate) fn of_class(class: &str) -> Option<&'static Shim> {
    let name = class.strip_prefix("kata-")?;
    by_name(name).or_else(|| name.strip_suffix(super::BUILD_CLASS_SUFFIX).and_then(by_name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_shim_has_facts_and_classes_map_back() {
        for name in super::super::known_shims("4.1.0").unwrap() {
            let s = by_name(name).unwrap_or_else(|| panic!("no facts for {name}"));
            assert_eq!(of_class(&super::super::runtime_class(name)), Some(s));
        }
        let clh = of_class("kata-clh").unwrap();
        assert_eq!((clh.run_dir(), clh.api_socket()), ("/run/vc/vm", Some("clh-api.sock")));
        let rs = of_class("kata-clh-runtime-rs").unwrap();
        assert_eq!((rs.run_dir(), rs.api_socket()), ("/run/kata", Some("ch-api.sock")));
        assert_eq!(
            clh.sandbox_dirs("/run/vc/vm"),
            ["/run/vc/vm", "/run/vc/sbs", "/run/kata-containers/shared/sandboxes"]
        );
        assert_eq!(rs.sandbox_dirs("/run/kata/"), ["/run/kata", "/run/kata-containers/shared/sandboxes"]);
        assert!(of_class("kata-qemu").unwrap().needs_vhost_vsock());
        assert!(of_class("kata-fc").unwrap().shared_memory_not_applicable().is_some());
        assert!(of_class("kata-qemu-snp").unwrap().shared_memory_not_applicable().is_some());
        assert!(of_class("kata-dragonball").unwrap().api_socket().is_none());
        assert!(of_class("my-kata").is_none());
        assert_eq!(of_class("kata-clh-runtime-rs-build"), Some(rs), "a build class runs its shim");
        assert_eq!(of_class(&super::super::build_runtime_class("qemu")), by_name("qemu"));
        assert!(of_class("kata-my-build").is_none());
        let files: Vec<String> = ["kata-clh-runtime-rs", "kata-qemu", "kata-qemu-build", "kata-dragonball"]
            .into_iter()
            .map(|c| config_file(c).unwrap().0)
            .collect();
        assert_eq!(
            files,
            [
                "/opt/kata/share/defaults/kata-containers/runtime-rs/runtimes/clh-runtime-rs/configuration-clh-runtime-rs.toml",
                "/opt/kata/share/defaults/kata-containers/runtimes/qemu/configuration-qemu.toml",
                "/opt/kata/share/defaults/kata-containers/custom-runtimes/kata-qemu-build/configuration-qemu.toml",
                "/opt/kata/share/defaults/kata-containers/runtime-rs/runtimes/dragonball/configuration-dragonball.toml",
            ]
        );
        assert!(config_file("my-kata").is_none());
        let tables: Vec<(&str, &str)> =
            ["clh-runtime-rs", "qemu-snp", "dragonball", "fc", "openvmm-azure-runtime-rs", "remote"]
                .into_iter()
                .map(|n| (n, by_name(n).unwrap().hypervisor_table()))
                .collect();
        assert_eq!(
            tables,
            [
                ("clh-runtime-rs", "clh"),
                ("qemu-snp", "qemu"),
                ("dragonball", "dragonball"),
                ("fc", "firecracker"),
                ("openvmm-azure-runtime-rs", "openvmm"),
                ("remote", "remote")
            ]
        );
    }
}
