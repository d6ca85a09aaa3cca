//! Each documented failure mode fails with its own diagnosis, on a world of its own.

use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::{SMOKE_ID, World, apply, assert_check};
use crate::cluster::{self, standin};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_kernel_equal_to_the_hosts_is_not_a_kata_vm() {
    let world = World::start().await;
    world.set(|s| s.guest_kernel = "6.8.0-45-generic".into());
    let (code, checks) = world.verify("kata.guest-kernel").await;
    assert_eq!(code, Some(1));
    assert_check(&checks, "kata.guest-kernel", "FAIL", "not running in a Kata VM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_kvm_fails_the_host_check() {
    let world = World::start().await;
    world.set(|s| s.kvm = false);
    let (code, checks) = world.verify("kata.host-kvm").await;
    assert_eq!(code, Some(1));
    assert_check(&checks, "kata.host-kvm", "FAIL", "/dev/kvm is not a character device");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_without_shared_memory_fails_the_vmm_check() {
    let world = World::start().await;
    world.set(|s| s.shared_memory = false);
    let (_, checks) = world.verify("kata.vmm-shared-memory").await;
    assert_check(&checks, "kata.vmm-shared-memory", "FAIL", "virtio-fs requires shared memory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_for_the_wrong_service_account_is_a_catch_all() {
    let world = World::start().await;
    world.set(|s| s.wrong_id = Some("spiffe://ddupan.top/ns/vf-spire/sa/spire-smoke-wrong".into()));
    let (_, checks) = world.verify("spiffe").await;
    assert_check(&checks, "spiffe.issued", "PASS", SMOKE_ID);
    assert_check(&checks, "spiffe.denied", "FAIL", "catch-all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_workload_api_is_an_error_never_a_pass() {
    let world = World::start().await;
    world.set(|s| s.workload_api_error = Some("rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing: dial unix /spiffe-workload-api/spire-agent.sock: connect: connection refused\"".into()));
    let (code, checks) = world.verify("spiffe").await;
    assert_eq!(code, Some(1), "broken infrastructure is never a pass");
    assert_check(&checks, "spiffe.issued", "ERROR", "do not cross the VM boundary");
    assert_check(&checks, "spiffe.denied", "ERROR", "would prove nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_identity_for_the_smoke_service_account_names_the_clusterspiffeid() {
    let world = World::start().await;
    world.set(|s| s.smoke_id = None);
    let (_, checks) = world.verify("spiffe.issued").await;
    assert_check(&checks, "spiffe.issued", "FAIL", "ClusterSPIFFEID vf-smoke does not exist");
    // The smoke ClusterSPIFFEID exists but carries a className no controller processes.
    let id = json!({"apiVersion": "spire.spiffe.io/v1alpha1", "kind": "ClusterSPIFFEID", "metadata": {"name": "vf-smoke"},
                    "spec": {"className": "other-class", "spiffeIDTemplate": SMOKE_ID, "workloadSelectorTemplates": ["k8s:sa:spire-smoke"]}});
    apply(&world.client, &id).await;
    let (_, checks) = world.verify("spiffe.issued").await;
    assert_check(
        &checks,
        "spiffe.issued",
        "FAIL",
        "ClusterSPIFFEID vf-smoke has no status.stats: the installed spire-controller-manager ignores it (its className is not \"other-class\"",
    );
}

/// A Pool without capacity: the Pools check fails it, and the exec check reports the pool as
/// full (no sandbox is created, so no server is needed), not as a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_without_capacity_fails_the_pools_check_and_exec_calls_it_full() {
    let world = World::start().await;
    world.opensandbox.lock().unwrap().take();
    let pools = cluster::pool_api_in(&world.client, "vf-sbx").await;
    let pool = pools.get("pod").await.unwrap();
    let generation = pool.metadata.generation.unwrap_or(1);
    let status = json!({"status": {"observedGeneration": generation, "total": 1, "allocated": 0, "available": 0, "revision": "x"}});
    pools.patch_status("pod", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    let (_, checks) = world.verify("opensandbox.pools").await;
    assert_check(&checks, "opensandbox.pools", "FAIL", "available 0 < 1");
    let (code, checks) = world.verify("opensandbox.exec.pod").await;
    assert_eq!(checks.len(), 1, "{checks:#?}");
    assert_check(&checks, "opensandbox.exec.pod", "FAIL", "Pool pod full: available 0");
    assert_check(&checks, "opensandbox.exec.pod", "FAIL", "every pod of the pool is taken");
    assert_eq!(code, Some(1));
}

/// A Flux object whose controller has not seen its latest generation (controllers stopped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flux_object_behind_its_generation_is_not_ready() {
    let world = World::start().await;
    world.controllers.lock().unwrap().take();
    let gvk = kube::core::GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", "GitRepository");
    let ar = kube::discovery::pinned_kind(&world.client, &gvk).await.unwrap().0;
    let repos: Api<DynamicObject> = Api::namespaced_with(world.client.clone(), "vf-system", &ar);
    let status = json!({"status": {"observedGeneration": 0}});
    repos.patch_status("opensandbox", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    let (_, checks) = world.verify("flux.layers").await;
    assert_check(&checks, "flux.layers", "FAIL", "GitRepository/vf-system/opensandbox: InProgress");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_runtimeclass_fails_the_runtimeclass_check() {
    let world = World::start().await;
    let rcs: Api<RuntimeClass> = Api::all(world.client.clone());
    rcs.delete("kata-clh-runtime-rs", &DeleteParams::default()).await.unwrap();
    let (_, checks) = world.verify("kata.runtimeclass").await;
    assert_check(&checks, "kata.runtimeclass", "FAIL", "RuntimeClass kata-clh-runtime-rs not found");
}

/// `osbx verify --only kata.runtimeclass` on `world`, which must exit 1 with the check ending
/// `outcome` and saying `fragment`; returns the checks.
async fn runtimeclass_not_passed(world: &World, outcome: &str, fragment: &str) -> Vec<Value> {
    let (code, checks) = world.verify("kata.runtimeclass").await;
    assert_eq!(code, Some(1));
    assert_check(&checks, "kata.runtimeclass", outcome, fragment);
    checks
}

/// `kata.runtimeclass` asks the nodes, not only the RuntimeClass: the one Kata node lacking the
/// handler fails it naming the node and the handlers it has; a node that publishes no
/// `status.runtimeHandlers` gives no verdict and says why; with no Ready node the class's
/// `nodeSelector` admits, it fails naming the selector. (The real kubelet and containerd:
/// `node::runtime`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtimeclass_check_reads_the_handlers_of_the_nodes_the_class_admits() {
    let world = World::start().await;
    // The labels kata-deploy sets, which the stand-in's RuntimeClass selects.
    let kata = json!({"katacontainers.io/kata-runtime": "true", "kata-deploy.katacontainers.io/default": "true"});
    let state = |ready, runtime_handlers| standin::NodeState {
        ready,
        kernel: "6.8.0-45-generic",
        runtime_handlers,
        labels: kata.clone(),
    };
    let (code, checks) = world.verify("kata.runtimeclass").await;
    assert_eq!(code, Some(0), "{checks:#?}");
    assert_check(&checks, "kata.runtimeclass", "PASS", "kata-clh-runtime-rs → handler kata-clh-runtime-rs on vf-node");

    standin::node(&world.client, "vf-node", &state(true, Some(&["", "runc"]))).await;
    let checks = runtimeclass_not_passed(
        &world,
        "FAIL",
        "RuntimeClass kata-clh-runtime-rs: no Ready node it admits lists runtime handler kata-clh-runtime-rs (vf-node has the default, runc)",
    )
    .await;
    assert_check(&checks, "kata.runtimeclass", "FAIL", "kata-deploy installs the handler");

    standin::node(&world.client, "vf-node", &state(true, None)).await;
    runtimeclass_not_passed(
        &world,
        "ERROR",
        "vf-node publishes no status.runtimeHandlers (Kubernetes < 1.30 or containerd < 2.0): whether it has handler kata-clh-runtime-rs cannot be told",
    )
    .await;

    // A second, Ready node with the handler but without the Kata label is not admitted.
    let plain = standin::NodeState {
        ready: true,
        kernel: "6.8.0-45-generic",
        runtime_handlers: Some(&["runc", "kata-clh-runtime-rs"]),
        labels: json!({}),
    };
    standin::node(&world.client, "vf-plain", &plain).await;
    standin::node(&world.client, "vf-node", &state(false, Some(&["runc", "kata-clh-runtime-rs"]))).await;
    runtimeclass_not_passed(
        &world,
        "FAIL",
        "RuntimeClass kata-clh-runtime-rs: no Ready node carries its nodeSelector kata-deploy.katacontainers.io/default=true, katacontainers.io/kata-runtime=true",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_is_not_ready_and_an_unfinished_kata_install_fail_the_nodes_check() {
    let world = World::start().await;
    standin::node(
        &world.client,
        "vf-node",
        &standin::NodeState {
            ready: false,
            kernel: "6.8.0-45-generic",
            runtime_handlers: Some(&["runc"]),
            labels: json!({"katacontainers.io/kata-runtime": "false"}),
        },
    )
    .await;
    let (_, checks) = world.verify("nodes.ready").await;
    assert_check(&checks, "nodes.ready", "FAIL", "vf-node not Ready: container runtime is down");
    assert_check(
        &checks,
        "nodes.ready",
        "FAIL",
        "has katacontainers.io/kata-runtime=\"false\": the install claimed the node but did not finish",
    );
}
