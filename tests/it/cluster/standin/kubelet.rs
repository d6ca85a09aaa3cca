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
    /// Kata pods become real VMs (the played shim, `tests/played/kata.rs`), and host probes run
    /// on this machine for real.
    pub vm: Option<std::sync::Arc<crate::played::kata::Shim>>,
    /// A Warning event the node records for every Kata and host probe pod instead of running
    /// it (reason, message), as when a sandbox cannot be created.
    pub sandbox_failure: Option<(String, String)>,
    /// Host probes (with `vm`) see this prepared host instead of this machine's `/sys/module`
    /// and `/dev` (`host_view.rs`).
    pub host_view: Option<std::sync::Arc<super::host_view::HostView>>,
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
            vm: None,
            sandbox_failure: None,
            host_view: None,
        }
    }
}

/// A runc pool's workload probe (the build benchmark's other side): run here, as runc runs a
/// privileged container, from the probe image's files.
async fn runc_workload(
    client: &Client,
    ns: &str,
    name: &str,
    spec: &k8s_openapi::api::core::v1::PodSpec,
    shim: &crate::played::kata::Shim,
) -> Option<()> {
    let container = spec.containers.first()?.clone();
    let script = container.command.clone().unwrap_or_default().get(2)?.clone();
    let env = env_of(&container);
    let tree = shim.workload_tree();
    let (code, out) = tokio::task::spawn_blocking(move || run_container_here(&tree, &script, &env)).await.ok()?;
    pod_terminated(client, ns, name, code, out.lines().last().unwrap_or_default()).await;
    Some(())
}

/// A container's environment as name and value (a value from a reference: empty).
fn env_of(container: &k8s_openapi::api::core::v1::Container) -> Vec<(String, String)> {
    container.env.iter().flatten().map(|e| (e.name.clone(), e.value.clone().unwrap_or_default())).collect()
}

/// Run `script` as a privileged runc container would, on this machine: in mount, network and PID
/// namespaces of its own (no route out: only a loopback that is down), its root the image tree
/// `tree` under a copy-on-write overlay, pivoted into as runc does, with the host's `/sys` and
/// `/dev` (a privileged container's), tmpfs `/run` and `/tmp`, and `/var/lib/docker` an emptyDir
/// on this machine's disk; everything it started ends with its PID namespace. Its exit code and
/// output.
fn run_container_here(tree: &std::path::Path, script: &str, env: &[(String, String)]) -> (i32, String) {
    let dir = tempfile::Builder::new().prefix("osbx-runc-pod-").tempdir().expect("pod dir");
    for d in ["upper", "work", "root", "emptydir"] {
        std::fs::create_dir(dir.path().join(d)).expect("pod dirs");
    }
    std::fs::write(dir.path().join("probe.sh"), script.replace("/dev/termination-log", "/tmp/termination-log"))
        .expect("probe.sh");
    let setup = r#"set -e
d=$POD_DIR
mount -t overlay overlay -o "lowerdir=$TREE,upperdir=$d/upper,workdir=$d/work" "$d/root"
r=$d/root
mount -t proc proc "$r/proc"; mount --rbind /sys "$r/sys"; mount --rbind /dev "$r/dev"
mount -t tmpfs run "$r/run"; mount -t tmpfs tmp "$r/tmp"
mount --bind "$d/emptydir" "$r/var/lib/docker"
cp "$d/probe.sh" "$r/tmp/probe.sh"
mkdir -p "$r/.old"; cd "$r"; pivot_root . .old
exec /bin/sh -c 'umount -l /.old; rmdir /.old; exec sh /tmp/probe.sh'
"#;
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--net", "--pid", "--fork", "--propagation", "private", "sh", "-c", setup])
        .env("POD_DIR", dir.path())
        .env("TREE", tree)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("unshare");
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let text = if stdout.is_empty() { String::from_utf8_lossy(&out.stderr).into_owned() } else { stdout };
    (out.status.code().unwrap_or(1), text)
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
                // The played shim's VMs of Kata pods that are gone (or going) stop, before the
                // probes of this pass run (a reclaim probe looks for them).
                let shim = scenario.lock().unwrap().vm.clone();
                if let Some(shim) = shim.clone() {
                    let mut live = Vec::new();
                    for selector in ["osbx.io/probe=kata-target", crate::played::opensandbox::LABEL_POOL_NAME] {
                        let lp = kube::api::ListParams::default().labels(selector);
                        live.extend(
                            pods.list(&lp)
                                .await
                                .map(|l| l.items)
                                .unwrap_or_default()
                                .into_iter()
                                .filter(|p| p.metadata.deletion_timestamp.is_none())
                                .filter_map(|p| p.metadata.uid),
                        );
                    }
                    // Stopping VMs of gone pods; a panic there shows in the shim's own asserts, the loop goes on.
                    let _ = tokio::task::spawn_blocking(move || shim.stop_others(&live)).await;
                }
                let lp = kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=osbx-verify");
                if let Ok(list) = pods.list(&lp).await {
                    for pod in list {
                        let s = scenario.lock().unwrap().clone();
                        // The kubelet's loop: a step a pod's deletion interrupted is retried on the next pass.
                        let _ = Self::step(&client, &pod, &s).await;
                    }
                }
                let lp = kube::api::ListParams::default().labels(crate::played::opensandbox::LABEL_POOL_NAME);
                if let Ok(list) = pods.list(&lp).await {
                    let node = scenario.lock().unwrap().node.clone();
                    for pod in list {
                        Self::run_pool_pod(&client, &pod, &node, shim.clone()).await;
                    }
                }
                finalize_namespaces(&client, "app.kubernetes.io/managed-by=osbx-verify").await;
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }))
    }

    /// A pool pod: Running on `node` (under a Kata class with the played shim, as a real VM), or
    /// gone once deleted.
    async fn run_pool_pod(
        client: &Client,
        pod: &Pod,
        node: &str,
        shim: Option<std::sync::Arc<crate::played::kata::Shim>>,
    ) {
        let (Some(ns), Some(name)) = (pod.metadata.namespace.as_deref(), pod.metadata.name.as_deref()) else { return };
        if pod.metadata.deletion_timestamp.is_some() {
            let now = kube::api::DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
            // The kubelet's step: a pod already gone needs nothing; the next pass retries what failed.
            let _ = Api::<Pod>::namespaced(client.clone(), ns).delete(name, &now).await;
        } else if pod.status.as_ref().and_then(|st| st.container_statuses.as_ref()).is_none() {
            let kata =
                pod.spec.as_ref().and_then(|s| s.runtime_class_name.as_deref()).is_some_and(|c| c.starts_with("kata"));
            let cid = match (shim, pod.metadata.uid.clone()) {
                (Some(shim), Some(uid)) if kata => {
                    tokio::task::spawn_blocking(move || shim.start(&uid)).await.unwrap_or_default()
                }
                _ => String::new(),
            };
            // A pod not yet startable is tried again on the next pass.
            let _ = try_pod_running_as(client, ns, name, node, &cid).await;
        }
    }

    /// A Kata pod handed to the played shim (a real QEMU guest, or Cloud Hypervisor's played API),
    /// or a host probe run on this machine for real (its `/dev/termination-log` redirected to a
    /// file, as the kubelet mounts one).
    async fn real_vm(
        client: &Client,
        pod: &Pod,
        spec: &k8s_openapi::api::core::v1::PodSpec,
        probe: &str,
        s: &Scenario,
        shim: std::sync::Arc<crate::played::kata::Shim>,
    ) -> Option<()> {
        let node = s.node.as_str();
        let ns = pod.metadata.namespace.clone()?;
        let name = pod.metadata.name.clone()?;
        let container = spec.containers.first()?.clone();
        let command = container.command.clone().unwrap_or_default();
        match probe {
            "guest-kernel" => {
                let script = command.get(2)?.clone();
                let (code, out) = tokio::task::spawn_blocking(move || shim.run_once(&script)).await.ok()?;
                pod_terminated(client, &ns, &name, code, out.lines().last().unwrap_or_default()).await;
            }
            "workload" => {
                // A build pool's workload probe: its own guest, the probe image as its root,
                // the emptyDir at its mount as the class's emptydir_mode gives it.
                let script = command.get(2)?.clone();
                let class = spec.runtime_class_name.clone().unwrap_or_default();
                let env = env_of(&container);
                let mount = container.volume_mounts.iter().flatten().next()?.clone();
                let (code, out) = tokio::task::spawn_blocking(move || {
                    shim.run_workload(&class, &script, &env, &mount.name, &mount.mount_path)
                })
                .await
                .ok()?;
                pod_terminated(client, &ns, &name, code, out.lines().last().unwrap_or_default()).await;
            }
            "kata-target" => {
                let uid = pod.metadata.uid.clone()?;
                let cid = tokio::task::spawn_blocking(move || shim.start(&uid)).await.ok()?;
                try_pod_running_as(client, &ns, &name, node, &cid).await.ok()?;
            }
            _ => {
                // A privileged host probe: its hostPath volumes checked as the kubelet checks
                // them, then its command run here (or in the scenario's prepared host).
                let view = s.host_view.clone();
                for v in spec.volumes.iter().flatten() {
                    let Some(hp) = &v.host_path else { continue };
                    let path = view.as_ref().map_or_else(|| std::path::PathBuf::from(&hp.path), |v| v.path(&hp.path));
                    let ok = match hp.type_.as_deref() {
                        Some("CharDevice") => std::fs::metadata(&path)
                            .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_char_device(&m.file_type())),
                        Some("Directory") => path.is_dir(),
                        _ => true,
                    };
                    if !ok {
                        let what = if hp.type_.as_deref() == Some("CharDevice") {
                            "a character device"
                        } else {
                            "a directory"
                        };
                        let message = format!(
                            "MountVolume.SetUp failed for volume \"{}\" : hostPath type check failed: {} is not {what}",
                            v.name, hp.path
                        );
                        warning(client, &ns, &name, "FailedMount", &message).await;
                        container_waiting(client, &ns, &name, "ContainerCreating").await;
                        return Some(());
                    }
                }
                let log = tempfile::NamedTempFile::new().ok()?;
                let script = command.get(2)?.replace("/dev/termination-log", &log.path().display().to_string());
                let env = env_of(&container);
                let out = tokio::task::spawn_blocking(move || {
                    let mut cmd = view.map_or_else(|| std::process::Command::new("python3"), |v| v.command("python3"));
                    cmd.args(["-c", &script]).envs(env).output()
                })
                .await
                .ok()?
                .ok()?;
                let message = std::fs::read_to_string(log.path()).unwrap_or_default();
                pod_terminated(client, &ns, &name, out.status.code().unwrap_or(1), &message).await;
            }
        }
        Some(())
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
        let kata_or_host = matches!(
            probe.as_str(),
            "guest-kernel" | "host-kvm" | "kata-config" | "kata-target" | "vm-info" | "reclaim-find" | "reclaim"
        ) || (probe == "workload"
            && spec.runtime_class_name.as_deref().is_some_and(|c| c.starts_with("kata")));
        if kata_or_host && let Some((reason, message)) = &s.sandbox_failure {
            warning(client, &ns, &name, reason, message).await;
            container_waiting(client, &ns, &name, "ContainerCreating").await;
            return Some(());
        }
        if kata_or_host && let Some(shim) = &s.vm {
            return Self::real_vm(client, pod, &spec, &probe, s, shim.clone()).await;
        }
        if probe == "workload"
            && let Some(shim) = &s.vm
        {
            return runc_workload(client, &ns, &name, &spec, shim).await;
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
                let maps = s
                    .shared_memory
                    .then(|| json!({"size": 2_147_483_648_u64, "perms": perms, "name": "/memfd:ch_ram (deleted)"}));
                let msg = result(json!({"check": "kata.vmm-shared-memory", "sandbox_id": "sbx-1", "http_status": 200,
                    "api": {"state": "Running", "shared": s.shared_memory, "hugepages": false, "size": 2_147_483_648_u64,
                            "fs_tags": ["kataShared"]},
                    "vmm_pid": 4242, "maps_shared": maps}));
                pod_terminated(client, &ns, &name, 0, &msg).await;
            }
            "reclaim-find" => {
                // Cloud Hypervisor (the default class's shim) of the sandbox's pod, before the delete.
                let msg = result(json!({"check": "opensandbox.reclaim", "sandbox_id": STANDIN_SANDBOX,
                    "present": {"processes": [{"pid": 4242, "cmdline": format!("cloud-hypervisor --api-socket /run/vc/vm/{STANDIN_SANDBOX}/clh-api.sock")}],
                                "dirs": [format!("/run/vc/vm/{STANDIN_SANDBOX}")], "files": []}}));
                pod_terminated(client, &ns, &name, 0, &msg).await;
            }
            "reclaim" => {
                let msg = result(json!({"check": "opensandbox.reclaim", "sandbox_id": STANDIN_SANDBOX,
                    "left": {"processes": [], "dirs": [], "files": []}, "waited_s": 1.0}));
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

/// The sandbox id the stand-in's reclaim probes report (a CRI sandbox id's shape).
const STANDIN_SANDBOX: &str = "5b1d0c0a11ab1e5b1d0c0a11ab1e5b1d0c0a11ab1e5b1d0c0a11ab1e5b1d0c0a";

/// A self-signed X.509 SVID with `id` as its URI SAN (what `spire-agent -write` leaves).
pub fn svid_pem(id: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.subject_alt_names = vec![rcgen::SanType::URI(rcgen::string::Ia5String::try_from(id.to_owned()).unwrap())];
    params.self_signed(&key).unwrap().pem()
}
