//! The node tier (`tests/run node`): `osbx verify` against a real node on this machine —
//! kubelet v1.36.3, containerd v2.4.2 with runc (the pods are real containers on a CNI bridge
//! without a route beyond the machine), SPIRE server and agent v1.13.3 with the k8s workload
//! attestor against that kubelet (`tests/cluster/up --with-node`, see `tests/cluster/README.md`).
//! Played, because no registry serves them: the OpenSandbox controller, spire-controller-manager
//! and execd (`tests/played`). The real OpenSandbox server answers the Lifecycle API.
//!
//! What met real parts here: `nodes.ready` (the Node the kubelet registers, containerd's runtime
//! handlers), `kata.runtimeclass` (a RuntimeClass containerd has, and one it lacks), the probe
//! machinery (pods created, run by containerd, their termination messages and logs read, cleanup
//! and the sweep after a killed run, with the real namespace controller and kubelet),
//! `kata.guest-kernel` under runc (a real container's kernel is the host's: FAIL) and with a
//! handler containerd lacks (containerd's own error quoted), `spiffe.issued` and `spiffe.denied`
//! (a real Workload API: issued, denied, a wrong trust domain, a missing entry, the CSI driver
//! absent, the agent down), `opensandbox.pools` and `opensandbox.lifecycle.*` (pool pods as real
//! containers), `opensandbox.exec.*` (the played execd inside a pool's real container, behind the
//! real server's proxy; and a pool that does not start it), the build pools' workload probe
//! (`workload.*`: Debian's dockerd in a privileged real container, both sides of `--bench`). In
//! the cluster (`runbook`): the acceptance Job in the osbx image, as the rendered ServiceAccount
//! and roles, runs the runbook of these (not their failure cases, nor `--bench`): nodes, runtime
//! classes, the guest-kernel probe, pools, the Lifecycle API and exec through the API server's
//! service proxy to the real server with the key read from its Secret, the workload probe in the
//! layer's probe namespace, SPIFFE issued and denied; its report agrees check by check with
//! `osbx verify` run from outside on the same node. With `images.mirror` (`mirror`): a Pool's
//! images and verify's probe image pulled by the real containerd from a real registry on
//! loopback through its registry hosts configuration, under names only the mirror holds. Held
//! back: a Kata VM (no registry serves Kata; `kata.guest-kernel` in a VM, `kata.host-kvm` and
//! `kata.vmm-shared-memory` meet QEMU in `tests/run kata` and the stand-in elsewhere).
//!
//! One node per machine, shared by the tests of this module, which take turns in the node's lane
//! (`crate::turns`), beside the end-to-end scenarios and the Kata tier.

mod acceptance;
mod image;
mod mirror;
mod probes;
mod regression;
mod runbook;
mod runtime;
mod sandboxes;
mod spiffe;
mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Output;
use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::builder::TestProfile;
use crate::support::{osbx, output_off_runtime, outputs, root};

/// The node's plane: `tests/cluster/up --with-node`, started once for the test binary and
/// stopped by its watchdog when the binary exits.
pub struct NodePlane {
    /// The plane's directory.
    pub dir: PathBuf,
    /// Its admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// `node.env` (node name, sockets, images, SPIRE facts).
    pub env: BTreeMap<String, String>,
}

impl NodePlane {
    /// The shared node plane.
    pub fn get() -> &'static Self {
        static NODE: OnceLock<NodePlane> = OnceLock::new();
        NODE.get_or_init(|| {
            let dir = std::env::temp_dir().join(format!("osbx-node-plane-{}", std::process::id()));
            let out = std::process::Command::new(root().join("tests/cluster/up"))
                .args(["--with-node", "--watch-pid", &std::process::id().to_string()])
                .arg(&dir)
                .stderr(std::process::Stdio::inherit())
                .output()
                .expect("run tests/cluster/up --with-node");
            assert!(out.status.success(), "tests/cluster/up --with-node failed (see stderr above; it runs as root)");
            let text = std::fs::read_to_string(dir.join("node.env")).expect("node.env");
            let env = text
                .lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.trim_matches('\'').to_owned()))
                .collect();
            Self { kubeconfig: dir.join("kubeconfig"), dir, env }
        })
    }

    /// A value of `node.env`.
    pub fn var(&self, key: &str) -> &str {
        self.env.get(key).unwrap_or_else(|| panic!("node.env has no {key}"))
    }

    /// Import a docker-archive tarball into the node's containerd (`k8s.io` namespace), where
    /// the kubelet finds its images without a registry.
    pub fn import_image(&self, tar: &std::path::Path) {
        let ctr = PathBuf::from(self.var("NODE_BIN")).join("ctr");
        let out = std::process::Command::new(ctr)
            .args(["--address", self.var("CONTAINERD_SOCKET"), "-n", "k8s.io", "images", "import"])
            .arg(tar)
            .output()
            .unwrap();
        assert!(out.status.success(), "ctr images import: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// An admin client (one per test: a client belongs to its runtime).
    pub async fn client(&self) -> kube::Client {
        crate::cluster::client_for(&self.kubeconfig).await
    }

    /// `osbx verify --only <only> -o json` for `profile`, with `extra` arguments; exit code,
    /// the checks, and stderr.
    pub async fn verify(&self, profile: &TestProfile, only: &str, extra: &[&str]) -> (Option<i32>, Vec<Value>, String) {
        let out = self.osbx_verify(profile, only, extra).await;
        let (stdout, stderr) = outputs(&out);
        let report: Value =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("verify JSON: {e}: {stdout}{stderr}"));
        (out.status.code(), report["checks"].as_array().cloned().unwrap_or_default(), stderr)
    }

    /// The `osbx verify --only <only> -o json` process's output.
    pub async fn osbx_verify(&self, profile: &TestProfile, only: &str, extra: &[&str]) -> Output {
        let dir = tempfile::tempdir().unwrap();
        let path = profile.write_to(dir.path());
        let mut cmd = osbx();
        cmd.args(["verify", "--only", only, "-o", "json"]).args(extra);
        cmd.arg("--profile").arg(path).arg("--kubeconfig").arg(&self.kubeconfig);
        let out = output_off_runtime(cmd).await;
        drop(dir);
        out
    }
}

/// The profile of the node tests: namespaces `nd-…`, pools on the node's busybox image, probes
/// on it too, short deadlines.
pub fn profile() -> TestProfile {
    let node = NodePlane::get();
    TestProfile::new("nd")
        .set("pools.defaults", json!({"image": node.var("PROBE_IMAGE"), "command": ["sleep", "3600"]}))
        .set("verify.probeImage", node.var("PROBE_IMAGE"))
        .set("verify.probeDeadlineSeconds", 40)
        .set("verify.containerdTaskDir", node.var("CONTAINERD_TASK_DIR"))
}

/// A check of a report.
#[track_caller]
pub fn check<'a>(checks: &'a [Value], id: &str) -> &'a Value {
    checks.iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("no {id} in {checks:#?}"))
}

/// Assert a check's outcome and that its evidence, diagnosis and fix together hold each of
/// `fragments`.
#[track_caller]
pub fn assert_check(checks: &[Value], id: &str, outcome: &str, fragments: &[&str]) {
    let c = check(checks, id);
    assert_eq!(c["outcome"], outcome, "{id}: {c:#}");
    let text = ["evidence", "diagnosis", "fix"].map(|k| c[k].as_str().unwrap_or_default().to_owned()).join(" | ");
    for f in fragments {
        assert!(text.contains(f), "{id}: {f:?} not in {text}");
    }
}

/// Print what a check said against the real node (the report of which checks met real parts).
#[allow(clippy::print_stderr)]
pub fn report(checks: &[Value]) {
    for c in checks {
        eprintln!(
            "node-tier: {} {} — {} {}",
            c["id"].as_str().unwrap_or_default(),
            c["outcome"].as_str().unwrap_or_default(),
            c["evidence"].as_str().unwrap_or_default(),
            c["diagnosis"].as_str().map(|d| format!("({d})")).unwrap_or_default()
        );
    }
}
