//! `workload.docker.<pool>`, `workload.kind.<pool>` and, when asked for, `workload.bench.<pool>`:
//! a build pool's sandboxes can do the job they exist for. One privileged probe pod under the
//! pool's RuntimeClass (its node selector, tolerations and resources), with `/var/lib/docker` on
//! the volume the pool mounts there (else a plain emptyDir, what a job gets), starts dockerd and
//! reads its storage driver from `docker info`, builds a small image with BuildKit that needs no
//! registry, runs it to print the run's nonce, and checks kind's preconditions in the same pod.
//! With `--bench`, the same probe in a runc pool gives the build's time there, beside the Kata
//! pool's.
//!
//! Facts (`../shared/reference/sandbox-work.md` §2–§4): Kata shares a disk-backed emptyDir through
//! virtio-fs unless its class sets `emptydir_mode = "block-plain"`; on virtio-fs dockerd's overlay2
//! fails and dockerd falls back to `vfs` (or, on guest kernels that allow a remote upper, mounts
//! overlay2 on a `fuse` backing filesystem); `docker info` names the driver and its backing
//! filesystem; kind needs `/dev/kmsg` (made with `mknod /dev/kmsg c 1 11` in a Kata pod), cgroup
//! v2 it can write to, and inotify limits of 524288 watches and 512 instances.

use std::fmt::Write as _;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::kata::stuck_verdict;
use crate::cluster::operation::Operation;
use crate::components::kata;
use crate::components::pools::{EffectivePool, Runtime};
use crate::profile::Profile;
use crate::verify::probe::Run;
use crate::verify::probe::{self, ProbeEnd};
use crate::verify::scripts;
use crate::verify::{Check, Ctx, Reach, Verdict};

/// What kind needs of inotify (kind's known issues: "Pod errors due to too many open files").
const KIND_WATCHES: u64 = 524_288;
const KIND_INSTANCES: u64 = 512;

/// cgroup v2's filesystem magic (`CGROUP2_SUPER_MAGIC`), as `stat -f -c %t` prints it.
const CGROUP2: &str = "63677270";

/// The filesystem magic numbers `stat -f` reports (`statfs(2)`): what people call each, and
/// what dockerd calls it (`docker info`'s backing filesystem; `FsNames` in moby).
const FILESYSTEMS: &[(&str, &str, &str)] = &[
    ("ef53", "ext4", "extfs"),
    ("58465342", "xfs", "xfs"),
    (FUSE, "fuse (virtio-fs)", "fuse"),
    ("1021994", "tmpfs", "tmpfs"),
    ("794c7630", "overlayfs", "overlayfs"),
    ("9123683e", "btrfs", "btrfs"),
    ("6969", "nfs", "nfs"),
    ("2fc12fc1", "zfs", "zfs"),
];

/// FUSE's magic, which a virtio-fs share reports.
const FUSE: &str = "65735546";

/// The entry of [`FILESYSTEMS`] for the magic number the probe read.
fn known(r: &Value) -> Option<&'static (&'static str, &'static str, &'static str)> {
    FILESYSTEMS.iter().find(|(m, _, _)| *m == text(r, "fs_magic"))
}

/// In a build pool's pod (privileged, `/var/lib/docker` on the volume the pool gives its jobs):
/// kind's preconditions first (`/dev/kmsg` present or made with `mknod`, cgroup v2 writable with
/// its controllers, inotify limits or whether they can be raised), then dockerd (no bridge, no
/// iptables: nothing leaves the pod), `docker info`'s storage driver and backing filesystem, a
/// BuildKit build that needs no registry (`FROM scratch`, the probe's own busybox or shell and
/// its libraries, a `RUN` step) timed by `/proc/uptime`, the image run with the nonce, and with
/// `KIND_NODE_IMAGE` `kind create cluster` and its delete. Every text is one line, escaped for
/// JSON and cut short: the termination message holds 4 KiB.
const SCRIPT: &str = include_str!("../../scripts/workload.sh");

/// The workload probe of a pool: privileged, under the pool's class, node selector and
/// tolerations, with `/var/lib/docker` on `volume` (a volume source: what the pool mounts there,
/// else a plain emptyDir); `env`: `NONCE`, and `KIND_NODE_IMAGE` or `SKIP_KIND`.
#[must_use]
fn spec(run: &Run, image: &str, pool: &WorkloadPool<'_>, env: &[(&str, &str)]) -> Value {
    let mut c = scripts::container("workload", image, &json!(["sh", "-c", SCRIPT]));
    c["securityContext"] = json!({"privileged": true});
    c["volumeMounts"] = json!([{"name": "docker", "mountPath": "/var/lib/docker"}]);
    c["env"] = env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect();
    if let Some(r) = pool.resources {
        c["resources"] = r.clone();
    }
    let mut spec = scripts::base_spec(run, &json!([c]));
    let mut volume = pool.volume.clone();
    volume["name"] = json!("docker");
    spec["volumes"] = json!([volume]);
    if let Some(class) = pool.runtime_class {
        spec["runtimeClassName"] = json!(class);
    }
    if let Some(n) = pool.node_selector {
        spec["nodeSelector"] = n.clone();
    }
    if let Some(t) = pool.tolerations {
        spec["tolerations"] = t.clone();
    }
    spec
}

/// Where a workload probe runs: what it takes from its pool's pod template.
struct WorkloadPool<'a> {
    /// The pool's RuntimeClass (none: the node's default runtime).
    runtime_class: Option<&'a str>,
    /// The volume source for `/var/lib/docker` (its name is replaced).
    volume: Value,
    /// The pool's main container resources.
    resources: Option<&'a Value>,
    /// The pool's node selector.
    node_selector: Option<&'a Value>,
    /// The pool's tolerations.
    tolerations: Option<&'a Value>,
}

/// The id of the Docker check of `pool`.
pub(super) fn docker_id(pool: &str) -> String {
    format!("workload.docker.{pool}")
}

/// The id of kind's check of `pool`.
pub(super) fn kind_id(pool: &str) -> String {
    format!("workload.kind.{pool}")
}

/// The id of the build benchmark of `pool`.
pub(super) fn bench_id(pool: &str) -> String {
    format!("{}.{pool}", crate::verify::settings::OPT_IN)
}

/// The workload checks of one build pool.
pub(super) struct Workload {
    pub pool: String,
}

impl Check for Workload {
    fn ids(&self) -> Vec<String> {
        vec![docker_id(&self.pool), kind_id(&self.pool), bench_id(&self.pool)]
    }

    /// A probe pod (two with the benchmark), in the run's namespace.
    /// Its host probe (or, for a build pool, its privileged probe) uses the node.
    fn uses_the_node(&self, _: &Profile) -> bool {
        true
    }

    /// The probe pod's image, and kind's node image, which its dockerd pulls when named.
    fn images(&self, profile: &Profile) -> Vec<String> {
        let w = &profile.verify.workload;
        std::iter::once(w.docker_image.clone()).chain(w.kind_node_image.clone()).collect()
    }

    fn operations(&self, _: &Profile, _: &Reach) -> Vec<Operation> {
        vec![Operation::Probe(None)]
    }

    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(async move {
            let pools = ctx.profile.sections.pools.effective();
            let Some(pool) = pools.iter().find(|p| p.pool.name == self.pool) else {
                let skip = Verdict::skip(format!("no pool {} in the profile", self.pool));
                return vec![skip.clone(), skip.clone(), skip];
            };
            let bench = ctx.selection.selects(&bench_id(&self.pool));
            let runc = pools.iter().find(|p| p.pool.runtime == Runtime::Runc).filter(|_| bench);
            let (kata_pod, runc_pod) = (format!("workload-{}", self.pool), format!("workload-bench-{}", self.pool));
            let kata_probe = probe_in(ctx, pool, &kata_pod, false);
            let (kata, runc_run) = match runc {
                Some(r) => {
                    let (k, r) = futures::join!(kata_probe, probe_in(ctx, r, &runc_pod, true));
                    (k, Some(r))
                }
                None => (kata_probe.await, None),
            };
            let class = pool.runtime_class_name.clone().unwrap_or_default();
            let settings = &ctx.profile.verify.workload;
            let nonce = super::exec::nonce(&ctx.run.id);
            let (docker, kind) = match &kata {
                Ok(r) => (
                    docker_verdict(r, &nonce, &class, settings.build_limit_seconds),
                    kind_verdict(r, settings.kind_node_image.as_deref()),
                ),
                Err(v) => (v.clone(), v.clone()),
            };
            let bench = match (runc, runc_run) {
                (Some(r), Some(run)) => bench_verdict(pool, &kata, r, &run, &nonce),
                _ if bench => Verdict::skip("no runc pool to compare the build with"),
                _ => Verdict::skip("not asked for (--bench)"),
            };
            vec![docker, kind, bench]
        })
    }
}

/// Run the workload probe as pod `name` in `pool`'s pods (`runc`: the benchmark's side, which
/// leaves kind's preconditions alone: its pod shares the node's kernel); its result line, or the
/// verdict that says why there is none.
async fn probe_in(ctx: &Ctx, pool: &EffectivePool<'_>, name: &str, runc: bool) -> Result<Value, Verdict> {
    let t = &pool.template;
    let mounted = t
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m["mountPath"].as_str().is_some_and(|p| p.trim_end_matches('/') == "/var/lib/docker"))
        .and_then(|m| m["name"].as_str());
    let volume = mounted
        .and_then(|n| t.volumes.iter().flatten().find(|v| v["name"].as_str() == Some(n)))
        .cloned()
        .unwrap_or_else(|| json!({"emptyDir": {}}));
    let resources = t.resources.as_ref().and_then(|r| serde_json::to_value(r).ok());
    let node_selector = t.node_selector.as_ref().and_then(|n| serde_json::to_value(n).ok());
    let tolerations = t.tolerations.as_ref().map(|v| Value::Array(v.clone()));
    let at = WorkloadPool {
        runtime_class: pool.runtime_class_name.as_deref(),
        volume,
        resources: resources.as_ref(),
        node_selector: node_selector.as_ref(),
        tolerations: tolerations.as_ref(),
    };
    let nonce = super::exec::nonce(&ctx.run.id);
    let settings = &ctx.profile.verify.workload;
    let mut env = vec![("NONCE", nonce.as_str())];
    match (&settings.kind_node_image, runc) {
        (_, true) => env.push(("SKIP_KIND", "1")),
        (Some(image), false) => env.push(("KIND_NODE_IMAGE", image.as_str())),
        (None, false) => {}
    }
    let spec = spec(&ctx.run, &settings.docker_image, &at, &env);
    let pod = probe::pod(&ctx.run, name, "workload", &spec);
    let what = format!("the workload probe pod of pool {}", pool.pool.name);
    match probe::run_pod(&ctx.cluster, &pod, ctx.run.wait_limit()).await {
        Err(e) => Err(Verdict::error("creating the workload probe pod", e.to_string())),
        Ok(ProbeEnd::Stuck { diagnosis }) => Err(stuck_verdict(&what, &diagnosis)),
        Ok(ProbeEnd::Terminated { exit_code, message, .. }) => probe::json_line(&message)
            .filter(|r| r["check"] == "workload")
            .ok_or_else(|| Verdict::error(format!("{what} exited {exit_code}"), format!("no result line: {message}"))),
    }
}

/// A text field of the probe's line.
fn text<'a>(r: &'a Value, key: &str) -> &'a str {
    r[key].as_str().unwrap_or_default()
}

/// The filesystem under `/var/lib/docker`: its type as `/proc/mounts` names it (and the
/// device), else by its magic number.
fn filesystem(r: &Value) -> String {
    let mount = text(r, "mount").trim();
    if !mount.is_empty() {
        return mount.to_owned();
    }
    known(r).map_or_else(|| format!("magic 0x{}", text(r, "fs_magic")), |(_, name, _)| (*name).to_owned())
}

/// Whether `/var/lib/docker` is a virtio-fs share (or another FUSE filesystem).
fn on_virtio_fs(r: &Value) -> bool {
    text(r, "fs_magic") == FUSE || text(r, "mount").starts_with("virtiofs")
}

/// `overlay2`'s backing filesystem as `docker info` reports it.
/// With the containerd image store (Docker 29's default; driver `overlayfs`, the containerd
/// snapshotter) `docker info` names no backing filesystem: the one under `/var/lib/docker`, by
/// the names dockerd gives them.
fn backing(r: &Value) -> Option<String> {
    let status: Value = serde_json::from_str(text(r, "driver_status")).ok()?;
    let named = status.as_array().and_then(|s| s.iter().find(|p| p[0] == "Backing Filesystem"));
    match named {
        Some(p) => p[1].as_str().map(str::to_owned),
        None if text(r, "driver") == SNAPSHOTTER => Some(
            known(r).map_or_else(|| format!("magic 0x{}", text(r, "fs_magic")), |(_, _, docker)| (*docker).to_owned()),
        ),
        None => None,
    }
}

/// The storage driver `docker info` names for the containerd snapshotter's overlay.
const SNAPSHOTTER: &str = "overlayfs";

fn seconds(ms: &Value) -> f64 {
    ms.as_f64().unwrap_or_default() / 1000.0
}

/// The Docker verdict from the probe's line: overlay2 on extfs or xfs, the build done (within
/// the limit), the image run with the nonce.
fn docker_verdict(r: &Value, nonce: &str, class: &str, limit: Option<u64>) -> Verdict {
    let fs = filesystem(r);
    let log = text(r, "dockerd_log");
    let storage_fix =
        || format!("set emptydir_mode = \"block-plain\" for RuntimeClass {class}: {}", kata::block_storage_fix());
    let virtio = on_virtio_fs(r);
    let why_fs = |what: &str| {
        if virtio {
            format!(
                "/var/lib/docker is on virtio-fs ({fs}): {what}; RuntimeClass {class} shares emptyDirs through virtio-fs (emptydir_mode = \"shared-fs\", Kata's default), on which overlay2 cannot keep its layers"
            )
        } else {
            format!("/var/lib/docker is on {fs}: {what}")
        }
    };
    match text(r, "dockerd") {
        "up" => {}
        state => {
            let ev = format!(
                "dockerd {} ({fs} at /var/lib/docker): {log}",
                if state == "exited" { "exited" } else { "did not answer in 90 s" }
            );
            let v = Verdict::fail(ev, why_fs("dockerd could not start on it"));
            return if virtio { v.with_fix(storage_fix()) } else { v };
        }
    }
    let driver = text(r, "driver");
    let backing = backing(r).unwrap_or_else(|| "none".to_owned());
    let build_s = seconds(&r["build_ms"]);
    let mut evidence = format!(
        "dockerd {}: storage driver {driver}, backing filesystem {backing} (docker info); /var/lib/docker on {fs}",
        text(r, "version")
    );
    let build = text(r, "build");
    if build == "ok" {
        let _ = write!(evidence, "; BuildKit build {build_s:.1} s");
    }
    let verdict = if driver != "overlay2" && driver != SNAPSHOTTER {
        let what = format!("dockerd chose the {driver} storage driver, not overlay2 ({log})");
        let v = Verdict::fail(evidence.clone(), why_fs(&what));
        if virtio { v.with_fix(storage_fix()) } else { v.with_fix("give /var/lib/docker an ext4 or xfs volume") }
    } else if !matches!(backing.as_str(), "extfs" | "xfs") {
        let what = format!("{driver} runs on a {backing} backing filesystem, not extfs or xfs");
        let v = Verdict::fail(evidence.clone(), why_fs(&what));
        if virtio { v.with_fix(storage_fix()) } else { v.with_fix("give /var/lib/docker an ext4 or xfs volume") }
    } else if build != "ok" {
        Verdict::fail(evidence.clone(), format!("the BuildKit build failed: {}", text(r, "build_log")))
    } else if text(r, "ran").trim() != nonce {
        Verdict::fail(
            format!("{evidence}; the image printed {:?}", text(r, "ran")),
            format!("the built image did not print the nonce {nonce}"),
        )
    } else if let Some(limit) = limit.filter(|l| Duration::from_secs(*l).as_secs_f64() < build_s) {
        Verdict::fail(
            evidence.clone(),
            format!("the build took {build_s:.1} s, more than verify.workload.buildLimitSeconds ({limit} s)"),
        )
    } else {
        Verdict::pass(format!("{evidence}; the image ran and printed the nonce"))
    };
    if build == "ok" { verdict.with_measurement("build_seconds", build_s) } else { verdict }
}

/// kind's verdict from the probe's line: its preconditions, and with a node image the cluster
/// created and deleted.
fn kind_verdict(r: &Value, node_image: Option<&str>) -> Verdict {
    let mut problems: Vec<(String, &str)> = Vec::new();
    let kmsg = text(r, "kmsg");
    if kmsg.starts_with("missing") {
        problems.push((
            format!("no /dev/kmsg, and mknod /dev/kmsg c 1 11 failed ({kmsg}): kubelet in a kind node cannot start"),
            "run the build pool's container privileged (Kata gives it no host devices: mknod /dev/kmsg c 1 11 before dockerd)",
        ));
    }
    let controllers = text(r, "controllers");
    if text(r, "cgroup_magic") != CGROUP2 {
        problems.push((
            "the pod's /sys/fs/cgroup is not cgroup v2: kind's nodes (Kubernetes >= 1.35) refuse cgroup v1".to_owned(),
            "boot the Kata guest with cgroup v2 (systemd.unified_cgroup_hierarchy=1 or cgroup_no_v1=all in the shim's kernel_params)",
        ));
    } else if r["cgroup_writable"] != Value::Bool(true) {
        problems.push((
            "cgroup v2 is not delegated: the pod cannot make a cgroup under /sys/fs/cgroup".to_owned(),
            "run the build pool's container privileged, with its own cgroup namespace",
        ));
    } else if !["memory", "pids", "cpu"].iter().all(|c| controllers.split_whitespace().any(|x| x == *c)) {
        problems.push((
            format!("cgroup v2 controllers [{controllers}] lack one of memory, pids, cpu"),
            "enable the memory, pids and cpu controllers in the guest",
        ));
    }
    let number = |k: &str| text(r, k).trim().parse::<u64>().unwrap_or(0);
    let (watches, instances) = (number("inotify_watches"), number("inotify_instances"));
    let inotify_ok = r["inotify_writable"] == Value::Bool(true);
    if (watches < KIND_WATCHES || instances < KIND_INSTANCES) && !inotify_ok {
        problems.push((
            format!(
                "inotify limits {watches} watches, {instances} instances (kind needs {KIND_WATCHES}, {KIND_INSTANCES}) and the pod cannot raise them"
            ),
            "raise fs.inotify.max_user_watches and max_user_instances in the guest, or run the container privileged",
        ));
    }
    let inotify = if watches >= KIND_WATCHES && instances >= KIND_INSTANCES {
        format!("inotify {watches}/{instances}")
    } else if inotify_ok {
        format!("inotify {watches}/{instances}, which the pod can raise to {KIND_WATCHES}/{KIND_INSTANCES}")
    } else {
        format!("inotify {watches}/{instances}")
    };
    let cgroup = if text(r, "cgroup_magic") != CGROUP2 {
        "cgroup v1 (/sys/fs/cgroup is not cgroup2fs)".to_owned()
    } else if r["cgroup_writable"] == Value::Bool(true) {
        format!("cgroup v2 delegated [{controllers}]")
    } else {
        format!("cgroup v2 not writable [{controllers}]")
    };
    let evidence =
        format!("/dev/kmsg {}; {cgroup}; {inotify}", if kmsg == "created" { "made with mknod c 1 11" } else { kmsg });
    if let Some((_, fix)) = problems.first() {
        let all: Vec<&str> = problems.iter().map(|(w, _)| w.as_str()).collect();
        return Verdict::fail(evidence, all.join("; ")).with_fix(*fix);
    }
    match (node_image, text(r, "kind")) {
        (None, _) => Verdict::pass(format!(
            "{evidence}; preconditions only: kind create cluster not run (no verify.workload.kindNodeImage)"
        )),
        (Some(image), "created") => {
            Verdict::pass(format!("{evidence}; kind create cluster with {image} and its delete done"))
        }
        (Some(image), "not-run") => Verdict::fail(
            format!("{evidence}; kind create cluster with {image} not run"),
            "dockerd did not start (see workload.docker)",
        ),
        (Some(image), _) => Verdict::fail(
            format!("{evidence}; kind create cluster with {image} failed"),
            format!("kind: {}", text(r, "kind_log")),
        ),
    }
}

/// The benchmark's verdict: the same build's time in the Kata pool and in the runc pool, and
/// their ratio.
fn bench_verdict(
    pool: &EffectivePool<'_>,
    kata: &Result<Value, Verdict>,
    runc: &EffectivePool<'_>,
    runc_run: &Result<Value, Verdict>,
    nonce: &str,
) -> Verdict {
    let built = |r: &Result<Value, Verdict>| match r {
        Ok(line) if text(line, "build") == "ok" && text(line, "ran").trim() == nonce => Ok(seconds(&line["build_ms"])),
        Ok(line) => Err(format!(
            "dockerd {}, build {} ({})",
            text(line, "dockerd"),
            text(line, "build"),
            text(line, "build_log")
        )),
        Err(v) => Err(format!("{}: {}", v.evidence, v.diagnosis.clone().unwrap_or_default())),
    };
    let (k, rc) = (&pool.pool.name, &runc.pool.name);
    match (built(kata), built(runc_run)) {
        (Ok(kata_s), Ok(runc_s)) => {
            let ratio = if runc_s > 0.0 { kata_s / runc_s } else { 0.0 };
            Verdict::pass(format!(
                "the same BuildKit build: {kata_s:.2} s in Kata pool {k}, {runc_s:.2} s in runc pool {rc}: Kata/runc {ratio:.2}x"
            ))
            .with_measurement("kata_build_seconds", kata_s)
            .with_measurement("runc_build_seconds", runc_s)
            .with_measurement("kata_runc_ratio", ratio)
        }
        (Err(why), _) => Verdict::error(format!("no build time from Kata pool {k}"), why),
        (_, Err(why)) => Verdict::error(format!("no build time from runc pool {rc}"), why),
    }
}

#[cfg(test)]
mod tests;
