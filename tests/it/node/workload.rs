//! The build pools' workload probe run by the real kubelet, containerd and runc: a privileged
//! container of the probe image (Debian's dockerd 20.10, `tests/cluster/guest-image`, imported
//! into the node's containerd as `osbx.test/docker:20.10`), its emptyDir on this machine's disk,
//! its result read from the real kubelet's termination message. A build pool names the RuntimeClass
//! `runc` here (no registry serves Kata: `tests/run kata` runs the probe in a real QEMU guest), and
//! with `--bench` a runc pool runs the same build, so both sides of the benchmark are real
//! containers. What the verdicts must be follows from this machine: overlay2 passes where the
//! kubelet's directory is on ext4 or xfs, and kind's preconditions need cgroup v2.

use std::path::PathBuf;
use std::sync::OnceLock;

use super::runtime::runc_class_on_a_kata_node;
use super::{NodePlane, assert_check, check, profile, report};
use crate::support::root;
use crate::turns::{self, Need};

pub(super) const IMAGE: &str = "osbx.test/docker:20.10";

/// The probe image, built from the guest image's files and imported into the node's containerd
/// once per test binary.
pub(super) fn import_image(node: &NodePlane) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let out = std::process::Command::new(root().join("tests/cluster/guest-image")).output().unwrap();
        assert!(out.status.success(), "tests/cluster/guest-image: {}", String::from_utf8_lossy(&out.stderr));
        let tree = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).with_file_name("rootfs");
        let tar = node.dir.join("docker-image.tar");
        let out = std::process::Command::new(root().join("tests/cluster/image"))
            .args([IMAGE, tar.to_str().unwrap(), "--tree", tree.to_str().unwrap(), "--cmd", "[\"sh\"]"])
            .output()
            .unwrap();
        assert!(out.status.success(), "tests/cluster/image: {}", String::from_utf8_lossy(&out.stderr));
        node.import_image(&tar);
    });
}

/// `stat -f -c %T` of a path on this machine.
pub(super) fn filesystem(path: &str) -> String {
    let out = std::process::Command::new("stat").args(["-f", "-c", "%T", path]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workload_probe_runs_as_a_real_container() {
    let _turn = turns::take(Need::Node).await;
    let node = NodePlane::get();
    let client = node.client().await;
    runc_class_on_a_kata_node(&client, node.var("NODE_NAME")).await;
    import_image(node);
    let p = profile()
        .pool("pod", "runc", [0, 1, 0, 1])
        .pool("ci", "kata", [0, 1, 0, 1])
        .pool_set("ci", "runtimeClassName", "runc")
        .pool_set("ci", "builds", true)
        .set("verify.workload.dockerImage", IMAGE)
        .set("verify.probeDeadlineSeconds", 120);
    let (code, checks, stderr) = node.verify(&p, "workload", &["--bench"]).await;
    report(&checks);

    // The emptyDir lives under the kubelet's root on this machine.
    let fs = filesystem(node.var("KUBELET_ROOT"));
    let backing_ok = fs == "ext2/ext3" || fs == "xfs";
    let docker = check(&checks, "workload.docker.ci");
    if backing_ok {
        assert_check(
            &checks,
            "workload.docker.ci",
            "PASS",
            &["dockerd 20.10.", "storage driver overlay2", "the image ran and printed the nonce"],
        );
        assert_check(&checks, "workload.bench.ci", "PASS", &["in Kata pool ci", "in runc pool pod"]);
        assert!(check(&checks, "workload.bench.ci")["measurements"]["kata_runc_ratio"].as_f64().unwrap() > 0.0);
    } else {
        assert_eq!(docker["outcome"], "FAIL", "the kubelet's directory is on {fs}: {docker:#}");
        crate::support::not_proven(&format!(
            "node::workload::the_workload_probe_runs_as_a_real_container: the kubelet's directory is on {fs}, not ext4 or xfs, so Docker's overlay2 build in a real container (workload.docker PASS) and the benchmark's ratio were not proven here, only their FAIL"
        ));
    }
    // kind's preconditions in a runc container are this machine's: cgroup v2 or not.
    let kind = check(&checks, "workload.kind.ci");
    if filesystem("/sys/fs/cgroup") == "cgroup2fs" {
        assert!(kind["evidence"].as_str().unwrap().contains("/dev/kmsg present"), "{kind:#}");
    } else {
        assert_check(&checks, "workload.kind.ci", "FAIL", &["not cgroup v2", "systemd.unified_cgroup_hierarchy=1"]);
        crate::support::not_proven(
            "node::workload::the_workload_probe_runs_as_a_real_container: this machine is on cgroup v1, so kind's preconditions passing in a real container (workload.kind PASS) were not proven here, only their FAIL",
        );
    }
    assert!(matches!(code, Some(0 | 1)), "{stderr}");
}
