//! A kubelet (and scheduler) for verify probe pods, with the results each probe would produce.

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use serde_json::{Value, json};

use super::*;

/// What the node-side world looks like for `osbx verify` probes.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The node probes are scheduled to.
    pub node: String,
    /// `uname -r` inside a Kata guest.
    pub guest_kernel: String,
    /// The guest kernel command line carries the Kata marker.
    pub cmdline_marker: bool,
    /// The node has `/dev/kvm`.
    pub kvm: bool,
    /// Cloud Hypervisor reports `config.memory.shared`.
    pub shared_memory: bool,
    /// The SPIFFE ID the smoke ServiceAccount gets (`None`: denied).
    pub smoke_id: Option<String>,
    /// The SPIFFE ID a wrong ServiceAccount gets (`Some`: a catch-all identity).
    pub wrong_id: Option<String>,
    /// The Workload API fails with this message for everyone.
    pub workload_api_error: Option<String>,
}

impl Scenario {
    /// A healthy Kata node `node` (a guest kernel of its own, KVM, shared memory) where the smoke
    /// ServiceAccount gets `smoke_id` and nobody else an identity.
    pub fn healthy(node: &str, smoke_id: &str) -> Self {
        Self {
            node: node.into(),
            guest_kernel: "6.18.35".into(),
            cmdline_marker: true,
            kvm: true,
            shared_memory: true,
            smoke_id: Some(smoke_id.into()),
            wrong_id: None,
            workload_api_error: None,
        }
    }
}

/// A kubelet (and scheduler) for verify probe pods: binds them to the scenario's node and writes
/// the terminated state and termination message the real probe would produce there. It also runs
/// the Pools' pods (labelled `sandbox.opensandbox.io/pool-name`): bound, Running and Ready at once,
/// and gone at once when deleted.
pub struct Kubelet;

impl Kubelet {
    /// Run until the handle is dropped.
    pub fn spawn(client: Client, scenario: std::sync::Arc<std::sync::Mutex<Scenario>>) -> AbortOnDrop {
        AbortOnDrop(tokio::spawn(async move {
            let pods: Api<Pod> = Api::all(client.clone());
            loop {
                let lp = kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=osbx-verify");
                if let Ok(list) = pods.list(&lp).await {
                    for pod in list {
                        let s = scenario.lock().unwrap().clone();
                        let _ = Self::step(&client, &pod, &s).await;
                    }
                }
                let lp = kube::api::ListParams::default().labels(crate::played::opensandbox::LABEL_POOL_NAME);
                if let Ok(list) = pods.list(&lp).await {
                    let node = scenario.lock().unwrap().node.clone();
                    for pod in list {
                        Self::run_pool_pod(&client, &pod, &node).await;
                    }
                }
                finalize_namespaces(&client, "app.kubernetes.io/managed-by=osbx-verify").await;
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }))
    }

    /// A pool pod: Running on `node`, or gone once deleted.
    async fn run_pool_pod(client: &Client, pod: &Pod, node: &str) {
        let (Some(ns), Some(name)) = (pod.metadata.namespace.as_deref(), pod.metadata.name.as_deref()) else { return };
        if pod.metadata.deletion_timestamp.is_some() {
            let now = kube::api::DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
            let _ = Api::<Pod>::namespaced(client.clone(), ns).delete(name, &now).await;
        } else if pod.status.as_ref().and_then(|st| st.container_statuses.as_ref()).is_none() {
            let _ = try_pod_running(client, ns, name, node).await;
        }
    }

    async fn step(client: &Client, pod: &Pod, s: &Scenario) -> Option<()> {
        if pod.status.as_ref().and_then(|st| st.container_statuses.as_ref()).is_some()
            || pod.metadata.deletion_timestamp.is_some()
        {
            return None;
        }
        let ns = pod.metadata.namespace.clone()?;
        let name = pod.metadata.name.clone()?;
        let probe = pod.metadata.labels.as_ref()?.get("osbx.io/probe")?.clone();
        let spec = pod.spec.clone()?;
        if spec.node_name.is_none() {
            bind(client, &ns, &name, &s.node).await;
        }
        let result = |v: Value| v.to_string();
        match probe.as_str() {
            "guest-kernel" => {
                let msg = result(
                    json!({"check": "kata.guest-kernel", "kernel": s.guest_kernel, "cmdline_marker": s.cmdline_marker,
                                        "hypervisor": true, "agent_params": "agent.log=debug", "mem_kib": 2_000_000}),
                );
                pod_terminated(client, &ns, &name, 0, &msg).await;
            }
            "host-kvm" => {
                if s.kvm {
                    let msg = result(
                        json!({"check": "kata.host-kvm", "char_device": true, "api_version": 12, "create_vm": true,
                               "module": "kvm_intel", "nested": "N", "vhost_vsock": true, "host_is_vm": false}),
                    );
                    pod_terminated(client, &ns, &name, 0, &msg).await;
                } else {
                    warning(client, &ns, &name, "FailedMount",
                        "MountVolume.SetUp failed for volume \"kvm\" : hostPath type check failed: /dev/kvm is not a character device").await;
                    container_waiting(client, &ns, &name, "ContainerCreating").await;
                }
            }
            "kata-target" => {
                pod_running(client, &ns, &name, &s.node).await;
            }
            "vm-info" => {
                // Cloud Hypervisor (the default class's shim): vm.info, and its guest RAM in its maps.
                let perms = if s.shared_memory { "rw-s" } else { "rw-p" };
                let maps = s.shared_memory.then(|| json!({"size": 2_147_483_648_u64, "perms": perms, "name": "/memfd:ch_ram (deleted)"}));
                let msg = result(json!({"check": "kata.vmm-shared-memory", "sandbox_id": "sbx-1", "http_status": 200,
                    "api": {"state": "Running", "shared": s.shared_memory, "hugepages": false, "size": 2_147_483_648_u64,
                            "fs_tags": ["kataShared"]},
                    "vmm_pid": 4242, "maps_shared": maps}));
                pod_terminated(client, &ns, &name, 0, &msg).await;
            }
            "spiffe" => {
                // The probe's container is restarted in the same pod on failure: a denial shows
                // as two failed attempts (the second after the kubelet's back-off).
                let sa = spec.service_account_name.clone().unwrap_or_default();
                let wrong = sa.ends_with("-wrong");
                let issued = if wrong { s.wrong_id.clone() } else { s.smoke_id.clone() };
                if let Some(err) = &s.workload_api_error {
                    pod_terminated(client, &ns, &name, 1, err).await;
                } else if let Some(id) = issued {
                    pod_terminated(client, &ns, &name, 0, &svid_pem(&id)).await;
                } else {
                    pod_failed_twice(
                        client,
                        &ns,
                        &name,
                        "rpc error: code = PermissionDenied desc = no identity issued",
                    )
                    .await;
                }
            }
            _ => {}
        }
        Some(())
    }
}

/// A self-signed X.509 SVID with `id` as its URI SAN (what `spire-agent -write` leaves).
pub fn svid_pem(id: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.subject_alt_names = vec![rcgen::SanType::URI(rcgen::string::Ia5String::try_from(id.to_owned()).unwrap())];
    params.self_signed(&key).unwrap().pem()
}
