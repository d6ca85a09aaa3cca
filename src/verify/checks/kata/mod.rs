//! `kata.guest-kernel`, `kata.host-kvm`, `kata.vmm-shared-memory`: probes inside a Kata VM and on
//! the Kata nodes themselves; `kata.annotations`: the admission policy that keeps the sandbox
//! pods from reconfiguring their VM, and `kata.annotations.<class>`: the Kata configuration each
//! class's handler loads on the nodes enables no hypervisor annotation the profile does not allow. Which VMM a pool's shim runs decides what there is to read
//! ([`crate::components::kata::shim`]).

mod annotations;
mod config;
mod host_kvm;
mod vmm_memory;

pub(super) use annotations::Annotations;
pub(super) use config::Config as AnnotationsConfig;
pub(super) use host_kvm::HostKvm;
pub(super) use vmm_memory::VmmSharedMemory;

use futures::future::BoxFuture;
use serde_json::Value;

use super::nodes::node;
use crate::cluster::operation::{Objects, Operation};
use crate::components::kata::shim::{self, Shim};
use crate::profile::Profile;
use crate::verify::probe::{self, ProbeEnd};
use crate::verify::{Check, Ctx, Reach, Verdict, scripts};

/// What a Kata check does when the profile has a Kata pool (else it skips: nothing).
fn if_kata(profile: &Profile, operations: impl FnOnce() -> Vec<Operation>) -> Vec<Operation> {
    if profile.sections.pools.kata_classes().is_empty() { Vec::new() } else { operations() }
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

pub(super) fn stuck_verdict(what: &str, diagnosis: &str) -> Verdict {
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
    fn operations(&self, profile: &Profile, _: &Reach) -> Vec<Operation> {
        if_kata(profile, || vec![Operation::Probe(None), Operation::Get(Objects::Any(node(), None))])
    }

    fn images(&self, profile: &Profile) -> Vec<String> {
        vec![profile.verify.probe_image.clone()]
    }

    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(async move {
            let Some(class) = ctx.profile.sections.pools.kata_classes().into_iter().next() else {
                return vec![Verdict::skip("no Kata pool in the profile")];
            };
            let spec = scripts::guest_kernel(&ctx.run, &ctx.profile.verify.probe_image, &class);
            let pod = probe::pod(&ctx.run, "kata-guest-kernel", "guest-kernel", &spec);
            let end = match probe::run_pod(&ctx.cluster, &pod, ctx.run.wait_limit()).await {
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
    let class = profile.sections.pools.kata_classes().into_iter().next().unwrap_or_default();
    let shim = match &profile.verify.kata_shim {
        Some(name) => shim::by_name(name),
        None => shim::of_class(&class),
    };
    shim.map(|s| (class.clone(), s)).ok_or_else(|| {
        format!("cannot tell which Kata shim runs RuntimeClass {class} (not kata-<shim>): set verify.kataShim")
    })
}
