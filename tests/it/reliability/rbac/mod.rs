//! A least-privilege CI account: `osbx rbac --for all` prints roles that let a user holding
//! nothing else (not even the default discovery and self-review bindings every authenticated user
//! has) apply, diff and verify; and every single permission in them is needed: without it, a
//! command's preflight stops before any write and names that permission. (`rollout`'s roles are
//! proven the same way against the real controllers, in `e2e::rollout`.)

pub(crate) mod atoms;
mod in_cluster;
mod status;

use std::path::PathBuf;

use atoms::{Target, args, atoms, prove, settle, user_may_do, without};
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::discovery::{Discovery, Scope};
use serde_json::{Value, json};

use crate::builder::TestProfile;
use crate::cluster::standin::{self, KataCluster, Scenario};
use crate::cluster::{self, OwnPlane};
use crate::support::{osbx, output_off_runtime, outputs};

const USER: &str = "rb-ci";
const KEY: &str = "rb-test-key-7c41";
const SMOKE_ID: &str = "spiffe://example.org/rb/smoke";
/// The checks that need the real OpenSandbox server (tests/it/verify/lifecycle.rs), skipped here.
const NEEDS_THE_SERVER: &str = "opensandbox.server,opensandbox.lifecycle,opensandbox.exec,opensandbox.reclaim";
/// The bindings through which every authenticated user may discover the API, read the version
/// and review its own access; removed, so that the printed roles must grant these too.
pub(crate) const DEFAULT_BINDINGS: [&str; 3] = ["system:discovery", "system:public-info-viewer", "system:basic-user"];

/// Two runc and two Kata pools (four Pools in one namespace: planned with one LIST, waited for
/// by name), a SPIFFE smoke identity, short probe deadlines.
fn profile(pools: &[&str]) -> TestProfile {
    let smoke = json!({"namespace": "rb-spire", "serviceAccount": "spire-smoke", "id": SMOKE_ID,
                       "retrySeconds": 3, "clusterSpiffeId": "rb-smoke"});
    pools.iter().fold(
        TestProfile::new("rb").set("verify.probeDeadlineSeconds", 4).set("verify.spiffe", smoke),
        |p, name| match name.strip_prefix("vm") {
            Some(_) => p.pool(name, "kata", [1, 1, 0, 2]),
            None => p.pool(name, "runc", [1, 2, 1, 4]),
        },
    )
}

/// A plane with the Flux, OpenSandbox and SPIRE CRDs, a Kata node, the stand-in controllers and
/// kubelet, and the CI user's kubeconfig.
struct World {
    plane: OwnPlane,
    dir: tempfile::TempDir,
    client: kube::Client,
    user: PathBuf,
    _controllers: standin::AbortOnDrop,
    _opensandbox: standin::AbortOnDrop,
    _kubelet: standin::AbortOnDrop,
}

impl World {
    async fn start() -> Self {
        let scenario = Scenario::healthy("rb-node", SMOKE_ID);
        let KataCluster { plane, client, controllers, opensandbox, kubelet, .. } =
            KataCluster::start("rb", Arc::new(Mutex::new(scenario))).await;
        let dir = tempfile::tempdir().unwrap();
        let user = cluster::user_kubeconfig(&plane.kubeconfig, USER, dir.path());
        Self { plane, dir, client, user, _controllers: controllers, _opensandbox: opensandbox, _kubelet: kubelet }
    }

    /// Run osbx as the CI user (`OSBX_API_KEY` set with `key`).
    async fn osbx(&self, args: &[&str], key: bool) -> Output {
        self.osbx_with(&self.user, args, key).await
    }

    /// Run osbx as the plane's admin (`OSBX_API_KEY` set with `key`).
    async fn osbx_as_admin(&self, args: &[&str], key: bool) -> Output {
        self.osbx_with(&self.plane.kubeconfig, args, key).await
    }

    async fn osbx_with(&self, kubeconfig: &std::path::Path, args: &[&str], key: bool) -> Output {
        let mut cmd = osbx();
        if key {
            cmd.env("OSBX_API_KEY", KEY);
        }
        cmd.current_dir(self.dir.path()).args(args);
        cmd.arg("--profile").arg(self.dir.path().join("profile.yaml")).arg("--kubeconfig").arg(kubeconfig);
        output_off_runtime(cmd).await
    }

    /// `osbx rbac` for the current profile, bound to the CI user: the objects it prints.
    async fn rbac(&self, args: &[&str]) -> Vec<Value> {
        let mut full = vec!["rbac", "--user", USER];
        full.extend(args);
        let out = tokio::task::spawn_blocking({
            let profile = self.dir.path().join("profile.yaml");
            let full: Vec<String> = full.iter().map(|s| (*s).to_owned()).collect();
            move || osbx().args(full).arg("--profile").arg(profile).output().unwrap()
        })
        .await
        .unwrap();
        let (stdout, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(stdout.starts_with("# osbx rbac --for "), "{stdout}");
        stdout.split("\n---\n").skip(1).map(|doc| serde_saphyr::from_str(doc).unwrap()).collect()
    }
}

async fn apply(client: &kube::Client, obj: &Value) {
    let (api, name) = cluster::api_for(client, obj).await;
    api.patch(&name, &PatchParams::apply("test").force(), &Patch::Apply(obj)).await.unwrap();
}

async fn namespace_names(client: &kube::Client) -> Vec<String> {
    cluster::namespace_names(client)
        .await
        .into_iter()
        .filter(|n| n.starts_with("rb-") || n.starts_with("osbx-"))
        .collect()
}

/// Bind the CI user to `objects` (printed by `osbx rbac`) and to nothing else: the default
/// bindings removed, and the authorizer seen to agree. The permissions, one by one.
async fn grant_only(client: &kube::Client, objects: &[Value]) -> Vec<atoms::Atom> {
    for obj in objects {
        apply(client, obj).await;
    }
    for name in DEFAULT_BINDINGS {
        Api::<ClusterRoleBinding>::all(client.clone()).delete(name, &DeleteParams::default()).await.unwrap();
    }
    let atoms = atoms(objects);
    // Wait until the authorizer sees the roles, and no longer the default bindings (which also
    // grant `/healthz`).
    for atom in &atoms {
        settle(client, USER, &objects[atom.role], atom, true).await;
    }
    let healthz = SubjectAccessReviewSpec {
        non_resource_attributes: Some(NonResourceAttributes {
            path: Some("/healthz".into()),
            verb: Some("get".into()),
        }),
        ..SubjectAccessReviewSpec::default()
    };
    let start = Instant::now();
    while user_may_do(client, USER, healthz.clone()).await {
        assert!(start.elapsed() < Duration::from_secs(10), "the default bindings are still in effect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    atoms
}

async fn discovery(client: &kube::Client) -> Discovery {
    Discovery::new(client.clone()).run_aggregated().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_roles_are_enough_for_apply_diff_and_verify_and_each_permission_is_needed() {
    let world = World::start().await;
    let client = &world.client;
    profile(&["pod-a", "pod-b", "vm-a", "vm-b"]).write_to(world.dir.path());
    let objects = world.rbac(&["--for", "all"]).await;
    let atoms = grant_only(client, &objects).await;
    let discovery = discovery(client).await;
    let before = namespace_names(client).await;

    // Each permission alone.
    let start = Instant::now();
    prove(&world, &discovery, &objects, &atoms, |atom| {
        // A dry run does not wait; what only the waits use (watch) is proven by an apply, which
        // preflight stops before its first write all the same.
        let apply: &[&str] = if atom.verb == "watch" { &["apply"] } else { &["apply", "--dry-run"] };
        vec![(args(apply), true), (args(&["verify"]), false)]
    })
    .await;
    #[allow(clippy::print_stderr, reason = "the time the per-permission runs take")]
    let () = eprintln!("rbac: {} permissions each proven needed in {:.1}s", atoms.len(), start.elapsed().as_secs_f64());
    assert!(atoms.len() > 40, "{atoms:?}");
    assert_eq!(namespace_names(client).await, before, "preflight stops before any write");
    let inventory = Api::<ConfigMap>::namespaced(client.clone(), "rb-flux").get_opt("osbx-inventory-rb-rb").await;
    assert!(inventory.unwrap().is_none(), "no inventory written");

    // With all of them: apply, diff and verify succeed as the CI user.
    let out = world.osbx(&["apply", "--timeout", "60s"], true).await;
    assert_eq!(out.status.code(), Some(0), "apply: {}", outputs(&out).1);
    let out = world.osbx(&["diff"], true).await;
    assert_eq!(out.status.code(), Some(0), "diff: {}{}", outputs(&out).0, outputs(&out).1);
    // The Lifecycle API checks need the real server (tests/it/verify/lifecycle.rs): the proxy
    // permissions are checked below with requests through the proxy instead.
    let out = world.osbx(&["verify", "--skip", NEEDS_THE_SERVER], false).await;
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "verify: {stdout}{stderr}");
    assert_eq!(stdout.lines().last(), Some("Ready"), "{stdout}");

    // The service proxy grants name the service as the API server authorizes it
    // (`<service>:<port>`): requests get past authorization (no such service here: 404/503).
    let user = cluster::client_for(&world.user).await;
    for method in [http::Method::GET, http::Method::POST, http::Method::DELETE] {
        let req = http::Request::builder()
            .method(method.clone())
            .uri("/api/v1/namespaces/rb-system/services/opensandbox-server:80/proxy/v1/sandboxes")
            .body(kube::client::Body::from(Vec::new()))
            .unwrap();
        let status = user.send(req).await.unwrap().status();
        assert_ne!(status, http::StatusCode::FORBIDDEN, "{method} through the service proxy");
    }

    // Pruning: the roles for `apply --prune` of the profile without pod-b (and nothing else)
    // delete it; without deleting Pools, preflight refuses and names the pool.
    for obj in objects.iter().rev().filter(|o| o["kind"] != "Namespace") {
        let (api, name) = cluster::api_for(client, obj).await;
        api.delete(&name, &DeleteParams::default()).await.unwrap();
    }
    profile(&["pod-a", "vm-a", "vm-b"]).write_to(world.dir.path());
    let objects = world.rbac(&["--for", "apply", "--prune"]).await;
    for obj in &objects {
        apply(client, obj).await;
    }
    let delete_pools = self::atoms(&objects)
        .into_iter()
        .find(|a| a.verb == "delete" && matches!(&a.target, Target::Resource { resource, .. } if resource == "pools"))
        .unwrap();
    let role = &objects[delete_pools.role];
    settle(client, USER, role, &delete_pools, true).await;
    apply(client, &without(role, &delete_pools)).await;
    settle(client, USER, role, &delete_pools, false).await;
    let out = world.osbx(&["apply", "--prune", "--dry-run"], true).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let line = "cannot delete pools.sandbox.opensandbox.io in namespace rb-sbx: pod-b";
    assert!(stderr.lines().any(|l| l.trim() == line), "{stderr}");
    apply(client, role).await;
    settle(client, USER, role, &delete_pools, true).await;
    let out = world.osbx(&["apply", "--prune", "-o", "json", "--timeout", "60s"], true).await;
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let deleted: Vec<&str> = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["action"] == "deleted")
        .filter_map(|c| c["object"].as_str())
        .collect();
    assert_eq!(deleted, ["Pool/rb-sbx/pod-b"], "{stdout}");
    let pools = cluster::pool_api_in(client, "rb-sbx").await;
    assert!(pools.get_opt("pod-b").await.unwrap().is_none(), "pruned");
}
