//! The Kata shim's pod-to-VM step, played: a pod under a Kata RuntimeClass becomes a real VM.
//!
//! **Why played**: no registry serves Kata (its Go runtime is refused by the Go module proxy, the
//! agent is not on crates.io, Debian has no package; `../shared/reference/real-node.md`), nor
//! Cloud Hypervisor (crates.io has only a placeholder).
//!
//! **What is real**: QEMU (Debian's `qemu-system-x86` 7.2, with TCG, so the tests need no KVM
//! and no particular kind of it: on PVM hosts a stock guest kernel cannot boot under KVM) boots
//! the Debian cloud kernel (`linux-image-cloud-amd64`, as the mirror serves it) with a busybox
//! initramfs; what a probe prints is what that guest prints; the QEMU process, its QMP socket and its memory maps are QEMU's own.
//!
//! **What is played, from which facts** (`real-node.md`, "Kata as it runs"): the runtime's
//! layout — the sandbox id is the CRI sandbox id, named in the container's bundle `config.json`
//! (`io.kubernetes.cri.sandbox-id`) under containerd's task directory; the sockets live in
//! `<run dir>/<sandbox id>/` (`qmp.sock` for QEMU; Cloud Hypervisor's `clh-api.sock` for the Go
//! runtime, `ch-api.sock` for runtime-rs); QEMU keeps guest RAM on a `memory-backend-*` with
//! `share=on` when virtio-fs needs it; the Go runtime's kernel command line for an initrd guest
//! carries `agent.*` parameters and no `systemd.unit=kata-containers.target`, runtime-rs adds
//! that marker. For Cloud Hypervisor no VM runs: `cloud_hypervisor.py` plays its API as measured
//! (`vm.info`'s shape, `Content-Length`, a connection kept open even when asked to close) and
//! maps a 1 GiB `ch_ram` memfd shared, as CH maps guest RAM.
//!
//! A workload probe (`verify`'s `workload.*` checks) boots a guest of its own: the kernel, an
//! initramfs that loads the virtio, virtio-fs and overlay modules from the kernel package, and as
//! the container's root the probe image's disk (`tests/cluster/guest-image`: Debian's dockerd,
//! copy-on-write). The pod's emptyDir reaches the guest as Kata's `emptydir_mode` of its class
//! says (`sandbox-work.md` §2): `shared-fs`, Kata's default, shares a host directory through
//! Debian's virtiofsd (QEMU's, `qemu-system-common`) over `vhost-user-fs-pci`, with guest RAM
//! shared; `block-plain` attaches a sparse `disk.img` as virtio-blk, formatted ext4 (here on the
//! host, before boot: the agent's `mkfs.ext4` in the guest is played). The container's `/dev` is
//! a tmpfs holding only the standard devices (a Kata privileged container gets no host devices).
//!
//! On a sandbox's stop it kills the VMM (QEMU exits) and removes the sandbox's directory and
//! bundle, as the runtime does (`sandbox-work.md` §5.2); a test can make it leave the VMM running
//! or the directory behind ([`Leave`]), the leaks `sandbox-work.md` §5.3 records.
//!
//! **What it cannot show**: the real shim (its timeouts, its errors, virtio-fs and vsock to an
//! agent: the guest runs the probe from its initramfs, not through a kata-agent), a VM under
//! KVM, Cloud Hypervisor itself, Dragonball and Firecracker, Kata's own guest kernel and
//! image, and the Rust virtiofsd Kata ships.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The VMM a played shim runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vmm {
    /// Real QEMU; guest RAM on a memfd backend shared (`share=on`) or not.
    Qemu {
        /// `share=on`.
        shared: bool,
    },
    /// Cloud Hypervisor's API, played.
    CloudHypervisor,
}

/// Which Kata runtime's layout and kernel command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// The Go runtime (`/run/vc/vm`, no systemd marker).
    Go,
    /// runtime-rs (`/run/kata`, the systemd marker).
    Rust,
}

/// What the shim leaves behind when it stops a sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Leave {
    /// Nothing: the VMM exits, the sandbox's directory is removed.
    #[default]
    Nothing,
    /// The VMM keeps running (its directory is removed).
    Vmm,
    /// The sandbox's directory (the VMM exits).
    RunDir,
}

/// Where the played shim finds the real parts.
pub struct Parts {
    /// `qemu-system-x86_64`.
    pub qemu: PathBuf,
    /// The guest kernel (`vmlinuz`).
    pub kernel: PathBuf,
    /// A static busybox for the initramfs.
    pub busybox: PathBuf,
    /// `tests/played/cloud_hypervisor.py`.
    pub cloud_hypervisor: PathBuf,
    /// The Python interpreter itself (not a wrapper that execs it: the played VMM's command
    /// line must start with the argv[0] it is given).
    pub python: PathBuf,
    /// The guest kernel's modules (`lib/modules/<release>` of its package).
    pub modules: PathBuf,
    /// The workload probe image's disk (`tests/cluster/guest-image`), built when first asked for.
    pub workload_image: fn() -> PathBuf,
    /// Debian's virtiofsd (`/usr/lib/qemu/virtiofsd`, in `qemu-system-common`).
    pub virtiofsd: PathBuf,
}

/// How a RuntimeClass's disk-backed emptyDirs reach the guest: Kata's `emptydir_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmptyDir {
    /// `shared-fs` (Kata's default): a virtio-fs share of the kubelet's directory.
    SharedFs,
    /// `block-plain`: a virtio-blk disk formatted ext4.
    BlockPlain,
}

/// The guest modules a workload guest loads, in dependency order (`sandbox-work.md` §3.6).
const WORKLOAD_MODULES: &[&str] = &[
    "virtio_ring",
    "virtio",
    "virtio_pci_legacy_dev",
    "virtio_pci_modern_dev",
    "virtio_pci",
    "virtio_blk",
    "fuse",
    "virtiofs",
    "overlay",
];

/// Guest memory of a workload guest (dockerd, containerd and a BuildKit build).
const WORKLOAD_MIB: u64 = 1024;

/// A running sandbox VM.
struct Vm {
    child: Child,
    sandbox: PathBuf,
    bundle: PathBuf,
}

/// The played shim of one node.
pub struct Shim {
    parts: Parts,
    vmm: Vmm,
    runtime: Runtime,
    /// The sandboxes' socket directories (`verify.kataRunDir`).
    pub run_dir: PathBuf,
    /// containerd's task directory (`verify.containerdTaskDir`).
    pub task_dir: PathBuf,
    work: tempfile::TempDir,
    vms: Mutex<BTreeMap<String, Vm>>,
    /// What stopping a sandbox leaves behind.
    leave: Mutex<Leave>,
    /// What it stopped, and the VMMs it left running.
    left: Mutex<Stopped>,
    /// The classes whose emptyDirs are `block-plain` (the rest: `shared-fs`).
    block_plain: Mutex<Vec<String>>,
}

/// The sandboxes a shim stopped.
#[derive(Default)]
struct Stopped {
    /// Each one's VMM PID and directory.
    sandboxes: Vec<(u32, PathBuf)>,
    /// The VMMs left running ([`Leave::Vmm`]).
    running: Vec<Child>,
}

const BEGIN: &str = "OSBX-PROBE-BEGIN";
const END: &str = "OSBX-PROBE-END";
/// Guest memory (TCG boots the cloud kernel in about 2 s with it).
const GUEST_MIB: u64 = 256;

impl Shim {
    /// A shim keeping its files in a short directory of its own under `/tmp` (a sandbox's
    /// socket paths, with its 64-digit id, must stay within a Unix socket's 108 bytes, as
    /// `/run/vc/vm/<id>/clh-api.sock` does).
    pub fn new(parts: Parts, vmm: Vmm, runtime: Runtime) -> Self {
        let work = tempfile::Builder::new().prefix("ok").tempdir_in("/tmp").expect("shim directory");
        let run_dir = work.path().join(match runtime {
            Runtime::Go => "vc",
            Runtime::Rust => "kata",
        });
        let task_dir = work.path().join("tasks");
        for d in [&run_dir, &task_dir] {
            std::fs::create_dir_all(d).expect("shim directories");
        }
        Self {
            parts,
            vmm,
            runtime,
            run_dir,
            task_dir,
            work,
            vms: Mutex::default(),
            leave: Mutex::default(),
            left: Mutex::default(),
            block_plain: Mutex::default(),
        }
    }

    /// From now on, the emptyDirs of pods under `class` are `block-plain` (as the Kata
    /// configuration drop-in of a build class sets them).
    pub fn block_plain(&self, class: &str) {
        self.block_plain.lock().unwrap().push(class.to_owned());
    }

    /// The workload probe image's files (beside its disk), for a runc pod's workload probe.
    pub fn workload_tree(&self) -> PathBuf {
        (self.parts.workload_image)().with_file_name("rootfs")
    }

    /// How `class`'s emptyDirs reach the guest.
    pub fn emptydir(&self, class: &str) -> EmptyDir {
        if self.block_plain.lock().unwrap().iter().any(|c| c == class) {
            EmptyDir::BlockPlain
        } else {
            EmptyDir::SharedFs
        }
    }

    /// From now on, stopping a sandbox leaves `what` behind.
    pub fn leave(&self, what: Leave) {
        *self.leave.lock().unwrap() = what;
    }

    /// The sandboxes stopped so far: each one's VMM PID and directory.
    pub fn stopped(&self) -> Vec<(u32, PathBuf)> {
        self.left.lock().unwrap().sandboxes.clone()
    }

    /// The kernel command line the runtime gives an initrd guest.
    fn cmdline(&self) -> String {
        let mut c = "console=ttyS0 quiet panic=-1 agent.log=debug agent.cdh_api_timeout=50".to_owned();
        if self.runtime == Runtime::Rust {
            c.push_str(" systemd.unit=kata-containers.target");
        }
        c
    }

    /// The initramfs: busybox, an `/init` that runs `/probe.sh` and prints its output between
    /// markers, and the probe.
    fn initramfs(&self, dir: &Path, script: &str) -> PathBuf {
        let init = format!(
            "#!/bin/busybox sh\n/bin/busybox mount -t proc proc /proc\n/bin/busybox --install -s /bin\n\
             mount -t sysfs sys /sys\nmount -t devtmpfs dev /dev\n: > /dev/termination-log\nsh /probe.sh > /tmp/out 2>&1; code=$?\n\
             echo {BEGIN}; cat /tmp/out; echo \"{END} $code\"\npoweroff -f\n"
        );
        let busybox = std::fs::read(&self.parts.busybox).expect("busybox");
        let mut cpio = Cpio::default();
        for d in ["bin", "proc", "sys", "dev", "tmp"] {
            cpio.dir(d);
        }
        cpio.file("bin/busybox", 0o755, &busybox);
        cpio.file("init", 0o755, init.as_bytes());
        cpio.file("probe.sh", 0o755, script.as_bytes());
        let path = dir.join("initramfs.cpio");
        std::fs::write(&path, cpio.finish()).expect("initramfs");
        path
    }

    fn qemu(&self, dir: &Path, sandbox_id: &str, script: &str, shared: bool) -> Command {
        let initrd = self.initramfs(dir, script);
        let share = if shared { "on" } else { "off" };
        let mut cmd = Command::new(&self.parts.qemu);
        cmd.args(["-accel", "tcg", "-m", &format!("{GUEST_MIB}M"), "-nographic", "-nodefaults", "-no-reboot"])
            .args(["-name", &format!("sandbox-{sandbox_id}")])
            .args(["-object", &format!("memory-backend-memfd,id=mem,size={GUEST_MIB}M,share={share}")])
            .args(["-machine", "q35,memory-backend=mem", "-serial", "stdio"])
            .arg("-kernel")
            .arg(&self.parts.kernel)
            .arg("-initrd")
            .arg(&initrd)
            .args(["-append", &self.cmdline()]);
        cmd
    }

    /// Run `script` in a fresh guest and return its exit code and output (what the probe wrote
    /// to its stdout; the guest-kernel probe tees its result line there).
    pub fn run_once(&self, script: &str) -> (i32, String) {
        let dir = tempfile::Builder::new().prefix("vm-").tempdir_in(self.work.path()).expect("vm dir");
        let shared = !matches!(self.vmm, Vmm::Qemu { shared: false });
        boot(self.qemu(dir.path(), "probe", script, shared), Duration::from_secs(120))
    }

    /// Run a workload probe pod's `script` (with its `env`) in a fresh guest whose container
    /// root is the workload probe image and whose emptyDir `volume` is mounted at `mount`, as
    /// `class`'s `emptydir_mode` gives it; its exit code and output.
    pub fn run_workload(
        &self,
        class: &str,
        script: &str,
        env: &[(String, String)],
        volume: &str,
        mount: &str,
    ) -> (i32, String) {
        let dir = tempfile::Builder::new().prefix("wl-").tempdir_in(self.work.path()).expect("vm dir");
        let mode = self.emptydir(class);
        let vars = env.iter().fold(String::new(), |mut out, (k, v)| {
            use std::fmt::Write;
            // Writing to a String cannot fail.
            let _ = writeln!(out, "export {k}='{}'", v.replace('\'', "'\\''"));
            out
        });
        let initrd = self.workload_initramfs(dir.path(), mode, volume, mount, script, &vars);
        let image = (self.parts.workload_image)();
        let mut cmd = Command::new(&self.parts.qemu);
        cmd.args([
            "-accel",
            "tcg",
            "-smp",
            "2",
            "-m",
            &format!("{WORKLOAD_MIB}M"),
            "-nographic",
            "-nodefaults",
            "-no-reboot",
        ])
        .args(["-name", "sandbox-workload"])
        .args(["-object", &format!("memory-backend-memfd,id=mem,size={WORKLOAD_MIB}M,share=on")])
        .args(["-machine", "q35,memory-backend=mem", "-serial", "stdio"])
        .arg("-kernel")
        .arg(&self.parts.kernel)
        .arg("-initrd")
        .arg(&initrd)
        .args(["-append", &self.cmdline()])
        .arg("-drive")
        .arg(format!("file={},if=none,id=root,format=raw,snapshot=on", image.display()))
        .args(["-device", "virtio-blk-pci,drive=root"]);
        let mut virtiofsd = None;
        match mode {
            EmptyDir::BlockPlain => {
                // The sparse disk.img Kata makes in the emptyDir's directory, formatted ext4.
                let disk = dir.path().join("disk.img");
                std::fs::File::create(&disk).and_then(|f| f.set_len(4 << 30)).expect("disk.img");
                let out = Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&disk).output().expect("mkfs.ext4");
                assert!(out.status.success(), "mkfs.ext4: {}", String::from_utf8_lossy(&out.stderr));
                cmd.arg("-drive").arg(format!("file={},if=none,id=vol,format=raw", disk.display()));
                cmd.args(["-device", "virtio-blk-pci,drive=vol"]);
            }
            EmptyDir::SharedFs => {
                let share = dir.path().join("share");
                let socket = dir.path().join("vfs.sock");
                std::fs::create_dir(&share).expect("share");
                let child = Command::new(&self.parts.virtiofsd)
                    .arg(format!("--socket-path={}", socket.display()))
                    .arg("-o")
                    .arg(format!("source={}", share.display()))
                    .args(["-o", "cache=auto"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start virtiofsd");
                let start = Instant::now();
                while !socket.exists() && start.elapsed() < Duration::from_secs(10) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                virtiofsd = Some(ChildGuard(child));
                cmd.arg("-chardev").arg(format!("socket,id=vfs,path={}", socket.display()));
                cmd.args(["-device", &format!("vhost-user-fs-pci,chardev=vfs,tag={volume}")]);
            }
        }
        let out = boot(cmd, Duration::from_secs(300));
        drop(virtiofsd);
        out
    }

    /// The initramfs of a workload guest: busybox, the modules, an `/init` that mounts the probe
    /// image's disk as the container's root with the emptyDir at `mount` (`/dev/vdb` for
    /// `block-plain`, the virtio-fs tag `volume` for `shared-fs`) and runs the probe with its
    /// environment `vars` there, printing its output between markers.
    fn workload_initramfs(
        &self,
        dir: &Path,
        mode: EmptyDir,
        volume: &str,
        mount: &str,
        script: &str,
        vars: &str,
    ) -> PathBuf {
        let attach = match mode {
            EmptyDir::BlockPlain => "/dev/vdb",
            EmptyDir::SharedFs => volume,
        };
        let fstype = if mode == EmptyDir::BlockPlain { "ext4" } else { "virtiofs" };
        let init = format!(
            "#!/bin/busybox sh\n/bin/busybox --install -s /bin\n\
             mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev\n\
             for m in {modules}; do insmod /mods/$m.ko; done\n\
             mount /dev/vda /root\n\
             mount -t proc proc /root/proc; mount -t sysfs sys /root/sys; mount -t tmpfs dev /root/dev\n\
             for n in 'null 1 3' 'zero 1 5' 'full 1 7' 'random 1 8' 'urandom 1 9' 'tty 5 0'; do set -- $n; mknod -m 666 /root/dev/$1 c $2 $3; done\n\
             : > /root/dev/termination-log; mount -t tmpfs tmp /root/tmp; mount -t tmpfs run /root/run\n\
             mkdir -p /root{mount}; mount -t {fstype} {attach} /root{mount}\n\
             cp /probe.sh /probe.env /root/tmp/\n\
             exec switch_root /root /bin/sh -c 'mkdir -p /dev/pts /dev/shm; mount -t devpts devpts /dev/pts; mount -t tmpfs shm /dev/shm; \
             mount -t cgroup2 cgroup2 /sys/fs/cgroup; . /tmp/probe.env; sh /tmp/probe.sh > /tmp/out 2>&1; code=$?; \
             echo {BEGIN}; cat /tmp/out; echo \"{END} $code\"; poweroff -f'\n",
            modules = WORKLOAD_MODULES.join(" "),
        );
        let mut cpio = Cpio::default();
        for d in ["bin", "proc", "sys", "dev", "root", "mods"] {
            cpio.dir(d);
        }
        cpio.file("bin/busybox", 0o755, &std::fs::read(&self.parts.busybox).expect("busybox"));
        for m in WORKLOAD_MODULES {
            let ko =
                find_module(&self.parts.modules, m).unwrap_or_else(|| panic!("module {m} in the guest kernel package"));
            cpio.file(&format!("mods/{m}.ko"), 0o644, &std::fs::read(ko).expect("module"));
        }
        cpio.file("init", 0o755, init.as_bytes());
        cpio.file("probe.sh", 0o755, script.as_bytes());
        cpio.file("probe.env", 0o644, vars.as_bytes());
        let initrd = dir.join("initramfs.cpio");
        std::fs::write(&initrd, cpio.finish()).expect("initramfs");
        initrd
    }

    /// Start the sandbox of pod `uid` with one container, as the runtime would: its bundle
    /// `config.json` naming the sandbox, its sockets in the run directory, and its VMM running.
    /// Returns the container id.
    pub fn start(&self, uid: &str) -> String {
        let sandbox_id = hex_id(&format!("sandbox-{uid}"));
        let container_id = hex_id(&format!("container-{uid}"));
        let sandbox = self.run_dir.join(&sandbox_id);
        let bundle = self.task_dir.join(&container_id);
        std::fs::create_dir_all(&sandbox).expect("sandbox dir");
        std::fs::create_dir_all(&bundle).expect("bundle dir");
        let config = serde_json::json!({"ociVersion": "1.2.0", "annotations": {
            "io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.sandbox-id": sandbox_id}});
        std::fs::write(bundle.join("config.json"), config.to_string()).expect("config.json");
        let child = match self.vmm {
            Vmm::Qemu { shared } => {
                let qmp = format!("unix:{},server=on,wait=off", sandbox.join("qmp.sock").display());
                let mut cmd = self.qemu(&sandbox, &sandbox_id, "sleep 3600", shared);
                cmd.args(["-qmp", &qmp]);
                cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start qemu-system-x86_64")
            }
            Vmm::CloudHypervisor => {
                let api = sandbox.join(match self.runtime {
                    Runtime::Go => "clh-api.sock",
                    Runtime::Rust => "ch-api.sock",
                });
                let mut cmd = Command::new(&self.parts.python);
                // Its command line, as CH's: the binary and its API socket.
                std::os::unix::process::CommandExt::arg0(&mut cmd, "cloud-hypervisor");
                cmd.arg(&self.parts.cloud_hypervisor).arg("--api-socket").arg(&api);
                cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start the played Cloud Hypervisor")
            }
        };
        // The VMM's socket, once it listens.
        let start = Instant::now();
        while !sandbox_sockets(&sandbox) && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.vms.lock().unwrap().insert(uid.to_owned(), Vm { child, sandbox, bundle });
        container_id
    }

    /// Stop every sandbox whose pod is not in `live`.
    pub fn stop_others(&self, live: &[String]) {
        let mut vms = self.vms.lock().unwrap();
        let gone: Vec<String> = vms.keys().filter(|k| !live.contains(k)).cloned().collect();
        let leave = *self.leave.lock().unwrap();
        let mut left = self.left.lock().unwrap();
        for uid in gone {
            if let Some(mut vm) = vms.remove(&uid) {
                left.sandboxes.push((vm.child.id(), vm.sandbox.clone()));
                // Stopping a sandbox whose VMM may have exited; its directories may be gone with it.
                if leave == Leave::Vmm {
                    left.running.push(vm.child);
                } else {
                    let _ = vm.child.kill();
                    let _ = vm.child.wait();
                }
                if leave != Leave::RunDir {
                    let _ = std::fs::remove_dir_all(&vm.sandbox);
                }
                let _ = std::fs::remove_dir_all(&vm.bundle);
            }
        }
    }
}

impl std::fmt::Debug for Shim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shim").field("vmm", &self.vmm).field("runtime", &self.runtime).finish_non_exhaustive()
    }
}

impl Drop for Shim {
    fn drop(&mut self) {
        self.leave(Leave::Nothing);
        self.stop_others(&[]);
        // The VMMs a test had it leave running stop with the shim.
        for mut child in std::mem::take(&mut self.left.lock().unwrap().running) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Boot a guest and wait (at most `limit`) for it to power off; the probe's exit code and
/// output, between the init's markers.
fn boot(mut cmd: Command, limit: Duration) -> (i32, String) {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start qemu-system-x86_64");
    let start = Instant::now();
    let mut stdout = child.stdout.take().expect("qemu stdout");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        // What QEMU printed before a read error is the guest's output; a missing marker then fails the probe.
        let _ = stdout.read_to_string(&mut s);
        s
    });
    while child.try_wait().ok().flatten().is_none() && start.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(100));
    }
    // The guest may have exited by itself: kill fails then, and wait reaps it either way.
    let _ = child.kill();
    let _ = child.wait();
    let out = reader.join().unwrap_or_default();
    let body = out.split(BEGIN).nth(1).unwrap_or_default();
    let (output, rest) = body.split_once(END).unwrap_or((body, " 1"));
    let code = rest.split_whitespace().next().and_then(|c| c.parse().ok()).unwrap_or(1);
    (code, output.replace('\r', "").trim().to_owned())
}

/// A kernel module's file (`<name>.ko`) under the kernel package's modules directory.
fn find_module(dir: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_module(&path, name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n.to_string_lossy() == format!("{name}.ko")) {
            return Some(path);
        }
    }
    None
}

/// A helper process stopped with the guest.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        // Killing a helper that may have exited with the guest: wait reaps it either way.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sandbox_sockets(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .is_ok_and(|mut d| d.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".sock"))))
}

/// A 64-hex-digit id, as containerd's (derived from `seed`: stable for a pod).
fn hex_id(seed: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, seed.as_bytes());
    d.as_ref().iter().fold(String::new(), |mut s, b| {
        use std::fmt::Write;
        // Writing to a String cannot fail.
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A `newc` cpio archive (what the kernel unpacks as an initramfs).
#[derive(Default)]
struct Cpio {
    out: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.ino += 1;
        let fields = [
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            u32::try_from(data.len()).expect("small file"),
            0,
            0,
            0,
            0,
            u32::try_from(name.len() + 1).expect("short name"),
            0,
        ];
        let header = fields.iter().fold(String::from("070701"), |mut h, f| {
            use std::fmt::Write;
            // Writing to a String cannot fail.
            let _ = write!(h, "{f:08X}");
            h
        });
        self.out.extend(header.as_bytes());
        self.out.extend(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    fn dir(&mut self, name: &str) {
        self.entry(name, 0o040_755, &[]);
    }

    fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100_000 | perm, data);
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[]);
        self.out
    }
}
