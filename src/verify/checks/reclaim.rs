//! `opensandbox.reclaim.<pool>`: after the Lifecycle check deletes its sandbox of a Kata pool,
//! nothing of the sandbox's VM is left on the node that ran it (`sandbox-work.md` §5): no
//! process names the sandbox id (the VMM, virtiofsd, the shim), its run directories are gone and
//! no backing file of its block emptyDirs remains. A host probe finds the sandbox id before the
//! delete (the CRI sandbox id, in the bundle `config.json` of the pod's container) and looks
//! again after it, for a bounded grace period; a leak is a FAIL naming the node, each PID and
//! each path.

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use crate::components::kata::shim::{self, Shim, Vmm};
use crate::components::pools::EffectivePool;
use crate::object::KnownKind;
use crate::profile::Profile;
use crate::verify::probe::{self, ProbeEnd};
use crate::verify::{Ctx, Verdict, scripts};

/// The longest the probe waits after the delete for the VM to go (the shim stops it when the
/// pod's sandbox is deleted, which the pool's controller does asynchronously).
const GRACE_SECONDS: u64 = 30;

/// The id of the reclaim check of `pool`.
pub(super) fn id(pool: &str) -> String {
    format!("opensandbox.reclaim.{pool}")
}

/// Whether `pool` has a reclaim check: a Kata pool (one with a runtime class).
pub(super) fn has_check(profile: &Profile, pool: &str) -> bool {
    effective(profile, pool, |p| p.runtime_class_name.is_some())
}

fn effective(profile: &Profile, pool: &str, f: impl Fn(&EffectivePool<'_>) -> bool) -> bool {
    profile.sections.pools.effective().iter().find(|p| p.pool.name == pool).is_some_and(f)
}

/// The shim of `pool` when there is something to reclaim on a node, else why not (a SKIP).
pub(super) fn shim_of(profile: &Profile, pool: &str) -> Result<&'static Shim, String> {
    let pools = profile.sections.pools.effective();
    let Some(p) = pools.iter().find(|p| p.pool.name == pool) else { return Err(format!("no pool {pool}")) };
    let class = p.runtime_class_name.clone().unwrap_or_default();
    if !p.deletes_released_pods() {
        return Err(format!(
            "pool {pool} keeps released pods (recycleStrategy is not Delete): its VM stays with the pod on purpose"
        ));
    }
    let shim = match &profile.verify.kata_shim {
        Some(name) => shim::by_name(name),
        None => shim::of_class(&class),
    }
    .ok_or_else(|| {
        format!("cannot tell which Kata shim runs RuntimeClass {class} (not kata-<shim>): set verify.kataShim")
    })?;
    if shim.vmm == Vmm::Remote {
        return Err("the VM runs outside the node (peer pods)".to_owned());
    }
    Ok(shim)
}

/// A sandbox found on its node before the delete.
pub(super) struct Found {
    shim: &'static Shim,
    node: String,
    pod: String,
    uid: String,
    sandbox_id: String,
    /// What the sandbox held on the node (the probe's `present`).
    present: Value,
}

impl Found {
    fn dirs(&self, ctx: &Ctx) -> Vec<String> {
        let run_dir = ctx.profile.verify.kata_run_dir.clone().unwrap_or_else(|| self.shim.run_dir().to_owned());
        self.shim.sandbox_dirs(&run_dir)
    }
}

/// The grace period: [`GRACE_SECONDS`], within two thirds of the probe's deadline.
fn grace(ctx: &Ctx) -> u64 {
    GRACE_SECONDS.min((ctx.run.deadline().as_secs() * 2 / 3).max(1))
}

async fn run_probe(
    ctx: &Ctx,
    name: &str,
    label: &str,
    node: &str,
    t: &scripts::ReclaimTarget<'_>,
) -> Result<Value, Verdict> {
    let spec = scripts::reclaim(&ctx.run, node, &ctx.profile.verify.host_probe_image, t);
    let pod = probe::pod(&ctx.run, name, label, &spec);
    match probe::run_pod(&ctx.cluster, &pod, ctx.run.wait_limit()).await {
        Err(e) => Err(Verdict::error("creating the reclaim host probe", e.to_string())),
        Ok(ProbeEnd::Stuck { diagnosis }) => {
            Err(Verdict::error(format!("the reclaim host probe on {node} did not finish"), diagnosis))
        }
        Ok(ProbeEnd::Terminated { message, .. }) => match probe::json_line(&message) {
            None => Err(Verdict::error("the reclaim host probe printed no result line", message)),
            Some(r) => match r["error"].as_str() {
                Some(e) => Err(Verdict::error(format!("the reclaim host probe on {node}"), e.to_owned())),
                None => Ok(r),
            },
        },
    }
}

/// Before the delete: the node, UID and sandbox id of the sandbox's pod `pod` of `pool`.
pub(super) async fn find(ctx: &Ctx, pool: &str, shim: &'static Shim, pod: &str) -> Result<Found, Verdict> {
    let ns = &ctx.profile.sections.opensandbox.namespaces.sandbox;
    let p: Pod = match ctx.cluster.get(&KnownKind::POD.object(Some(ns), pod)).await {
        Ok(Some(p)) => {
            serde_json::from_value(p).map_err(|e| Verdict::error(format!("reading Pod {ns}/{pod}"), e.to_string()))?
        }
        Ok(None) => return Err(Verdict::error(format!("Pod {ns}/{pod} of the sandbox"), "gone before the delete")),
        Err(e) => return Err(Verdict::error(format!("reading Pod {ns}/{pod}"), e.to_string())),
    };
    let (node, cid) = crate::verify::probe::node_and_container(&p);
    let uid = p.metadata.uid.clone().unwrap_or_default();
    if node.is_empty() || cid.is_empty() {
        return Err(Verdict::error(format!("Pod {ns}/{pod} of pool {pool}"), "no node or container id to look for"));
    }
    let mut found =
        Found { shim, node, pod: format!("{ns}/{pod}"), uid, sandbox_id: String::new(), present: Value::Null };
    let dirs = found.dirs(ctx);
    let target = scripts::ReclaimTarget {
        mode: "resolve",
        container_id: &cid,
        task_dir: &ctx.profile.verify.containerd_task_dir,
        sandbox_id: "",
        pod_uid: &found.uid,
        dirs: &dirs,
        kubelet_pods: shim::KUBELET_PODS,
        direct_volumes: shim::DIRECT_VOLUMES,
        grace_seconds: 0,
    };
    let r = run_probe(ctx, &format!("reclaim-find-{pool}"), "reclaim-find", &found.node, &target).await?;
    r["sandbox_id"].as_str().unwrap_or_default().clone_into(&mut found.sandbox_id);
    found.present = r["present"].clone();
    Ok(found)
}

/// After the delete: nothing of the sandbox is left on its node.
pub(super) async fn reclaimed(ctx: &Ctx, pool: &str, found: &Found) -> Verdict {
    let dirs = found.dirs(ctx);
    let target = scripts::ReclaimTarget {
        mode: "watch",
        container_id: "",
        task_dir: &ctx.profile.verify.containerd_task_dir,
        sandbox_id: &found.sandbox_id,
        pod_uid: &found.uid,
        dirs: &dirs,
        kubelet_pods: shim::KUBELET_PODS,
        direct_volumes: shim::DIRECT_VOLUMES,
        grace_seconds: grace(ctx),
    };
    match run_probe(ctx, &format!("reclaim-{pool}"), "reclaim", &found.node, &target).await {
        Err(v) => v,
        Ok(r) => verdict(found, &dirs, &r),
    }
}

fn processes(v: &Value) -> Vec<String> {
    v["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let cmd: String = p["cmdline"].as_str().unwrap_or_default().chars().take(240).collect();
            format!("PID {} ({cmd})", p["pid"])
        })
        .collect()
}

fn paths(v: &Value, key: &str) -> Vec<String> {
    v[key].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect()
}

/// The verdict on what the watch probe found left of `found` after the delete.
fn verdict(found: &Found, dirs: &[String], r: &Value) -> Verdict {
    let at = format!(
        "sandbox {} of pod {} on node {} ({}, {})",
        found.sandbox_id, found.pod, found.node, found.shim.vmm, found.shim.name
    );
    let before = {
        let mut seen = processes(&found.present);
        seen.extend(paths(&found.present, "dirs"));
        seen.extend(paths(&found.present, "files"));
        if seen.is_empty() { "nothing found".to_owned() } else { seen.join(", ") }
    };
    let left = &r["left"];
    let (procs, left_dirs, files) = (processes(left), paths(left, "dirs"), paths(left, "files"));
    let waited = r["waited_s"].as_f64().unwrap_or_default();
    if procs.is_empty() && left_dirs.is_empty() && files.is_empty() {
        return Verdict::pass(format!(
            "{at}: before the delete {before}; after it no process names the sandbox, none of {} and no backing file ({waited:.0}s)",
            dirs.iter().map(|d| format!("{d}/<sandbox id>")).collect::<Vec<_>>().join(", ")
        ));
    }
    let mut what = Vec::new();
    if !procs.is_empty() {
        what.push(format!("still running: {}", procs.join(", ")));
    }
    if !left_dirs.is_empty() {
        what.push(format!("run directories left: {}", left_dirs.join(", ")));
    }
    if !files.is_empty() {
        what.push(format!("backing files left: {}", files.join(", ")));
    }
    Verdict::fail(
        format!("{at}, {waited:.0}s after the delete: {}", what.join("; ")),
        format!(
            "the sandbox's VM was not reclaimed on node {}: a VMM left running keeps the guest's memory and CPU, and what is left on disk piles up with every sandbox",
            found.node
        ),
    )
    .with_fix(format!(
        "on node {}: read the Kata shim's and the VMM's logs, stop what still runs and remove what is left",
        found.node
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn found() -> Found {
        Found {
            shim: shim::by_name("qemu").unwrap(),
            node: "n1".into(),
            pod: "sbx/p-1".into(),
            uid: "u-1".into(),
            sandbox_id: "ab12".into(),
            present: json!({"processes": [{"pid": 7, "cmdline": "qemu-system-x86_64 -name sandbox-ab12"}],
                            "dirs": ["/run/vc/vm/ab12"], "files": []}),
        }
    }

    fn dirs() -> Vec<String> {
        found().shim.sandbox_dirs("/run/vc/vm")
    }

    #[test]
    fn nothing_left_passes_with_what_was_there() {
        let v =
            verdict(&found(), &dirs(), &json!({"left": {"processes": [], "dirs": [], "files": []}, "waited_s": 2.0}));
        assert_eq!(v.outcome, crate::verify::Outcome::Pass, "{v:?}");
        assert!(
            v.evidence.contains("before the delete PID 7 (qemu-system-x86_64 -name sandbox-ab12), /run/vc/vm/ab12"),
            "{v:?}"
        );
        assert!(v.evidence.contains("none of /run/vc/vm/<sandbox id>, /run/vc/sbs/<sandbox id>, "), "{v:?}");
    }

    #[test]
    fn every_leftover_is_named_with_the_node() {
        let r = json!({"left": {"processes": [{"pid": 4242, "cmdline": "qemu-system-x86_64 -name sandbox-ab12"}],
                                "dirs": ["/run/vc/vm/ab12"],
                                "files": ["/var/lib/kubelet/pods/u-1/volumes/kubernetes.io~empty-dir/d/disk.img"]},
                       "waited_s": 30.0});
        let v = verdict(&found(), &dirs(), &r);
        assert_eq!(v.outcome, crate::verify::Outcome::Fail, "{v:?}");
        let text = format!("{} {}", v.evidence, v.diagnosis.clone().unwrap_or_default());
        for part in
            ["node n1", "PID 4242", "/run/vc/vm/ab12", "u-1/volumes/kubernetes.io~empty-dir/d/disk.img", "30s after"]
        {
            assert!(text.contains(part), "{part:?} not in {text}");
        }
    }

    #[test]
    fn a_leftover_directory_alone_fails() {
        let r = json!({"left": {"processes": [], "dirs": ["/run/kata-containers/shared/sandboxes/ab12"], "files": []}});
        let v = verdict(&found(), &dirs(), &r);
        assert_eq!(v.outcome, crate::verify::Outcome::Fail, "{v:?}");
        assert!(v.evidence.contains("run directories left: /run/kata-containers/shared/sandboxes/ab12"), "{v:?}");
    }
}
