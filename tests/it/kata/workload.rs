//! `workload.docker.<pool>`, `workload.kind.<pool>` and `workload.bench.<pool>` against Debian's
//! dockerd 20.10 (`docker.io`, with its containerd and runc) in a real QEMU guest: the build
//! pool's probe pod becomes a guest whose container root is the probe image
//! (`tests/cluster/guest-image`) and whose `/var/lib/docker` emptyDir arrives as its class's
//! Kata `emptydir_mode` gives it. On a virtio-blk disk formatted ext4 (`block-plain`, what the
//! kata layer renders for `kata-<shim>-build`) dockerd runs overlay2 on extfs and the BuildKit
//! build runs; on a virtio-fs share (Kata's default `shared-fs`; Debian's virtiofsd) dockerd
//! itself falls back to vfs and the build fails: both verdicts from dockerd's own `docker info`.
//! Before, verify said Ready for both. The benchmark's runc side is the same probe run by the
//! stand-in kubelet on this machine, as runc runs a privileged container.

use serde_json::Value;

use super::{assert_check, world as kata_world};
use crate::node::report;
use crate::played::kata::{Runtime, Vmm};
use crate::support::outputs;
use crate::turns::{self, Need};
use crate::verify::World;

/// A world whose Kata pool `vm` is a build pool on `class` (`block`: the class's emptyDirs are
/// `block-plain`).
async fn build_world(class: &str, block: bool) -> (World, std::sync::Arc<crate::played::kata::Shim>) {
    let (world, shim) = kata_world(class, Vmm::Qemu { shared: true }, Runtime::Rust).await;
    if block {
        shim.block_plain(class);
    }
    crate::verify::profile()
        .pool_set("vm", "runtimeClassName", class)
        .pool_set("vm", "builds", true)
        .set("verify.kataRunDir", shim.run_dir.display().to_string())
        .set("verify.containerdTaskDir", shim.task_dir.display().to_string())
        .set("verify.probeDeadlineSeconds", 280)
        .write_to(world.dir.path());
    (world, shim)
}

/// `verify --only workload` with `extra` arguments: exit code and the JSON report.
async fn verify(world: &World, extra: &[&str]) -> (Option<i32>, Value) {
    let mut args = vec!["verify", "--only", "workload", "-o", "json"];
    args.extend(extra);
    let out = world.osbx(&args).await;
    let (stdout, stderr) = outputs(&out);
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
    report(v["checks"].as_array().unwrap());
    (out.status.code(), v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_builds_on_a_block_emptydir_and_fails_on_virtio_fs() {
    let _turn = turns::take(Need::BuildGuest).await;
    let (world, _shim) = build_world("kata-qemu-build", true).await;
    let (code, v) = verify(&world, &[]).await;
    let checks = v["checks"].as_array().unwrap();
    assert_check(
        checks,
        "workload.docker.vm",
        "PASS",
        &[
            "dockerd 20.10.",
            "storage driver overlay2, backing filesystem extfs (docker info)",
            "/var/lib/docker on ext4 /dev/vdb",
            "BuildKit build",
            "the image ran and printed the nonce",
        ],
    );
    // kind's preconditions in the same guest: its /dev has no kmsg (no host devices), so the
    // probe makes it; cgroup v2 from the guest kernel; inotify at the kernel's defaults, which
    // the privileged container can raise.
    assert_check(
        checks,
        "workload.kind.vm",
        "PASS",
        &[
            "/dev/kmsg made with mknod c 1 11",
            "cgroup v2 delegated",
            "which the pod can raise to 524288/512",
            "preconditions only: kind create cluster not run",
        ],
    );
    assert!(checks.iter().all(|c| c["id"] != "workload.bench.vm"), "the benchmark runs only when asked for");
    assert_eq!(code, Some(0));
    drop(world);

    let (world, _shim) = build_world("kata-qemu", false).await;
    let (code, v) = verify(&world, &[]).await;
    let checks = v["checks"].as_array().unwrap();
    assert_check(
        checks,
        "workload.docker.vm",
        "FAIL",
        &[
            "storage driver vfs, backing filesystem none (docker info)",
            "/var/lib/docker is on virtio-fs (virtiofs docker)",
            "dockerd chose the vfs storage driver, not overlay2",
            // dockerd's own words for why overlay2 was not taken.
            "failed to mount overlay",
            "set emptydir_mode = \"block-plain\" for RuntimeClass kata-qemu",
        ],
    );
    assert_eq!(code, Some(1));
}

/// `--bench`: the same build in the runc pool `pod` and in the Kata build pool, both times and
/// their ratio in the JSON report and as JUnit properties.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_build_benchmark_reports_both_times_and_their_ratio() {
    let _turn = turns::take(Need::BuildGuest).await;
    let (world, _shim) = build_world("kata-qemu-build", true).await;
    let junit = world.dir.path().join("junit.xml");
    let (code, v) = verify(&world, &["--bench", "--junit", junit.to_str().unwrap()]).await;
    let checks = v["checks"].as_array().unwrap();
    assert_check(checks, "workload.bench.vm", "PASS", &["in Kata pool vm", "in runc pool pod", "Kata/runc"]);
    let bench = checks.iter().find(|c| c["id"] == "workload.bench.vm").unwrap();
    let m = &bench["measurements"];
    let (kata, runc, ratio) =
        (m["kata_build_seconds"].as_f64(), m["runc_build_seconds"].as_f64(), m["kata_runc_ratio"].as_f64());
    let (Some(kata), Some(runc), Some(ratio)) = (kata, runc, ratio) else { panic!("measurements: {bench:#}") };
    assert!(kata > 0.0 && runc > 0.0 && (ratio - kata / runc).abs() < 1e-9, "{bench:#}");
    let docker = checks.iter().find(|c| c["id"] == "workload.docker.vm").unwrap();
    assert_eq!(docker["measurements"]["build_seconds"].as_f64(), Some(kata), "{docker:#}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("<property name=\"kata_runc_ratio\" value=\""), "{xml}");
    assert_eq!(code, Some(0));
}
