//! `kata.guest-kernel`, `kata.host-kvm`, `kata.vmm-shared-memory`: probes inside a Kata VM and on
//! the Kata nodes themselves.

use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use super::list;
use super::nodes::{kata_nodes, node};
use crate::cluster::need::Need;
use crate::components::kata::shim::{self, Shim, Vmm};
use crate::profile::Profile;
use crate::verify::probe::{self, ProbeEnd};
use crate::verify::session::Settings;
use crate::verify::{Check, Ctx, Verdict, scripts};

/// What a Kata check needs when the profile has a Kata pool (else it skips: nothing).
fn if_kata(profile: &Profile, needs: impl FnOnce() -> Vec<Need>) -> Vec<Need> {
    if profile.pools.kata_classes().is_empty() { Vec::new() } else { needs() }
}

fn probe_timeout(ctx: &Ctx) -> Duration {
    Duration::from_secs(u64::try_from(ctx.run.deadline_seconds).unwrap_or(180) + 10)
}

/// Map what a stuck Kata pod says (its events first: see [`probe::diagnose`]) to a diagnosis and
/// fix. The messages are those seen from containerd, the kubelet and the Kata shim on real nodes.
fn kata_diagnosis(stuck: &str) -> (String, Option<&'static str>) {
    let table: &[(&str, &str, &str)] = &[
        (
            "no runtime for",
            "containerd has no Kata runtime configured on that node",
            "check that the kata-deploy drop-in is imported and containerd was restarted",
        ),
        (
            "binary not installed",
            "the Kata shim binary is not installed on that node (containerd finds no containerd-shim-kata-*-v2)",
            "let the kata-deploy install finish on that node, or name the RuntimeClass of a shim it installed",
        ),
        (
            "timed out connecting to hybrid vsocket",
            "the VM was started but its agent never answered over the hybrid vsock: the VMM died or the guest did not boot",
            "read the shim's and the VMM's logs on the node; check the guest kernel and image kata-deploy installed",
        ),
        ("RuntimeClass", "the RuntimeClass does not exist", "enable runtimeClasses in the kata layer"),
        (
            "didn't match Pod's node affinity/selector",
            "no node carries the RuntimeClass nodeSelector labels",
            "label Kata nodes (kata-deploy does it when the install finishes)",
        ),
        (
            "Insufficient",
            "the VM overhead plus the requests do not fit on any Kata node",
            "lower the probe or pool requests, or add capacity",
        ),
        (
            "hostPath type check failed",
            "/dev/kvm is not a character device on the node: no KVM",
            "enable VT-x/AMD-V (or nested virtualisation) for the node",
        ),
    ];
    for (needle, diagnosis, fix) in table {
        if stuck.contains(needle) {
            return (format!("{diagnosis} ({stuck})"), Some(fix));
        }
    }
    if stuck.contains("ContainerCreating") && !stuck.contains("event ") {
        return (
            format!(
                "no sandbox and no event: the shim may still be dialing the agent of a VM that died (it fails the sandbox only after its dial_timeout) ({stuck})"
            ),
            Some("read the shim's and the VMM's logs on the node"),
        );
    }
    (stuck.to_owned(), None)
}

fn stuck_verdict(what: &str, diagnosis: &str) -> Verdict {
    let (diag, fix) = kata_diagnosis(diagnosis);
    let v = Verdict::fail(format!("{what} did not finish"), diag);
    match fix {
        Some(f) => v.with_fix(f),
        None => v,
    }
}

async fn node_kernel(ctx: &Ctx, node: &str) -> Option<String> {
    let n = ctx.cluster.get(&self::node().object(None, node)).await.ok()??;
    n["status"]["nodeInfo"]["kernelVersion"].as_str().map(str::to_owned)
}

pub(super) struct GuestKernel;

impl Check for GuestKernel {
    fn ids(&self) -> Vec<String> {
        vec!["kata.guest-kernel".into()]
    }

    /// A probe pod, and reading the node it ran on (named only then).
    fn needs(&self, profile: &Profile, _: &Settings) -> Vec<Need> {
        if_kata(profile, || {
            let mut needs = probe::pod_needs(None);
            needs.push(Need::any("get", &node(), None));
            needs
        })
    }

    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(async move {
            let Some(class) = ctx.profile.pools.kata_classes().into_iter().next() else {
                return vec![Verdict::skip("no Kata pool in the profile")];
            };
            let spec = scripts::guest_kernel(&ctx.run, &ctx.profile.verify.probe_image, &class);
            let pod = probe::pod(&ctx.run, "kata-guest-kernel", "guest-kernel", &spec);
            let end = match probe::run_pod(&ctx.cluster, &pod, probe_timeout(ctx)).await {
                Ok(e) => e,
                Err(e) => return vec![Verdict::error("creating the probe pod", e.to_string())],
            };
            vec![match end {
                ProbeEnd::Stuck { diagnosis } => stuck_verdict("the Kata probe pod", &diagnosis),
                ProbeEnd::Terminated { exit_code, message, node, pod } => {
                    let Some(r) = probe::json_line(&message).filter(|_| exit_code == 0) else {
                        return vec![Verdict::error(
                            format!("probe exited {exit_code}"),
                            format!("no result line: {message}"),
                        )];
                    };
                    let guest = r["kernel"].as_str().unwrap_or_default().to_owned();
                    let node = node.unwrap_or_default();
                    let host = node_kernel(ctx, &node).await.unwrap_or_default();
                    let overhead = pod.spec.as_ref().and_then(|s| s.overhead.clone()).is_some();
                    let agent = r["agent_params"].as_str().unwrap_or_default().trim().to_owned();
                    let evidence = format!(
                        "guest {guest} on node {node} (host {host}), hypervisor flag {}, agent parameters {}, systemd marker {}, overhead {}",
                        r["hypervisor"],
                        if agent.is_empty() { "none".to_owned() } else { format!("[{agent}]") },
                        r["cmdline_marker"],
                        if overhead { "injected" } else { "missing" }
                    );
                    // A guest of its own: another kernel than the node's, on a virtual CPU (the
                    // hypervisor flag) or booted by the Kata runtime (its agent.* parameters).
                    // The systemd marker is not required: the Go runtime adds it only to
                    // image-based guests.
                    if guest.is_empty() || guest == host {
                        Verdict::fail(evidence, "the pod is not running in a Kata VM: its kernel is the host's")
                            .with_fix("check the RuntimeClass handler and the containerd Kata drop-in on the node")
                    } else if r["hypervisor"] != Value::Bool(true) && agent.is_empty() {
                        Verdict::fail(
                            evidence,
                            "another kernel, but neither a virtual CPU (no hypervisor flag) nor the Kata agent's kernel parameters: not a Kata guest",
                        )
                    } else if !overhead {
                        Verdict::fail(evidence, "pod.spec.overhead was not injected: the RuntimeClass has no overhead")
                    } else {
                        Verdict::pass(evidence)
                    }
                }
            }]
        })
    }
}

/// The shim behind the Kata pools' RuntimeClass (`verify.kataShim`, else from the class name
/// `kata-<shim>`), or why that cannot be told.
fn kata_shim(profile: &Profile) -> Result<(String, &'static Shim), String> {
    let class = profile.pools.kata_classes().into_iter().next().unwrap_or_default();
    let shim = match &profile.verify.kata_shim {
        Some(name) => shim::by_name(name),
        None => shim::of_class(&class),
    };
    shim.map(|s| (class.clone(), s)).ok_or_else(|| {
        format!("cannot tell which Kata shim runs RuntimeClass {class} (not kata-<shim>): set verify.kataShim")
    })
}

pub(super) struct HostKvm;

impl Check for HostKvm {
    fn ids(&self) -> Vec<String> {
        vec!["kata.host-kvm".into()]
    }

    /// Listing nodes, and a probe pod per Kata node.
    fn needs(&self, profile: &Profile, _: &Settings) -> Vec<Need> {
        if_kata(profile, || {
            let mut needs = probe::pod_needs(None);
            needs.push(Need::any("list", &node(), None));
            needs
        })
    }

    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(async move {
            if ctx.profile.pools.kata_classes().is_empty() {
                return vec![Verdict::skip("no Kata pool in the profile")];
            }
            let nodes = match list(&ctx.cluster, &node(), None, None).await {
                Ok(n) => n,
                Err(e) => return vec![Verdict::error("listing nodes", e.to_string())],
            };
            let kata: Vec<String> =
                kata_nodes(&nodes).iter().filter_map(|n| n["metadata"]["name"].as_str().map(str::to_owned)).collect();
            if kata.is_empty() {
                return vec![Verdict::fail(
                    "no Kata node",
                    "no node carries katacontainers.io/kata-runtime: nothing to check",
                )];
            }
            let shim = kata_shim(&ctx.profile).ok().map(|(_, s)| s);
            if let Some(why) = shim.and_then(Shim::host_kvm_not_applicable) {
                return vec![Verdict::skip(format!("not applicable: {why}"))];
            }
            let runs = kata.iter().enumerate().map(|(i, node)| async move {
                let spec = scripts::host_kvm(&ctx.run, node, &ctx.profile.verify.host_probe_image);
                let pod = probe::pod(&ctx.run, &format!("host-kvm-{i}"), "host-kvm", &spec);
                (node.clone(), probe::run_pod(&ctx.cluster, &pod, probe_timeout(ctx)).await)
            });
            let mut report = KvmReport::default();
            for (node, end) in futures::future::join_all(runs).await {
                match end {
                    Err(e) => return vec![Verdict::error(format!("host probe on {node}"), e.to_string())],
                    Ok(ProbeEnd::Stuck { diagnosis }) => report.stuck(&node, &diagnosis),
                    Ok(ProbeEnd::Terminated { message, .. }) => match probe::json_line(&message) {
                        None => report.problems.push(format!("{node}: no result ({message})")),
                        Some(r) => report.node(&node, &r, shim),
                    },
                }
            }
            vec![report.verdict(kata.len())]
        })
    }
}

/// What the host probes found, node by node.
#[derive(Default)]
struct KvmReport {
    ok: Vec<String>,
    /// KVM missing or unusable for Kata.
    problems: Vec<String>,
    /// No verdict: which KVM it is cannot be told.
    unknown: Vec<String>,
    /// Probes that never ran (nothing is known about KVM there).
    stuck: Vec<String>,
    stuck_fix: Option<&'static str>,
    pvm: bool,
}

impl KvmReport {
    fn stuck(&mut self, node: &str, diagnosis: &str) {
        if diagnosis.contains("hostPath type check failed") {
            let (diag, _) = kata_diagnosis(diagnosis);
            self.problems.push(format!("{node}: {diag}"));
        } else {
            let (diag, fix) = kata_diagnosis(diagnosis);
            self.stuck.push(format!("{node}: the host probe did not run: {diag}"));
            self.stuck_fix = self.stuck_fix.or(fix);
        }
    }

    fn node(&mut self, node: &str, r: &Value, shim: Option<&Shim>) {
        let module = r["module"].as_str();
        let nested = r["nested"].as_str().map_or("unknown".to_owned(), str::to_owned);
        if r["char_device"] != true {
            self.problems.push(format!("{node}: /dev/kvm is not a character device ({})", r["error"]));
        } else if r["api_version"] != 12 {
            self.problems.push(format!("{node}: KVM API version is {} (expected 12)", r["api_version"]));
        } else if r["create_vm"] == false {
            self.problems.push(format!("{node}: KVM_CREATE_VM failed: {}", r["create_vm_error"]));
        } else if module == Some("kvm_pvm") {
            self.pvm = true;
            self.problems.push(format!(
                "{node}: /dev/kvm is kvm_pvm (Pagetable-based VM, a KVM inside a VM): KVM_CREATE_VM works, but a stock guest kernel dies in KVM_RUN (emulation failures): Kata's guests need kvm_intel or kvm_amd (or a PVM guest kernel)"
            ));
        } else if module.is_none() {
            self.unknown.push(format!(
                "{node}: /dev/kvm answers (API 12, KVM_CREATE_VM works) but no kvm_intel, kvm_amd or kvm_pvm module backs it: which KVM this is cannot be told"
            ));
        } else if shim.is_some_and(Shim::needs_vhost_vsock) && r["vhost_vsock"] != true {
            self.problems.push(format!(
                "{node}: no /dev/vhost-vsock: QEMU Kata reaches its agent over vhost-vsock (load vhost_vsock; CONFIG_VHOST_VSOCK)"
            ));
        } else {
            self.ok.push(format!(
                "{node}: /dev/kvm API 12 by {} (nested {nested}){}{}",
                module.unwrap_or_default(),
                if r["vhost_vsock"] == true { ", /dev/vhost-vsock" } else { "" },
                if r["host_is_vm"] == true { "; the host is a VM" } else { "" }
            ));
        }
    }

    fn verdict(self, nodes: usize) -> Verdict {
        let evidence = self.ok.join("; ");
        if !self.problems.is_empty() {
            let diagnosis = self.problems.iter().chain(&self.unknown).chain(&self.stuck).cloned().collect::<Vec<_>>().join("; ");
            let fix = if self.pvm {
                "run Kata nodes with hardware virtualisation (VT-x/AMD-V, or nested virtualisation exposing kvm_intel/kvm_amd)"
            } else {
                "enable VT-x/AMD-V or nested virtualisation on the Kata nodes"
            };
            Verdict::fail(evidence, diagnosis).with_fix(fix)
        } else if !self.unknown.is_empty() {
            Verdict::error(evidence, self.unknown.join("; "))
        } else if !self.stuck.is_empty() {
            let v = Verdict::error(
                format!("the host probe did not run on {} of {nodes} Kata node(s)", self.stuck.len()),
                self.stuck.join("; "),
            );
            match self.stuck_fix {
                Some(f) => v.with_fix(f),
                None => v,
            }
        } else {
            Verdict::pass(evidence)
        }
    }
}

pub(super) struct VmmSharedMemory;

impl Check for VmmSharedMemory {
    fn ids(&self) -> Vec<String> {
        vec!["kata.vmm-shared-memory".into()]
    }

    /// A target pod and a host probe pod.
    fn needs(&self, profile: &Profile, _: &Settings) -> Vec<Need> {
        if_kata(profile, || probe::pod_needs(None))
    }

    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(async move {
            if ctx.profile.pools.kata_classes().is_empty() {
                return vec![Verdict::skip("no Kata pool in the profile")];
            }
            let (class, shim) = match kata_shim(&ctx.profile) {
                Ok(s) => s,
                Err(why) => return vec![Verdict::skip(why)],
            };
            if let Some(why) = shim.shared_memory_not_applicable() {
                return vec![Verdict::skip(format!("not applicable: {why}"))];
            }
            let v = &ctx.profile.verify;
            let target = probe::pod(
                &ctx.run,
                "kata-target",
                "kata-target",
                &scripts::kata_target(&ctx.run, &v.probe_image, &class),
            );
            if let Err(e) = probe::create_pod(&ctx.cluster, &target).await {
                return vec![Verdict::error("creating the Kata target pod", e.to_string())];
            }
            let pod =
                match probe::wait_running(&ctx.cluster, &ctx.run.namespace, "kata-target", probe_timeout(ctx)).await {
                    Err(e) => return vec![Verdict::error("reading the Kata target pod", e.to_string())],
                    Ok(Err(diagnosis)) => return vec![stuck_verdict("the Kata target pod", &diagnosis)],
                    Ok(Ok(pod)) => pod,
                };
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
            let cid = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.first())
                .and_then(|c| c.container_id.clone())
                .unwrap_or_default();
            let cid = cid.split_once("://").map_or(cid.as_str(), |(_, id)| id).to_owned();
            let run_dir = v.kata_run_dir.clone().unwrap_or_else(|| shim.run_dir().to_owned());
            let target = scripts::VmmTarget {
                container_id: &cid,
                task_dir: &v.containerd_task_dir,
                run_dir: &run_dir,
                vmm: match shim.vmm {
                    Vmm::Qemu => "qemu",
                    Vmm::CloudHypervisor => "clh",
                    _ => "dragonball",
                },
                api_socket: shim.api_socket(),
            };
            let spec = scripts::vmm_memory(&ctx.run, &node, &v.host_probe_image, &target);
            let probe_pod = probe::pod(&ctx.run, "vm-info", "vm-info", &spec);
            let end = match probe::run_pod(&ctx.cluster, &probe_pod, probe_timeout(ctx)).await {
                Ok(e) => e,
                Err(e) => return vec![Verdict::error("creating the host probe", e.to_string())],
            };
            vec![match end {
                ProbeEnd::Stuck { diagnosis } => stuck_verdict("the VMM memory host probe", &diagnosis),
                ProbeEnd::Terminated { message, .. } => match probe::json_line(&message) {
                    None => Verdict::error("no result line", message),
                    Some(r) => memory_verdict(&r, shim, &node),
                },
            }]
        })
    }
}

/// The verdict on what the VMM-memory probe read: the VMM's API (where it has one) must say
/// guest RAM is shared, and the VMM's own memory maps must show it mapped shared.
fn memory_verdict(r: &Value, shim: &Shim, node: &str) -> Verdict {
    let sid = r["sandbox_id"].as_str().unwrap_or("?");
    let at = format!("sandbox {sid} on {node} ({}, {})", shim.vmm, shim.name);
    if let Some(err) = r["error"].as_str() {
        let why = if err.contains("missing") {
            format!("{err}: the VM is gone, or the shim keeps its sockets elsewhere (set verify.kataRunDir)")
        } else if err.contains("shared memory or huge pages") {
            "virtio-fs without shared memory (Cloud Hypervisor refuses vhost-user devices)".to_owned()
        } else {
            err.to_owned()
        };
        return Verdict::fail(at, why);
    }
    let mib = |b: &Value| b.as_u64().map_or_else(|| "?".to_owned(), |b| format!("{} MiB", b / (1 << 20)));
    let (api_says, api_shared, api_size) = match shim.vmm {
        Vmm::CloudHypervisor => {
            let a = &r["api"];
            let fs: Vec<&str> = a["fs_tags"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            if a["state"] != "Running" {
                return Verdict::fail(format!("{at}: vm.info state {}", a["state"]), "the VM is not Running");
            }
            if !fs.contains(&"kataShared") {
                return Verdict::fail(format!("{at}: vm.info fs [{}]", fs.join(", ")), "no kataShared virtio-fs device");
            }
            let shared = a["shared"] == true || a["hugepages"] == true;
            let said = format!(
                "vm.info memory.shared {}, hugepages {}, size {}, fs kataShared",
                a["shared"],
                a["hugepages"],
                mib(&a["size"])
            );
            (Some(said), shared, a["size"].as_u64())
        }
        Vmm::Qemu => {
            let devs = r["api"]["memdevs"].as_array().cloned().unwrap_or_default();
            let said: Vec<String> = devs
                .iter()
                .map(|d| format!("{} {} {} share={}", d["id"].as_str().unwrap_or("?"), d["type"].as_str().unwrap_or("?"), mib(&d["size"]), d["share"]))
                .collect();
            let shared: Vec<&Value> = devs.iter().filter(|d| d["share"] == true).collect();
            let size = shared.iter().filter_map(|d| d["size"].as_u64()).sum::<u64>();
            (Some(format!("QMP query-memdev [{}]", said.join("; "))), !shared.is_empty(), Some(size))
        }
        _ => (None, true, None),
    };
    let maps = &r["maps_shared"];
    let pid = r["vmm_pid"].as_u64();
    let mapped = maps["size"].as_u64().unwrap_or(0);
    let maps_said = match pid {
        None => "no VMM process with the sandbox id in its command line".to_owned(),
        Some(pid) if maps.is_null() => format!("/proc/{pid}/maps: nothing mapped shared"),
        Some(pid) => format!("/proc/{pid}/maps: {} {} {}", mib(&maps["size"]), maps["perms"].as_str().unwrap_or(""), maps["name"].as_str().unwrap_or("")),
    };
    let evidence = format!("{at}: {}{maps_said}", api_says.as_ref().map(|a| format!("{a}; ")).unwrap_or_default());
    // Guest RAM is the VMM's largest mapping: at least half of it mapped shared (or 64 MiB when
    // the VMM has no API that says its size).
    let enough = api_size.filter(|s| *s > 0).map_or(64 << 20, |s| s / 2);
    if !api_shared {
        Verdict::fail(evidence, "guest RAM is not shared: virtio-fs requires shared memory (Cloud Hypervisor memory.shared, a QEMU memory backend with share=on)")
            .with_fix("check shared_fs, enable_hugepages and the drop-ins of the Kata configuration")
    } else if pid.is_none() {
        Verdict::fail(evidence, "the VMM process was not found on the node")
    } else if mapped < enough {
        Verdict::fail(evidence, "the VMM's guest RAM is mapped private, not shared")
            .with_fix("check shared_fs, enable_hugepages and the drop-ins of the Kata configuration")
    } else {
        Verdict::pass(evidence)
    }
}
