//! The osbx image on the real node: the binary under test packaged as the Containerfile's runtime
//! stage lays it out (`tests/cluster/osbx-image`: `/usr/local/bin/osbx`, its libraries, user
//! 65532, no registry), imported into the node's containerd, run by the real kubelet and runc,
//! and reaching the API server in-cluster: no kubeconfig, the pod's service-account token and CA,
//! the API server at node.env's `API_FROM_PODS_HOST:API_FROM_PODS_PORT` (the relay of
//! `tests/cluster/up-node.sh`; the node tier has no kube-proxy for the `kubernetes` Service).
//! What an in-cluster acceptance run (a Job or Deployment of the osbx image) builds on.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, ContainerStatus, Pod};
use kube::api::{Api, DeleteParams, LogParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::NodePlane;
use crate::builder::TestProfile;
use crate::support::{osbx, output_off_runtime, outputs, root};
use crate::turns::{self, Need};

/// The image's reference in the node's containerd.
const IMAGE: &str = "osbx.test/osbx:test";

/// The osbx image of the binary under test, built by `tests/cluster/osbx-image` and imported into
/// the node's containerd once per test binary; its reference. Pods use it with `imagePullPolicy:
/// Never` (no registry serves it); the kubelet's image GC never removes it (`up-node.sh`).
pub fn osbx_image(node: &NodePlane) -> &'static str {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let tar = node.dir.join("osbx-image.tar");
        let out = std::process::Command::new(root().join("tests/cluster/osbx-image"))
            .arg(env!("CARGO_BIN_EXE_osbx"))
            .arg(&tar)
            .output()
            .unwrap();
        assert!(out.status.success(), "tests/cluster/osbx-image: {}", String::from_utf8_lossy(&out.stderr));
        node.import_image(&tar);
    });
    IMAGE
}

/// A container's `env` entries that point in-cluster clients (kube-rs `Config::incluster`, the
/// Go client's `rest.InClusterConfig`) at the API server through the node's relay: they override
/// the `kubernetes` Service's variables the kubelet injects, whose ClusterIP routes nowhere here.
pub fn in_cluster_env(node: &NodePlane) -> Value {
    json!([
        {"name": "KUBERNETES_SERVICE_HOST", "value": node.var("API_FROM_PODS_HOST")},
        {"name": "KUBERNETES_SERVICE_PORT", "value": node.var("API_FROM_PODS_PORT")},
    ])
}

/// The service-account volume (and its mount) a pod of the node tier names itself: the plane runs
/// without the ServiceAccount admission plugin (`tests/cluster/up`), which elsewhere adds exactly
/// this to every pod (the token of the pod's ServiceAccount, `kube-root-ca.crt`'s `ca.crt`, the
/// namespace) at `/var/run/secrets/kubernetes.io/serviceaccount`.
pub fn service_account_volume() -> (Value, Value) {
    let volume = json!({"name": "kube-api-access", "projected": {"defaultMode": 0o644, "sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
    ]}});
    let mount = json!({"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true});
    (volume, mount)
}

async fn apply(client: &kube::Client, obj: &Value) {
    let (api, name) = crate::cluster::api_for(client, obj).await;
    api.patch(&name, &PatchParams::apply("osbx-node-test").force(), &Patch::Apply(obj)).await.unwrap();
}

/// What `osbx status` in the pod reads with: the namespaces (`namespaces[0]` the pod's), its
/// ServiceAccount `sa` bound to the roles `osbx rbac --for status --service-account` prints (which
/// are returned), the profile in the ConfigMap `profile`; and the check that the pod's `ca.crt`
/// will be the serving CA.
async fn status_fixture(client: &kube::Client, node: &NodePlane, namespaces: &[&str; 4], sa: &str) -> Vec<Value> {
    let ns = namespaces[0];
    let profile = TestProfile::new("ndimg").pool("vm", "kata", [0, 1, 0, 1]).pool_set("vm", "runtimeClassName", "runc");
    let dir = tempfile::tempdir().unwrap();
    let path = profile.write_to(dir.path());
    let mut cmd = osbx();
    cmd.args(["rbac", "--for", "status", "--service-account", &format!("{ns}/{sa}"), "--profile"]).arg(&path);
    let out = output_off_runtime(cmd).await;
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "osbx rbac: {stderr}");
    let roles: Vec<Value> = stdout.split("\n---\n").skip(1).map(|d| serde_saphyr::from_str(d).unwrap()).collect();
    for name in namespaces {
        apply(client, &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})).await;
    }
    apply(client, &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": ns}}))
        .await;
    for role in &roles {
        apply(client, role).await;
    }
    let data = json!({"profile.yaml": profile.yaml()});
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "profile", "namespace": ns}, "data": data});
    apply(client, &cm).await;
    // kube-controller-manager publishes the serving CA in every namespace (the pod's ca.crt).
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let ca = crate::cluster::wait_for("kube-root-ca.crt", Duration::from_secs(30), || {
        let cms = cms.clone();
        async move { cms.get_opt("kube-root-ca.crt").await.ok()?.and_then(|c| c.data?.remove("ca.crt")) }
    })
    .await;
    let serving_ca = std::fs::read_to_string(node.dir.join("serving-ca.crt")).unwrap();
    assert_eq!(ca.trim(), serving_ca.trim(), "kube-root-ca.crt holds the API server's serving CA");
    roles
}

/// Delete the cluster-wide roles of `roles` and the `namespaces` (with what is in them).
async fn remove(client: &kube::Client, roles: &[Value], namespaces: &[&str]) {
    for kind in ["ClusterRoleBinding", "ClusterRole"] {
        for role in roles.iter().filter(|r| r["kind"] == kind) {
            let (api, name) = crate::cluster::api_for(client, role).await;
            api.delete(&name, &DeleteParams::default()).await.unwrap();
        }
    }
    for name in namespaces {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        let (api, name) = crate::cluster::api_for(client, &obj).await;
        api.delete(&name, &DeleteParams::default()).await.unwrap();
    }
}

/// The terminated state of a container (exit code, reason), once it has one.
fn terminated(statuses: Option<&Vec<ContainerStatus>>, name: &str) -> Option<(i32, String)> {
    let s = statuses?.iter().find(|s| s.name == name)?;
    let t = s.state.as_ref()?.terminated.as_ref()?;
    Some((t.exit_code, t.reason.clone().unwrap_or_default()))
}

/// The osbx image runs as a real container, as its non-root user (`runAsNonRoot`: the kubelet
/// checks the image's user), and `osbx status` in it, under the acceptance pod's security
/// settings (read-only root, `/tmp` an emptyDir), reaches the API server in-cluster: no
/// kubeconfig (none given, `KUBECONFIG` unset, no `~/.kube/config`), so it takes the pod's
/// in-cluster config (the service-account token, `ca.crt` from `kube-root-ca.crt` verifying the
/// serving certificate at the relay's address) and reads the platform as a ServiceAccount bound
/// to exactly the roles `osbx rbac --for status --service-account` prints: exit 1 (nothing of the
/// profile is deployed, so not Ready) with the overview, whose runtime class names this node
/// (the real Node read from the pod), not exit 2 (unreachable, refused). Its init container
/// writes under `/tmp` as that user (`osbx init`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stderr)]
async fn the_osbx_image_runs_in_a_pod_and_reaches_the_api_server() {
    let _turn = turns::take(Need::Node).await;
    let start = Instant::now();
    let node = NodePlane::get();
    let client = node.client().await;
    let image = tokio::task::spawn_blocking(move || osbx_image(NodePlane::get())).await.unwrap();
    crate::cluster::install_crds(&client, "opensandbox").await;
    super::runtime::runc_class_on_a_kata_node(&client, node.var("NODE_NAME")).await;

    let (ns, sa) = ("ndimg-run", "osbx");
    let namespaces = [ns, "ndimg-flux", "ndimg-system", "ndimg-sbx"];
    let roles = status_fixture(&client, node, &namespaces, sa).await;

    let (sa_volume, sa_mount) = service_account_volume();
    // The status container runs as the acceptance Job's and Deployment's does (read-only root,
    // `/tmp` an emptyDir, no capabilities, RuntimeDefault seccomp); the init container as the
    // image's own user, writing the image's `/tmp`.
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "osbx", "namespace": ns}, "spec": {
        "restartPolicy": "Never", "serviceAccountName": sa, "activeDeadlineSeconds": 120,
        "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
        "volumes": [sa_volume, {"name": "profile", "configMap": {"name": "profile"}}, {"name": "tmp", "emptyDir": {}}],
        "initContainers": [{"name": "writes-tmp", "image": image, "imagePullPolicy": "Never",
                            "args": ["init", "/tmp/osbx/profile.yaml"]}],
        "containers": [{"name": "status", "image": image, "imagePullPolicy": "Never",
                        "args": ["status", "--profile", "/etc/osbx/profile.yaml", "-o", "json"],
                        "env": in_cluster_env(node),
                        "securityContext": {"runAsUser": 65532, "runAsGroup": 65532, "allowPrivilegeEscalation": false,
                                            "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [sa_mount, {"name": "profile", "mountPath": "/etc/osbx", "readOnly": true},
                                         {"name": "tmp", "mountPath": "/tmp"}]}]}});
    apply(&client, &pod).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let done = crate::cluster::wait_for("the osbx pod to finish", Duration::from_secs(120), || {
        let pods = pods.clone();
        async move {
            let status = pods.get("osbx").await.ok()?.status?;
            matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")).then_some(status)
        }
    })
    .await;
    let logs = |container: &'static str| {
        let pods = pods.clone();
        async move {
            let lp = LogParams { container: Some(container.to_owned()), ..LogParams::default() };
            pods.logs("osbx", &lp).await.unwrap_or_else(|e| format!("(no log: {e})"))
        }
    };
    let (init_log, status_log) = (logs("writes-tmp").await, logs("status").await);
    let init = terminated(done.init_container_statuses.as_ref(), "writes-tmp");
    let main = terminated(done.container_statuses.as_ref(), "status");

    // The node is shared: what this test made goes before any assertion can stop it.
    remove(&client, &roles, &namespaces).await;

    eprintln!("node-tier: the osbx image's init container: {init:?}\n{init_log}");
    eprintln!("node-tier: osbx status in the pod: {main:?}\n{status_log}");
    assert_eq!(init, Some((0, "Completed".to_owned())), "osbx init as user 65532: {init_log}");
    assert!(init_log.contains("/tmp/osbx/profile.yaml written"), "{init_log}");
    assert_eq!(main.as_ref().map(|m| m.0), Some(1), "osbx status in-cluster (exit 1: not Ready): {status_log}");
    let json_start = status_log.find("{\n").unwrap_or_else(|| panic!("no JSON in the log: {status_log}"));
    let overview: Value = serde_json::Deserializer::from_str(&status_log[json_start..])
        .into_iter()
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("the overview JSON: {status_log}"));
    assert_eq!(overview["cluster"], "ndimg", "{overview:#}");
    assert_eq!(overview["ready"], false, "{overview:#}");
    for layer in overview["layers"].as_array().unwrap() {
        assert_eq!(layer["exists"], false, "{layer:#}");
        assert_eq!(layer["message"], "no such Kustomization", "{layer:#}");
    }
    assert_eq!(overview["pools"][0]["message"], "no such Pool", "{overview:#}");
    let runtime = &overview["runtimes"][0];
    assert_eq!(runtime["class"], "runc", "{overview:#}");
    assert_eq!(runtime["nodes"], json!([node.var("NODE_NAME")]), "the real Node, read from the pod: {overview:#}");
    eprintln!("node-tier: the osbx image in a pod, in-cluster: {:.1}s", start.elapsed().as_secs_f64());
}
