//! A prepared view of a host for the real host probes: the probe's script runs unchanged in a
//! private mount namespace whose `/sys/module` and `/dev` show the host a test chose (which KVM
//! module is loaded and its `nested` parameter, whether `/dev/kvm` and `/dev/vhost-vsock`
//! exist), so `kata.host-kvm` meets every kind of host on any machine, not only this one's.
//!
//! How: a directory holds the view's `sys-module/<module>/parameters/nested` files and a `dev/`
//! with real device nodes (`mknod`: `null`, `zero`, `urandom`; `kvm` as this machine's
//! `/dev/kvm`, else misc 10:232, and `vhost-vsock` as misc 10:241, the kernel's fixed minors), and `unshare --mount` bind-mounts
//! them over `/sys/module` and `/dev` for the probe alone (nothing outside its namespace sees
//! them). The hostPath type check the kubelet makes before starting the probe reads the same
//! view ([`HostView::path`]).
//!
//! A view may also hold a Kata configuration tree ([`HostView::install`]), shown at kata-deploy's
//! `/opt/kata/share/defaults/kata-containers` (read-only, over a tmpfs on `/opt` in the
//! namespace: this machine's `/opt` is not seen, nor written to), for the configuration probe.
//!
//! What it cannot show: the view's `/dev/kvm` is the kernel's KVM device, so it answers only if
//! this machine has a KVM (of any kind: `kvm_intel`, `kvm_amd` or `kvm_pvm`); on a machine without
//! one it exists but does not open, and the verdicts that need `KVM_CREATE_VM` to work are not
//! reachable there ([`Host::this_machine`] says which this machine is). The module directories
//! are only names: which module really backs `/dev/kvm` is the view's claim, as a node's
//! `/sys/module` is the probe's only evidence on a real node too. Needs root (`mknod`, mounts).

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A loaded kernel module as `/sys/module` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// Its name (`kvm_intel`).
    pub name: String,
    /// `parameters/nested`, when the module has it.
    pub nested: Option<String>,
}

impl Module {
    /// A module without a `nested` parameter.
    pub fn plain(name: &str) -> Self {
        Self { name: name.into(), nested: None }
    }

    /// A module with a `nested` parameter.
    pub fn nested(name: &str, nested: &str) -> Self {
        Self { name: name.into(), nested: Some(nested.into()) }
    }
}

/// The facts of a host the KVM probe reads.
#[derive(Clone, Debug)]
pub struct Host {
    /// The modules in `/sys/module` that matter here (`kvm`, `kvm_intel`, `kvm_amd`, `kvm_pvm`,
    /// `vhost_vsock`).
    pub modules: Vec<Module>,
    /// `/dev/kvm` is a character device.
    pub kvm: bool,
    /// `/dev/kvm` opens read-write (a KVM answers behind it).
    pub kvm_opens: bool,
    /// `/dev/vhost-vsock` is a character device.
    pub vhost_vsock: bool,
}

/// kata-deploy 4.1.0's configuration tree on a node (`osbx::components::kata::shim::CONFIG_ROOT`).
pub const KATA_CONFIG: &str = osbx::components::kata::shim::CONFIG_ROOT;

/// The modules whose directories the KVM probe and its tests care about.
const MODULES: [&str; 5] = ["kvm", "kvm_intel", "kvm_amd", "kvm_pvm", "vhost_vsock"];

fn char_device(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device())
}

fn opens(path: &Path) -> bool {
    std::fs::OpenOptions::new().read(true).write(true).open(path).is_ok()
}

impl Host {
    /// What this machine (as this process's mount namespace shows it) is.
    pub fn this_machine() -> Self {
        Self::read(Path::new("/sys/module"), Path::new("/dev"))
    }

    fn read(modules: &Path, dev: &Path) -> Self {
        let modules = MODULES
            .iter()
            .filter(|m| modules.join(m).is_dir())
            .map(|m| Module {
                name: (*m).into(),
                nested: std::fs::read_to_string(modules.join(m).join("parameters/nested"))
                    .ok()
                    .map(|n| n.trim().to_owned()),
            })
            .collect();
        Self {
            modules,
            kvm: char_device(&dev.join("kvm")),
            kvm_opens: opens(&dev.join("kvm")),
            vhost_vsock: char_device(&dev.join("vhost-vsock")),
        }
    }

    /// The KVM module that backs `/dev/kvm` as the probe names it: the last of `kvm_intel`,
    /// `kvm_amd`, `kvm_pvm` present (the probe's order).
    pub fn kvm_module(&self) -> Option<&Module> {
        ["kvm_intel", "kvm_amd", "kvm_pvm"].iter().rev().find_map(|m| self.modules.iter().find(|x| x.name == *m))
    }

    /// A host with hardware KVM `module` (`kvm_intel`, `kvm_amd`) or PVM, the `kvm` core module,
    /// `/dev/kvm` as this machine has it, and `/dev/vhost-vsock` when `vhost_vsock`.
    pub fn with(module: Option<Module>, vhost_vsock: bool) -> Self {
        let here = Self::this_machine();
        let mut modules = vec![Module::plain("kvm")];
        modules.extend(module);
        if vhost_vsock {
            modules.push(Module::plain("vhost_vsock"));
        }
        Self { modules, kvm: true, kvm_opens: here.kvm_opens, vhost_vsock }
    }

    /// The same host without `/dev/kvm`.
    pub fn without_kvm(mut self) -> Self {
        self.kvm = false;
        self.kvm_opens = false;
        self
    }

    /// One line for a test's report.
    pub fn describe(&self) -> String {
        let modules: Vec<String> = self
            .modules
            .iter()
            .map(|m| m.nested.as_ref().map_or(m.name.clone(), |n| format!("{} (nested {n})", m.name)))
            .collect();
        format!(
            "modules [{}], /dev/kvm {}, /dev/vhost-vsock {}",
            modules.join(", "),
            match (self.kvm, self.kvm_opens) {
                (false, _) => "absent",
                (true, false) => "present but does not open",
                (true, true) => "answers",
            },
            if self.vhost_vsock { "present" } else { "absent" }
        )
    }
}

/// A prepared host: its files, and how to run a command that sees them.
#[derive(Debug)]
pub struct HostView {
    dir: tempfile::TempDir,
    /// What the view shows.
    pub host: Host,
}

/// The device number of this machine's `/dev/kvm` (as this process's mount namespace shows it),
/// else the kernel's misc 10:232: the view's `/dev/kvm` is the device this machine has, so it
/// answers exactly when this machine's does.
fn kvm_device() -> (u32, u32) {
    use std::os::unix::fs::MetadataExt as _;
    match std::fs::metadata("/dev/kvm") {
        Ok(m) if m.file_type().is_char_device() => {
            let rdev = m.rdev();
            // glibc's gnu_dev_major/gnu_dev_minor encoding.
            let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
            let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
            (u32::try_from(major).expect("major"), u32::try_from(minor).expect("minor"))
        }
        _ => (10, 232),
    }
}

/// `mknod PATH c MAJOR MINOR`, mode 0600 as udev makes these nodes.
fn mknod(path: &Path, major: u32, minor: u32) {
    let out = Command::new("mknod")
        .args(["-m", "0600"])
        .arg(path)
        .args(["c", &major.to_string(), &minor.to_string()])
        .output()
        .expect("run mknod");
    assert!(
        out.status.success(),
        "mknod {}: {} (the Kata tier runs as root)",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl HostView {
    /// Build the view of `host`.
    pub fn new(host: Host) -> Self {
        let dir = tempfile::tempdir().expect("host view directory");
        let modules = dir.path().join("sys-module");
        for m in &host.modules {
            let at = modules.join(&m.name).join("parameters");
            std::fs::create_dir_all(&at).unwrap();
            if let Some(nested) = &m.nested {
                std::fs::write(at.join("nested"), format!("{nested}\n")).unwrap();
            }
        }
        std::fs::create_dir_all(&modules).unwrap();
        let dev = dir.path().join("dev");
        std::fs::create_dir_all(&dev).unwrap();
        for (name, major, minor) in [("null", 1, 3), ("zero", 1, 5), ("urandom", 1, 9)] {
            mknod(&dev.join(name), major, minor);
        }
        if host.kvm {
            let (major, minor) = kvm_device();
            mknod(&dev.join("kvm"), major, minor);
        }
        if host.vhost_vsock {
            mknod(&dev.join("vhost-vsock"), 10, 241);
        }
        let view = Self { dir, host };
        let seen = Host::read(&view.dir.path().join("sys-module"), &view.dir.path().join("dev"));
        assert_eq!(
            (seen.modules, seen.kvm, seen.vhost_vsock),
            (view.host.modules.clone(), view.host.kvm, view.host.vhost_vsock),
            "the view holds what it should"
        );
        view
    }

    /// Put `text` at `path` (a host path under kata-deploy's configuration tree,
    /// [`KATA_CONFIG`]) in the view, as kata-deploy's installer leaves it on a node.
    pub fn install(&self, path: &str, text: &str) {
        let rest = path.strip_prefix(KATA_CONFIG).and_then(|r| r.strip_prefix('/')).expect("a path in the Kata tree");
        let at = self.dir.path().join("kata-config").join(rest);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(at, text).unwrap();
    }

    /// Where a host path is inside the view (`/dev/…`, `/sys/module/…` and, with
    /// [`HostView::install`], the Kata tree; others unchanged).
    pub fn path(&self, path: &str) -> PathBuf {
        let kata = self.dir.path().join("kata-config");
        if let Some(rest) =
            path.strip_prefix(KATA_CONFIG).filter(|r| kata.is_dir() && (r.is_empty() || r.starts_with('/')))
        {
            kata.join(rest.trim_start_matches('/'))
        } else if let Some(rest) = path.strip_prefix("/dev/") {
            self.dir.path().join("dev").join(rest)
        } else if let Some(rest) = path.strip_prefix("/sys/module/") {
            self.dir.path().join("sys-module").join(rest)
        } else {
            PathBuf::from(path)
        }
    }

    /// `program` run in a private mount namespace with the view over `/sys/module` and `/dev`.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(format!(
                r#"mount --bind "$0/sys-module" /sys/module && mount --bind "$0/dev" /dev && if [ -d "$0/kata-config" ]; then mount -t tmpfs osbx-host-opt /opt && mkdir -p {KATA_CONFIG} && mount --bind "$0/kata-config" {KATA_CONFIG} && mount -o remount,bind,ro {KATA_CONFIG}; fi && exec "$@""#
            ))
            .arg(self.dir.path())
            .arg(program);
        cmd
    }
}
