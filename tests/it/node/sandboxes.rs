//! A runc Pool's pods as real containers on the real node, a sandbox created and deleted on it
//! through the real OpenSandbox server, and a command run in it through execd (played, inside
//! the pool's container) behind the real server's proxy.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use super::{NodePlane, assert_check, profile, report};
use crate::builder::TestProfile;
use crate::cluster::RealServer;
use crate::turns::{self, Need};

const KEY: &str = "node-tier-7c2e91-api-key";

/// The pools layer of the profile (rendered by osbx) applied: the played OpenSandbox controller
/// fills the Pool with pods that containerd runs (a container ID, the node's bridge address),
/// `opensandbox.pools` passes, and `opensandbox.lifecycle.pod` creates a sandbox through the real
/// server, sees it Running on one of those pods, deletes it and sees it gone — the server needs
/// nothing from the pod itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_pods_are_real_containers_and_the_lifecycle_passes() {
    let _turn = turns::take(Need::Node).await;
    let node = NodePlane::get();
    let client = node.client().await;
    crate::cluster::install_crds(&client, "opensandbox").await;
    let p = profile().pool("pod", "runc", [1, 1, 1, 2]);

    apply_pools(&client, &p, 1).await;

    // Its pod runs as a real container.
    let pod = ready_pod(&client, "pod").await;
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

/// A pool whose template starts execd as OpenSandbox's own layout does (the execd installer
/// init container copies `/execd` and `/bootstrap.sh` of the execd image into the emptyDir at
/// `/opt/opensandbox`; the main container runs `bootstrap.sh <command>`) and one whose template
/// does not (the #1692 class: Running, nothing on port 44772). Through the real server 0.2.2's
/// proxy, `opensandbox.exec.live` reads the nonce back from the played execd in the real
/// container, and `opensandbox.exec.bare` fails naming the pool and #1692 (the proxy's 502),
/// while the Lifecycle check passes for both: Running is not enough.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_through_the_server_proxy_reaches_execd_and_a_pool_without_it_fails() {
    let _turn = turns::take(Need::Node).await;
    let node = NodePlane::get();
    let client = node.client().await;
    crate::cluster::install_crds(&client, "opensandbox").await;
    let p = with_execd(profile().pool("live", "runc", [1, 1, 1, 2]), node, "live").pool("bare", "runc", [1, 1, 1, 2]);
    apply_pools(&client, &p, 2).await;
    for pool in ["live", "bare"] {
        ready_pod(&client, pool).await;
    }

    let server = {
        let dir = node.dir.join("opensandbox-server-exec");
        let kubeconfig = node.kubeconfig.clone();
        tokio::task::spawn_blocking(move || RealServer::start(&dir, &kubeconfig, "nd-sbx", KEY, &[])).await.unwrap()
    };
    let key = key_file();
    let extra = ["--server-url", server.url.as_str(), "--api-key-file", key.as_str()];
    let (code, checks, stderr) = node.verify(&p, "opensandbox.lifecycle,opensandbox.exec", &extra).await;
    // Only the exec checks: the same sandboxes are made (one per pool), the Lifecycle verdicts
    // are not reported.
    let (live_code, live, live_stderr) = node.verify(&p, "opensandbox.exec.live", &extra).await;
    // The node is shared: its pools go before any assertion can stop the test.
    delete_pools(&client, &["live", "bare"]).await;
    report(&checks);
    assert_check(&checks, "opensandbox.lifecycle.live", "PASS", &["Running on pool live", "GET → 404"]);
    assert_check(&checks, "opensandbox.lifecycle.bare", "PASS", &["Running on pool bare", "GET → 404"]);
    assert_check(
        &checks,
        "opensandbox.exec.live",
        "PASS",
        &["execd through the server's proxy (port 44772): stdout osbx-", "execution_complete in"],
    );
    assert_check(
        &checks,
        "opensandbox.exec.bare",
        "FAIL",
        &[
            "/proxy/44772/ping (",
            "→ 502",
            "Could not connect to the backend sandbox",
            "the Pool template does not start execd (OpenSandbox #1692)",
            "pool bare",
        ],
    );
    assert_eq!(code, Some(1), "{stderr}");

    assert_eq!(live.len(), 1, "{live:#?}");
    assert_check(&live, "opensandbox.exec.live", "PASS", &["execution_complete"]);
    assert_eq!(live_code, Some(0), "{live_stderr}");
}

/// The pool `pool` of `p` started as OpenSandbox lays out execd: the execd installer init
/// container copies `/execd` and `/bootstrap.sh` of the execd image into the emptyDir at
/// `/opt/opensandbox`, and the main container runs `bootstrap.sh sleep 3600`.
pub(super) fn with_execd(p: TestProfile, node: &NodePlane, pool: &str) -> TestProfile {
    let bin = json!({"name": "opensandbox-bin", "mountPath": "/opt/opensandbox"});
    let installer = json!({
        "name": "execd-installer", "image": node.var("EXECD_IMAGE"), "command": ["/bin/sh", "-c"],
        "args": ["cp ./execd /opt/opensandbox/execd && cp ./bootstrap.sh /opt/opensandbox/bootstrap.sh && chmod 0755 /opt/opensandbox/execd /opt/opensandbox/bootstrap.sh"],
        "volumeMounts": [bin]});
    p.pool_set(pool, "command", json!(["/opt/opensandbox/bootstrap.sh", "sleep", "3600"]))
        .pool_set(pool, "env", json!([{"name": "EXECD", "value": "/opt/opensandbox/execd"}]))
        .pool_set(pool, "volumeMounts", json!([bin]))
        .pool_set(pool, "initContainers", json!([installer]))
        .pool_set(pool, "volumes", json!([{"name": "opensandbox-bin", "emptyDir": {}}]))
}

/// Apply the pools layer's objects of `profile` as osbx renders them (its namespace first):
/// `count` Pools.
pub(super) async fn apply_pools(client: &kube::Client, profile: &TestProfile, count: usize) {
    let loaded = osbx::profile::from_value("node profile", &serde_saphyr::from_str(&profile.yaml()).unwrap()).unwrap();
    let rendered = osbx::commands::renderer(None).unwrap().render(&loaded).unwrap();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nd-sbx"}});
    let pools: Vec<serde_json::Value> =
        rendered.objects().into_iter().filter(|o| o.object.id.kind() == "Pool").map(|o| o.object.value).collect();
    assert_eq!(pools.len(), count);
    for obj in std::iter::once(&ns).chain(&pools) {
        let (api, name) = crate::cluster::api_for(client, obj).await;
        api.patch(&name, &PatchParams::apply("osbx-node-test").force(), &Patch::Apply(obj)).await.unwrap();
    }
}

/// A Ready pod of `pool`, once the Pool counts one available (the played controller updates its
/// status after the pod is Ready; `opensandbox.pools` reads that status), within 60 s.
pub(super) async fn ready_pod(client: &kube::Client, pool: &str) -> Pod {
    let start = Instant::now();
    let pod = ready_pod_only(client, pool).await;
    let object = json!({"apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": "Pool",
                        "metadata": {"name": pool, "namespace": "nd-sbx"}});
    let (api, name) = crate::cluster::api_for(client, &object).await;
    loop {
        let available = api.get(&name).await.ok().and_then(|p| p.data["status"]["available"].as_i64());
        if available.is_some_and(|n| n >= 1) {
            return pod;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "Pool {pool} never counted its Ready pod available");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A Ready pod of `pool` (within 60 s).
async fn ready_pod_only(client: &kube::Client, pool: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "nd-sbx");
    let start = Instant::now();
    let labels = format!("sandbox.opensandbox.io/pool-name={pool}");
    loop {
        let list = pods.list(&ListParams::default().labels(&labels)).await.unwrap();
        let ready = list.items.into_iter().find(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        });
        if let Some(p) = ready {
            return p;
        }
        if start.elapsed() >= Duration::from_secs(60) {
            let all = pods.list(&ListParams::default()).await.unwrap();
            let states: Vec<String> = all
                .items
                .iter()
                .map(|p| format!("{}: {:?}", p.metadata.name.clone().unwrap_or_default(), p.status))
                .collect();
            panic!("no pod of pool {pool} became Ready on the node; the pods in nd-sbx: {states:#?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Delete the Pools `names` (their pods go with them), so that later tests see the node as before.
pub(super) async fn delete_pools(client: &kube::Client, names: &[&str]) {
    for name in names {
        let pool = json!({"apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": "Pool",
                          "metadata": {"name": name, "namespace": "nd-sbx"}});
        let (api, name) = crate::cluster::api_for(client, &pool).await;
        let _ = api.delete(&name, &kube::api::DeleteParams::default()).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), "nd-sbx");
    let labels = format!("sandbox.opensandbox.io/pool-name in ({})", names.join(","));
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        match pods.list(&ListParams::default().labels(&labels)).await {
            Ok(list) if list.items.is_empty() => return,
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
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
