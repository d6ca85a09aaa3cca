//! The verdicts of the workload checks from recorded probe lines.

use serde_json::json;

use super::*;
use crate::verify::Outcome;

/// What the probe printed in a QEMU guest with Debian's dockerd 20.10 on a virtio-blk disk
/// formatted ext4 (`tests/it/kata/workload.rs` runs it for real).
fn block() -> Value {
    json!({"check":"workload","fs_magic":"ef53","mount":"ext4 /dev/vdb","kmsg":"created","cgroup_magic":"63677270",
           "controllers":"cpuset cpu io memory hugetlb pids rdma misc","cgroup_writable":true,"inotify_watches":"8192",
           "inotify_instances":"128","inotify_writable":true,"dockerd":"up","up_ms":6120,"version":"20.10.24+dfsg1",
           "driver":"overlay2","driver_status":"[[\"Backing Filesystem\",\"extfs\"],[\"Supports d_type\",\"true\"]]",
           "dockerd_log":"","build":"ok","build_ms":3460,"build_log":"#6 DONE 0.2s","ran":"osbx-1-2","kind":"not-run","kind_log":""})
}

#[test]
fn overlay2_on_ext4_with_the_build_run_passes() {
    let v = docker_verdict(&block(), "osbx-1-2", "kata-qemu-build", None);
    assert_eq!(v.outcome, Outcome::Pass, "{v:?}");
    assert!(v.evidence.contains("storage driver overlay2, backing filesystem extfs"), "{}", v.evidence);
    assert_eq!(v.measurements.get("build_seconds"), Some(&3.46));
    let slow = docker_verdict(&block(), "osbx-1-2", "kata-qemu-build", Some(2));
    assert_eq!(slow.outcome, Outcome::Fail);
    assert!(slow.diagnosis.unwrap().contains("more than verify.workload.buildLimitSeconds (2 s)"));
    let wrong = docker_verdict(&block(), "osbx-other", "kata-qemu-build", None);
    assert!(wrong.diagnosis.unwrap().contains("did not print the nonce osbx-other"));
}

#[test]
fn virtio_fs_fails_with_the_storage_fix_whatever_the_driver() {
    let mut vfs = block();
    vfs["mount"] = json!("virtiofs docker");
    vfs["fs_magic"] = json!("65735546");
    vfs["driver"] = json!("vfs");
    vfs["driver_status"] = json!("null");
    vfs["build"] = json!("failed");
    vfs["dockerd_log"] = json!("level=error msg=\"failed to mount overlay: invalid argument\" storage-driver=overlay");
    let v = docker_verdict(&vfs, "osbx-1-2", "kata-qemu", None);
    assert_eq!(v.outcome, Outcome::Fail);
    let why = v.diagnosis.clone().unwrap();
    assert!(why.contains("/var/lib/docker is on virtio-fs") && why.contains("chose the vfs storage driver"), "{why}");
    assert!(v.fix.unwrap().contains("emptydir_mode = \"block-plain\" for RuntimeClass kata-qemu"));
    // A newer guest kernel mounts overlay over virtio-fs: overlay2 on fuse fails too.
    vfs["driver"] = json!("overlay2");
    vfs["driver_status"] = json!("[[\"Backing Filesystem\",\"fuse\"]]");
    let fuse = docker_verdict(&vfs, "osbx-1-2", "kata-qemu", None);
    assert_eq!(fuse.outcome, Outcome::Fail);
    assert!(fuse.diagnosis.unwrap().contains("fuse backing filesystem"));
    // Docker 29's containerd image store: the overlayfs snapshotter, judged by the filesystem
    // under /var/lib/docker.
    vfs["driver"] = json!("overlayfs");
    vfs["driver_status"] = json!("[[\"driver-type\",\"io.containerd.snapshotter.v1\"]]");
    let snapshotter = docker_verdict(&vfs, "osbx-1-2", "kata-qemu", None);
    assert!(snapshotter.diagnosis.unwrap().contains("overlayfs runs on a fuse backing filesystem"));
    let mut block = block();
    block["driver"] = json!("overlayfs");
    block["driver_status"] = json!("[[\"driver-type\",\"io.containerd.snapshotter.v1\"]]");
    assert_eq!(docker_verdict(&block, "osbx-1-2", "kata-qemu-build", None).outcome, Outcome::Pass);
    // dockerd forced onto overlay2 exits: said with its own words.
    vfs["dockerd"] = json!("exited");
    vfs["dockerd_log"] = json!("failed to start daemon: error initializing graphdriver: driver not supported");
    let exited = docker_verdict(&vfs, "osbx-1-2", "kata-qemu", None);
    assert!(exited.evidence.contains("driver not supported"), "{}", exited.evidence);
    assert!(exited.fix.is_some());
}

#[test]
fn kind_needs_kmsg_cgroup_v2_and_inotify_it_can_raise() {
    let ok = kind_verdict(&block(), None);
    assert_eq!(ok.outcome, Outcome::Pass, "{ok:?}");
    assert!(ok.evidence.contains("made with mknod") && ok.evidence.contains("preconditions only"), "{}", ok.evidence);
    let mut r = block();
    r["kmsg"] = json!("missing: mknod: /dev/kmsg: Operation not permitted");
    r["cgroup_magic"] = json!("27e0eb");
    r["inotify_writable"] = json!(false);
    let bad = kind_verdict(&r, None);
    assert_eq!(bad.outcome, Outcome::Fail);
    let why = bad.diagnosis.unwrap();
    assert!(why.contains("no /dev/kmsg") && why.contains("not cgroup v2") && why.contains("cannot raise"), "{why}");
    let created = {
        let mut r = block();
        r["kind"] = json!("created");
        kind_verdict(&r, Some("kindest/node:v1.35.0"))
    };
    assert_eq!(created.outcome, Outcome::Pass);
}
