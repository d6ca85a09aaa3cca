//! `nodes.ready`, `kata.runtimeclass` and the Kata probe's diagnosis against the real node's
//! containerd: a RuntimeClass whose handler containerd has (runc) and one whose handler it lacks.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{NodePlane, assert_check, profile, report};
use crate::turns::{self, Need};

async fn apply(client: &kube::Client, obj: &serde_json::Value) {
    let (api, name) = crate::cluster::api_for(client, obj).await;
    api.patch(&name, &PatchParams::apply("osbx-node-test").force(), &Patch::Apply(obj)).await.unwrap();
}

/// A RuntimeClass as kata-deploy writes one (overhead, the Kata node selector), for `handler`.
pub(super) fn runtime_class(name: &str, handler: &str) -> serde_json::Value {
    json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": handler,
           "overhead": {"podFixed": {"cpu": "10m", "memory": "16Mi"}},
           "scheduling": {"nodeSelector": {"katacontainers.io/kata-runtime": "true"}}})
}

/// The node labelled as kata-deploy labels a node it installed, and the RuntimeClass `runc`
/// (handler `runc`, named as its handler as kata-deploy names its classes) that a Kata pool may
/// name to run its probes as plain containers.
pub(super) async fn runc_class_on_a_kata_node(client: &kube::Client, node: &str) {
    let label = json!({"metadata": {"labels": {"katacontainers.io/kata-runtime": "true"}}});
    Api::<Node>::all(client.clone()).patch(node, &PatchParams::default(), &Patch::Merge(&label)).await.unwrap();
    apply(client, &runtime_class("runc", "runc")).await;
}

/// The kernel version the node `node` reports (`status.nodeInfo.kernelVersion`).
pub(super) async fn kernel_of(client: &kube::Client, node: &str) -> String {
    Api::<Node>::all(client.clone()).get(node).await.unwrap().status.unwrap().node_info.unwrap().kernel_version
}

/// The node carries kata-deploy's label; a pool names a RuntimeClass. With handler `runc`
/// (containerd has it, and containerd 2 lists it in the real kubelet's `status.runtimeHandlers`),
/// `nodes.ready` and `kata.runtimeclass` pass and the guest-kernel probe runs as a real container: its kernel
/// is the node's, so `kata.guest-kernel` fails saying so. With a handler containerd lacks,
/// `nodes.ready` and `kata.runtimeclass` fail naming the node and the handlers it has
/// (containerd's default under the empty name) with the fix, and the probe pod never gets a sandbox: `kata.guest-kernel` quotes
/// containerd's own error (`no runtime for "…" is configured`), not an unrelated notice, and
/// names the cause and the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_classes_against_the_real_containerd() {
    let _turn = turns::take(Need::Node).await;
    let node = NodePlane::get();
    let client = node.client().await;
    let node_name = node.var("NODE_NAME");
    runc_class_on_a_kata_node(&client, node_name).await;
    let kernel = kernel_of(&client, node_name).await;

    // A class whose handler containerd has.
    let p = profile().pool("vm", "kata", [0, 1, 0, 1]).pool_set("vm", "runtimeClassName", "runc");
    let (code, checks, _) = node.verify(&p, "nodes.ready,kata.runtimeclass,kata.guest-kernel", &[]).await;
    report(&checks);
    assert_check(&checks, "nodes.ready", "PASS", &["1 for Kata"]);
    assert_check(&checks, "kata.runtimeclass", "PASS", &[&format!("runc → handler runc on {node_name}")]);
    assert_check(
        &checks,
        "kata.guest-kernel",
        "FAIL",
        &[&format!("guest {kernel} on node {node_name} (host {kernel})"), "its kernel is the host's"],
    );
    assert_eq!(code, Some(1));

    // A class whose handler containerd lacks.
    apply(&client, &runtime_class("kata-clh-runtime-rs", "kata-clh-runtime-rs")).await;
    let p = profile().pool("vm", "kata", [0, 1, 0, 1]).set("verify.probeDeadlineSeconds", 15);
    let (code, checks, _) = node.verify(&p, "nodes.ready,kata.runtimeclass,kata.guest-kernel", &[]).await;
    report(&checks);
    assert_check(
        &checks,
        "nodes.ready",
        "FAIL",
        &[
            "does not list runtime handler kata-clh-runtime-rs (has the default, runc)",
            "kata-deploy installs the handler",
        ],
    );
    assert_check(
        &checks,
        "kata.runtimeclass",
        "FAIL",
        &[
            &format!(
                "RuntimeClass kata-clh-runtime-rs: no Ready node it admits lists runtime handler kata-clh-runtime-rs ({node_name} has the default, runc)"
            ),
            "kata-deploy installs the handler",
        ],
    );
    assert_check(
        &checks,
        "kata.guest-kernel",
        "FAIL",
        &[
            "containerd has no Kata runtime configured on that node",
            "event FailedCreatePodSandBox: Failed to create pod sandbox",
            "no runtime for \"kata-clh-runtime-rs\" is configured",
            "kata-deploy drop-in",
        ],
    );
    let diagnosis = super::check(&checks, "kata.guest-kernel")["diagnosis"].as_str().unwrap_or_default().to_owned();
    let sandbox_event = diagnosis.find("FailedCreatePodSandBox").unwrap_or(usize::MAX);
    assert!(
        diagnosis.find("MissingClusterDNS").is_none_or(|dns| sandbox_event < dns),
        "the notice comes first: {diagnosis}"
    );
    assert_eq!(code, Some(1));
}
