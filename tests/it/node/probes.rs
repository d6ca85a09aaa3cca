//! The probe machinery against real pods: created, run by containerd and runc, the termination
//! message read from the kubelet, cleaned up by the real namespace controller and kubelet, and
//! what a killed run left swept by the next one.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams};

use super::{NodePlane, assert_check, profile, report};
use crate::turns::{self, Need};

const MANAGED: &str = "app.kubernetes.io/managed-by=osbx-verify";

async fn leftovers(client: &kube::Client) -> (Vec<String>, Vec<String>) {
    let lp = ListParams::default().labels(MANAGED);
    // The namespaces runs made (an acceptance layer's probe namespace, which another test on
    // this node renders, carries the label but is no run's).
    let made = ListParams::default().labels(&format!("{MANAGED},osbx.io/run-id"));
    let ns = Api::<Namespace>::all(client.clone()).list(&made).await.unwrap();
    let pods = Api::<Pod>::all(client.clone()).list(&lp).await.unwrap();
    (
        ns.items.into_iter().filter_map(|n| n.metadata.name).collect(),
        pods.items.into_iter().filter_map(|p| p.metadata.name).collect(),
    )
}

async fn wait_clean(client: &kube::Client, what: &str) {
    let start = Instant::now();
    loop {
        let (ns, pods) = leftovers(client).await;
        if ns.is_empty() && pods.is_empty() {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(90), "{what}: left namespaces {ns:?}, pods {pods:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A probe runs as a real container (runc; the runc RuntimeClass of the Kata pool): verify reads
/// its result from the termination message the kubelet reports (the container's real `uname -r`
/// equals the Node's kernelVersion), and once the run ends its namespace and pods are gone for
/// real. A run SIGKILLed while its probe pod runs leaves them behind; the next run, once the
/// killed run's time is over, sweeps them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_are_real_pods_and_nothing_is_left() {
    let _turn = turns::take(Need::Node).await;
    let node = NodePlane::get();
    let client = node.client().await;
    super::runtime::runc_class_on_a_kata_node(&client, node.var("NODE_NAME")).await;
    let p = profile().pool("vm", "kata", [0, 1, 0, 1]).pool_set("vm", "runtimeClassName", "runc");

    let (_, checks, _) = node.verify(&p, "kata.guest-kernel", &[]).await;
    report(&checks);
    let kernel = super::runtime::kernel_of(&client, node.var("NODE_NAME")).await;
    assert_check(&checks, "kata.guest-kernel", "FAIL", &[&format!("guest {kernel}"), "its kernel is the host's"]);
    wait_clean(&client, "after a finished run").await;

    // Killed while its probe pod runs (a long deadline keeps the Kata target… here the probe
    // itself is quick, so kill as soon as the pod exists).
    let dir = tempfile::tempdir().unwrap();
    let path = p.clone().set("verify.probeDeadlineSeconds", 120).write_to(dir.path());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_osbx"))
        .env("OSBX_COLOR", "never")
        .args(["verify", "--only", "kata.guest-kernel", "--verify-timeout", "5s", "--profile"])
        .arg(&path)
        .arg("--kubeconfig")
        .arg(&node.kubeconfig)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        let (_, pods) = leftovers(&client).await;
        if !pods.is_empty() {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "the killed run never created its probe pod");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    child.kill().unwrap();
    child.wait().expect("reap the killed osbx");
    let (ns, _) = leftovers(&client).await;
    assert!(!ns.is_empty(), "a killed run leaves its namespace");
    // Its time is over 5 s after its --verify-timeout; then the next run sweeps it.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let (_, checks, stderr) = node.verify(&p, "nodes.ready", &[]).await;
    assert_check(&checks, "nodes.ready", "PASS", &[]);
    assert!(stderr.contains("swept") || stderr.contains("removed"), "the sweep is said: {stderr}");
    wait_clean(&client, "after the sweep").await;
}
