//! A runc Pool's pods as real containers on the real node, and a sandbox created and deleted
//! on it through the real OpenSandbox server.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use super::{NodePlane, assert_check, profile, report};
use crate::cluster::RealServer;
use crate::e2e::SERIAL;

const KEY: &str = "node-tier-7c2e91-api-key";

/// The pools layer of the profile (rendered by osbx) applied: the played OpenSandbox controller
/// fills the Pool with pods that containerd runs (a container ID, the node's bridge address),
/// `opensandbox.pools` passes, and `opensandbox.lifecycle.pod` creates a sandbox through the real
/// server, sees it Running on one of those pods, deletes it and sees it gone — the server needs
/// nothing from the pod itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_pods_are_real_containers_and_the_lifecycle_passes() {
    let _turn = SERIAL.lock().await;
    let node = NodePlane::get();
    let client = node.client().await;
    crate::cluster::install_crds(&client, "opensandbox").await;
    let p = profile().pool("pod", "runc", [1, 1, 1, 2]);

    // The pools layer's objects, as osbx renders them.
    let loaded = osbx::profile::from_value("node profile", &serde_saphyr::from_str(&p.yaml()).unwrap()).unwrap();
    let rendered = osbx::render::Renderer::new(None).unwrap().render(&loaded).unwrap();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nd-sbx"}});
    let pools: Vec<serde_json::Value> =
        rendered.objects().into_iter().filter(|o| o.object.id.kind() == "Pool").map(|o| o.object.value).collect();
    assert_eq!(pools.len(), 1);
    for obj in std::iter::once(&ns).chain(&pools) {
        let (api, name) = crate::cluster::api_for(&client, obj).await;
        api.patch(&name, &PatchParams::apply("osbx-node-test").force(), &Patch::Apply(obj)).await.unwrap();
    }

    // Its pod runs as a real container.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "nd-sbx");
    let start = Instant::now();
    let pod = loop {
        let list = pods.list(&ListParams::default().labels("sandbox.opensandbox.io/pool-name=pod")).await.unwrap();
        let ready = list.items.into_iter().find(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        });
        if let Some(p) = ready {
            break p;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no pool pod became Ready on the node");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let status = pod.status.unwrap();
    let cid = status.container_statuses.unwrap()[0].container_id.clone().unwrap_or_default();
    assert!(cid.starts_with("containerd://"), "{cid}");
    assert_eq!(status.host_ip.as_deref(), Some(node.var("NODE_IP")));
    assert!(status.pod_ip.unwrap_or_default().starts_with("198.18.0."), "a pod address on the node's bridge");

    let server = {
        let dir = node.dir.join("opensandbox-server");
        let kubeconfig = node.kubeconfig.clone();
        tokio::task::spawn_blocking(move || RealServer::start(&dir, &kubeconfig, "nd-sbx", KEY, &[])).await.unwrap()
    };
    let key = key_file();
    let extra = ["--server-url", server.url.as_str(), "--api-key-file", key.as_str()];
    let (code, checks, _) = node.verify(&p, "opensandbox.pools,opensandbox.lifecycle", &extra).await;
    report(&checks);
    assert_check(&checks, "opensandbox.pools", "PASS", &["pod: total 1, available 1"]);
    assert_check(&checks, "opensandbox.lifecycle.pod", "PASS", &["Running on pool pod", "deleted", "GET → 404"]);
    assert_eq!(code, Some(0));
}

/// A file holding the API key (`--api-key-file`), kept for the test binary's life.
fn key_file() -> String {
    static FILE: std::sync::OnceLock<tempfile::NamedTempFile> = std::sync::OnceLock::new();
    let f = FILE.get_or_init(|| {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), KEY).unwrap();
        f
    });
    f.path().display().to_string()
}
