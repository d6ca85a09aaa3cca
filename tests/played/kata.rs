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
//! On a sandbox's stop it kills the VMM (QEMU exits) and removes the sandbox's directory and
//! bundle, as the runtime does (`sandbox-work.md` §5.2); a test can make it leave the VMM running
//! or the directory behind ([`Leave`]), the leaks `sandbox-work.md` §5.3 records.
//!
//! **What it cannot show**: the real shim (its timeouts, its errors, virtio-fs and vsock to an
//! agent: the guest runs the probe from its initramfs, not through a kata-agent), a VM under
//! KVM, Cloud Hypervisor itself, Dragonball and Firecracker.

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
}

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
        let mut child = self
            .qemu(dir.path(), "probe", script, shared)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start qemu-system-x86_64");
        let mut out = String::new();
        let start = Instant::now();
        let mut stdout = child.stdout.take().expect("qemu stdout");
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            // What QEMU printed before a read error is the guest's output; a missing marker then fails the probe.
            let _ = stdout.read_to_string(&mut s);
            s
        });
        while child.try_wait().ok().flatten().is_none() && start.elapsed() < Duration::from_secs(120) {
            std::thread::sleep(Duration::from_millis(100));
        }
        // The guest may have exited by itself: kill fails then, and wait reaps it either way.
        let _ = child.kill();
        let _ = child.wait();
        out.push_str(&reader.join().unwrap_or_default());
        let body = out.split(BEGIN).nth(1).unwrap_or_default();
        let (output, rest) = body.split_once(END).unwrap_or((body, " 1"));
        let code = rest.split_whitespace().next().and_then(|c| c.parse().ok()).unwrap_or(1);
        (code, output.replace('\r', "").trim().to_owned())
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
