//! `kata.host-kvm`: the KVM of each Kata node, read by a privileged host probe.

use futures::future::BoxFuture;
use serde_json::Value;

use super::{if_kata, kata_diagnosis, kata_shim};
use crate::cluster::operation::Operation;
use crate::components::kata::shim::Shim;
use crate::profile::Profile;
use crate::verify::checks::list;
use crate::verify::checks::nodes::{kata_nodes, node};
use crate::verify::probe::{self, ProbeEnd};
use crate::verify::{Check, Ctx, Reach, Verdict, scripts};

pub(in crate::verify::checks) struct HostKvm;

impl Check for HostKvm {
    fn ids(&self) -> Vec<String> {
        vec!["kata.host-kvm".into()]
    }

    /// Listing nodes, and a probe pod per Kata node.
    /// Its host probe (or, for a build pool, its privileged probe) uses the node.
    fn uses_the_node(&self, _: &Profile) -> bool {
        true
    }

    fn images(&self, profile: &Profile) -> Vec<String> {
        vec![profile.verify.host_probe_image.clone()]
    }

    fn operations(&self, profile: &Profile, _: &Reach) -> Vec<Operation> {
        if_kata(profile, || vec![Operation::Probe(None), Operation::List(node(), None)])
    }

    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(async move {
            if ctx.profile.sections.pools.kata_classes().is_empty() {
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
                (node.clone(), probe::run_pod(&ctx.cluster, &pod, ctx.run.wait_limit()).await)
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
        } else if let Some(e) = r["error"].as_str() {
            self.problems.push(format!("{node}: /dev/kvm does not answer: {e} (no KVM behind the device)"));
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
            let diagnosis =
                self.problems.iter().chain(&self.unknown).chain(&self.stuck).cloned().collect::<Vec<_>>().join("; ");
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
