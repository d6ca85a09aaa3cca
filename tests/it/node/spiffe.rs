//! `spiffe.issued` and `spiffe.denied` against the real SPIRE server and agent: the agent attests
//! each probe through the real kubelet; the played spire-controller-manager turns the smoke
//! ClusterSPIFFEID into registration entries.

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde_json::json;

use super::{NodePlane, assert_check, profile, report};
use crate::support::root;
use crate::turns::{self, Need};

/// The smoke fixture (what the spire-smoke layer renders), with the node's SPIRE class.
pub(super) async fn smoke_fixture(client: &kube::Client, node: &NodePlane, id: &str) {
    crate::cluster::install_crds(client, "spire").await;
    let objects = [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nd-smoke"}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "spire-smoke", "namespace": "nd-smoke"}}),
        json!({"apiVersion": "spire.spiffe.io/v1alpha1", "kind": "ClusterSPIFFEID", "metadata": {"name": "nd-smoke"},
               "spec": {"className": node.var("SPIRE_CLASS_NAME"), "spiffeIDTemplate": id, "podSelector": {},
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "nd-smoke"}},
                        "workloadSelectorTemplates": ["k8s:sa:spire-smoke"]}}),
    ];
    for obj in &objects {
        let (api, name) = crate::cluster::api_for(client, obj).await;
        api.patch(&name, &PatchParams::apply("osbx-node-test").force(), &Patch::Apply(obj)).await.unwrap();
    }
}

/// The profile's `verify.spiffe` for the smoke fixture, expecting `id`.
pub(super) fn smoke_section(node: &NodePlane, id: &str) -> serde_json::Value {
    json!({"namespace": "nd-smoke", "serviceAccount": "spire-smoke", "id": id, "image": node.var("SPIRE_AGENT_IMAGE"),
           "socketHostPath": node.var("SPIRE_AGENT_SOCKET_DIR"), "clusterSpiffeId": "nd-smoke", "retrySeconds": 45})
}

fn spiffe_profile(node: &NodePlane, id: &str) -> crate::builder::TestProfile {
    profile().set("verify.spiffe", smoke_section(node, id))
}

fn agent(action: &str, node: &NodePlane) {
    let status = std::process::Command::new(root().join("tests/cluster/node-agent"))
        .args([action, &node.dir.display().to_string()])
        .status()
        .expect("tests/cluster/node-agent");
    assert!(status.success(), "tests/cluster/node-agent {action} failed");
}

/// For real: the smoke ServiceAccount's probe gets an X.509 SVID with exactly the rendered
/// SPIFFE ID and the wrong ServiceAccount's is denied with the agent's own words (read from the
/// container log, as the SVID file is never written). Then each failure with its evidence: a
/// profile expecting another trust domain (FAIL naming the ID the server issued); the
/// ClusterSPIFFEID gone, so no entry (FAIL with the agent's denial, naming the missing
/// ClusterSPIFFEID); the CSI volume without a CSI driver on the node (ERROR quoting the
/// kubelet); the agent down (ERROR quoting the Workload API client).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spiffe_issued_and_denied_against_real_spire() {
    let _turn = turns::take(Need::Node).await;
    let node = NodePlane::get();
    let client = node.client().await;
    let td = node.var("SPIRE_TRUST_DOMAIN");
    let id = format!("spiffe://{td}/sandbox/smoke");
    smoke_fixture(&client, node, &id).await;

    let (code, checks, _) = node.verify(&spiffe_profile(node, &id), "spiffe", &[]).await;
    report(&checks);
    assert_check(&checks, "spiffe.issued", "PASS", &[&format!("spire-smoke got {id}")]);
    assert_check(
        &checks,
        "spiffe.denied",
        "PASS",
        &["spire-smoke-wrong denied", "in one pod", "rpc error: code = PermissionDenied desc = no identity issued"],
    );
    assert_eq!(code, Some(0));
    let ids: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("spire.spiffe.io", "v1alpha1", "ClusterSPIFFEID"),
            "clusterspiffeids",
        ),
    );
    let stats = ids.get("nd-smoke").await.unwrap().data["status"]["stats"].clone();
    assert_eq!(stats["namespacesSelected"], 1, "{stats}");

    // The server issues in its own trust domain; the profile expects another.
    let other = "spiffe://other.test/sandbox/smoke";
    let (_, checks, _) = node.verify(&spiffe_profile(node, other), "spiffe.issued", &[]).await;
    report(&checks);
    assert_check(&checks, "spiffe.issued", "FAIL", &[&format!("got {id}"), &format!("expected exactly {other}")]);

    // No ClusterSPIFFEID, so no entry: denied, and the reason named.
    ids.delete("nd-smoke", &DeleteParams::default()).await.unwrap();
    let p = spiffe_profile(node, &id).set("verify.spiffe.retrySeconds", 15);
    let (_, checks, _) = node.verify(&p, "spiffe.issued", &[]).await;
    report(&checks);
    assert_check(
        &checks,
        "spiffe.issued",
        "FAIL",
        &["no identity after 15s", "no identity issued", "ClusterSPIFFEID nd-smoke does not exist"],
    );
    smoke_fixture(&client, node, &id).await;

    // The default Workload API volume is the SPIFFE CSI driver, which this node does not have.
    let p = profile()
        .set(
            "verify.spiffe",
            json!({"namespace": "nd-smoke", "serviceAccount": "spire-smoke", "id": id, "image": node.var("SPIRE_AGENT_IMAGE"),
                   "clusterSpiffeId": "nd-smoke", "retrySeconds": 20}),
        )
        .set("verify.probeDeadlineSeconds", 20);
    let (_, checks, _) = node.verify(&p, "spiffe.issued", &[]).await;
    report(&checks);
    assert_check(
        &checks,
        "spiffe.issued",
        "ERROR",
        &["the SPIFFE CSI node plugin is not registered on that node", "driver name csi.spiffe.io not found"],
    );

    // The agent down: its socket file stays, nothing answers.
    agent("stop", node);
    let (code, checks, _) = node.verify(&spiffe_profile(node, &id), "spiffe", &[]).await;
    agent("start", node);
    report(&checks);
    assert_check(
        &checks,
        "spiffe.issued",
        "ERROR",
        &["no SPIRE agent listens on the Workload API socket", "connect: connection refused"],
    );
    assert_check(&checks, "spiffe.denied", "ERROR", &["would prove nothing"]);
    assert_eq!(code, Some(1));
}
