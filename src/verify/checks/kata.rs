//! `kata.guest-kernel`, `kata.host-kvm`, `kata.vmm-shared-memory`: probes inside a Kata VM and on
//! the Kata nodes themselves.

use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use super::list;
use super::nodes::{kata_nodes, node};
use crate::cluster::need::Need;
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

/// Map what a stuck Kata pod says to a diagnosis and fix.
fn kata_diagnosis(stuck: &str) -> (String, Option<&'static str>) {
    let table: &[(&str, &str, &str)] = &[
        (
            "no runtime for",
            "containerd has no Kata runtime configured on that node",
            "check that the kata-deploy drop-in is imported and containerd was restarted",
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
        (
            "API socket connect timed out",
            "Cloud Hypervisor died at start (no /dev/kvm, bad binary or config)",
            "run the host KVM check and read the shim logs",
        ),
        (
            "DeadlineExceeded",
            "the VM did not boot in time (common with nested virtualisation or slow hosts)",
            "check the node's virtualisation; raise probe deadlines",
        ),
    ];
    for (needle, diagnosis, fix) in table {
        if stuck.contains(needle) {
            return (format!("{diagnosis} ({stuck})"), Some(fix));
        }
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
                    let evidence = format!(
                        "guest {guest} on node {node} (host {host}), cmdline marker {}, overhead {}",
                        r["cmdline_marker"],
                        if overhead { "injected" } else { "missing" }
                    );
                    if guest.is_empty() || guest == host {
                        Verdict::fail(evidence, "the pod is not running in a Kata VM: its kernel is the host's")
                            .with_fix("check the RuntimeClass handler and the containerd Kata drop-in on the node")
                    } else if r["cmdline_marker"] != Value::Bool(true) {
                        Verdict::fail(
                            evidence,
                            "the kernel command line lacks systemd.unit=kata-containers.target: not a Kata guest",
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
            let runs = kata.iter().enumerate().map(|(i, node)| async move {
                let spec = scripts::host_kvm(&ctx.run, node, &ctx.profile.verify.host_probe_image);
                let pod = probe::pod(&ctx.run, &format!("host-kvm-{i}"), "host-kvm", &spec);
                (node.clone(), probe::run_pod(&ctx.cluster, &pod, probe_timeout(ctx)).await)
            });
            let mut ok = Vec::new();
            let mut problems = Vec::new();
            // Probes that never reported: nothing is known about KVM there.
            let mut stuck = Vec::new();
            let mut stuck_fix = None;
            for (node, end) in futures::future::join_all(runs).await {
                match end {
                    Err(e) => return vec![Verdict::error(format!("host probe on {node}"), e.to_string())],
                    Ok(ProbeEnd::Stuck { diagnosis }) => {
                        let (diag, fix) = kata_diagnosis(&diagnosis);
                        stuck.push(format!("{node}: the host probe did not finish: {diag}"));
                        stuck_fix = stuck_fix.or(fix);
                    }
                    Ok(ProbeEnd::Terminated { message, .. }) => match probe::json_line(&message) {
                        None => problems.push(format!("{node}: no result ({message})")),
                        Some(r) if r["char_device"] != true => {
                            problems.push(format!("{node}: /dev/kvm is not a character device ({})", r["error"]));
                        }
                        Some(r) if r["api_version"] != 12 => {
                            problems.push(format!("{node}: KVM API version is {} (expected 12)", r["api_version"]));
                        }
                        Some(r) if r["create_vm"] == false => {
                            problems.push(format!("{node}: KVM_CREATE_VM failed: {}", r["create_vm_error"]));
                        }
                        Some(r) => ok.push(format!(
                            "{node}: /dev/kvm API 12{}",
                            if r["host_is_vm"] == true { " (host is a VM: nested virtualisation)" } else { "" }
                        )),
                    },
                }
            }
            vec![if !problems.is_empty() {
                let diagnosis = problems.iter().chain(&stuck).cloned().collect::<Vec<_>>().join("; ");
                Verdict::fail(ok.join("; "), diagnosis)
                    .with_fix("enable VT-x/AMD-V or nested virtualisation on the Kata nodes")
            } else if !stuck.is_empty() {
                let v = Verdict::fail(
                    format!("the host probe did not finish on {} of {} Kata node(s)", stuck.len(), kata.len()),
                    stuck.join("; "),
                );
                match stuck_fix {
                    Some(f) => v.with_fix(f),
                    None => v,
                }
            } else {
                Verdict::pass(ok.join("; "))
            }]
        })
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
            let Some(class) = ctx.profile.pools.kata_classes().into_iter().next() else {
                return vec![Verdict::skip("no Kata pool in the profile")];
            };
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
            let spec =
                scripts::vm_info(&ctx.run, &node, &v.host_probe_image, &cid, &v.containerd_task_dir, &v.kata_run_dir);
            let probe_pod = probe::pod(&ctx.run, "vm-info", "vm-info", &spec);
            let end = match probe::run_pod(&ctx.cluster, &probe_pod, probe_timeout(ctx)).await {
                Ok(e) => e,
                Err(e) => return vec![Verdict::error("creating the host probe", e.to_string())],
            };
            vec![match end {
                ProbeEnd::Stuck { diagnosis } => stuck_verdict("the vm.info host probe", &diagnosis),
                ProbeEnd::Terminated { message, .. } => match probe::json_line(&message) {
                    None => Verdict::error("no result line", message),
                    Some(r) if !r["error"].is_null() => {
                        let err = r["error"].as_str().unwrap_or_default().to_owned();
                        let why = if err.contains("missing") {
                            format!(
                                "{err}: not runtime-rs Cloud Hypervisor (the Go runtime uses /run/vc/vm/<id>/clh-api.sock) or the VM is gone"
                            )
                        } else if err.contains("shared memory or huge pages") {
                            "virtio-fs without shared memory (CH refuses vhost-user devices)".to_owned()
                        } else {
                            err
                        };
                        Verdict::fail(format!("sandbox {} on {node}", r["sandbox_id"]), why)
                    }
                    Some(r) => {
                        let fs: Vec<&str> =
                            r["fs_tags"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
                        let evidence = format!(
                            "vm.info state {}, memory.shared {}, hugepages {}, size {}, fs {}",
                            r["state"],
                            r["shared"],
                            r["hugepages"],
                            r["size"],
                            fs.join(",")
                        );
                        let shared = r["shared"] == true || r["hugepages"] == true;
                        if r["state"] != "Running" {
                            Verdict::fail(evidence, "the VM is not Running")
                        } else if !shared {
                            Verdict::fail(
                                evidence,
                                "virtio-fs requires shared memory; check shared_fs / enable_hugepages / drop-ins",
                            )
                        } else if !fs.contains(&"kataShared") {
                            Verdict::fail(evidence, "no kataShared virtio-fs device")
                        } else {
                            Verdict::pass(evidence)
                        }
                    }
                },
            }]
        })
    }
}
