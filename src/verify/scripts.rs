//! Probe pod specs and the scripts they run. Every probe prints one compact JSON line to
//! `/dev/termination-log` and stdout; verdicts come from that line and the exit code.

use serde_json::{Value, json};

use super::probe::Run;

/// In the guest: kernel release, the CPU's `hypervisor` flag, the `agent.*` kernel parameters the
/// Kata runtime passes, the systemd marker runtime-rs (and image-based Go guests) add, and guest
/// memory.
const GUEST_KERNEL: &str = include_str!("scripts/guest_kernel.sh");

/// On the host: `/dev/kvm` is a character device, `KVM_GET_API_VERSION` is 12, `KVM_CREATE_VM`
/// works (what `kata-ctl check` does), which KVM module backs it (`kvm_intel`, `kvm_amd`, or
/// `kvm_pvm`: a Pagetable-based VM, on which stock guest kernels do not boot) and its `nested`
/// parameter, and whether `/dev/vhost-vsock` exists (QEMU needs it).
const HOST_KVM: &str = include_str!("scripts/host_kvm.py");

/// On the host (its PID namespace): find the Kata sandbox of a container (bundle `config.json`
/// → CRI sandbox id), ask its VMM how guest RAM is backed (Cloud Hypervisor `GET
/// /api/v1/vm.info`, read by `Content-Length` as CH keeps the connection open; QEMU QMP
/// `query-memdev`), and read the VMM process's `/proc/<pid>/maps` for guest RAM mapped shared
/// (`rw-s`), which holds for every VMM.
const VMM_MEMORY: &str = include_str!("scripts/vmm_memory.py");

/// On the host (its PID namespace), for one Kata sandbox: `MODE=resolve` finds the sandbox id of
/// a container (bundle `config.json` under the task directory) and lists what the sandbox holds on
/// the node; `MODE=watch` (after the sandbox was deleted) looks every second, up to `GRACE`
/// seconds, until nothing of sandbox `SANDBOX_ID` remains, and lists what does: every process
/// whose command line names the sandbox id (the VMM, virtiofsd, the shim: its PID and command
/// line), every directory `<dir>/<sandbox id>` of `DIRS` (the run directories), and the backing
/// files of the pod `POD_UID` (block emptyDirs' `disk.img` under the kubelet's pod directory, and
/// the direct-volume entries naming them, whose names are the base64 of the volume's path).
const RECLAIM: &str = include_str!("scripts/reclaim.py");

/// On the host, read-only: for each class, the Kata configuration its handler loads (the file
/// containerd's `ConfigPath` names, then every file of its `config.d/` in name order, each table
/// merged key by key, any other value (a list too) replaced whole, as the Go runtime's
/// `decodeDropIns` and runtime-rs's `drop_in.rs` merge them), and the effective
/// `enable_annotations` of its `[hypervisor.<table>]`, with the files read and the last that set
/// it.
const KATA_CONFIG: &str = include_str!("scripts/kata_config.py");

pub(super) fn base_spec(run: &Run, containers: &Value) -> Value {
    let mut spec = json!({
        "restartPolicy": "Never",
        "activeDeadlineSeconds": run.deadline_seconds,
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": false,
        "containers": containers,
    });
    if !run.pull_secrets.is_empty() {
        spec["imagePullSecrets"] = run.pull_secrets.iter().map(|name| json!({"name": name})).collect();
    }
    spec
}

pub(super) fn container(name: &str, image: &str, command: &Value) -> Value {
    json!({"name": name, "image": image, "command": command, "terminationMessagePolicy": "FallbackToLogsOnError"})
}

/// The guest-kernel probe, under the Kata runtime class.
#[must_use]
pub(super) fn guest_kernel(run: &Run, image: &str, runtime_class: &str) -> Value {
    let mut spec = base_spec(run, &json!([container("probe", image, &json!(["sh", "-c", GUEST_KERNEL]))]));
    spec["runtimeClassName"] = json!(runtime_class);
    spec
}

/// A long-running Kata pod whose VM the host probe inspects.
#[must_use]
pub(super) fn kata_target(run: &Run, image: &str, runtime_class: &str) -> Value {
    let mut spec = base_spec(run, &json!([container("target", image, &json!(["sleep", "3600"]))]));
    spec["runtimeClassName"] = json!(runtime_class);
    spec
}

fn host_spec(run: &Run, node: &str, image: &str, script: &str, volumes: Value, mounts: Value, env: Value) -> Value {
    let mut c = container("probe", image, &json!(["python3", "-c", script]));
    c["securityContext"] = json!({"privileged": true});
    c["volumeMounts"] = mounts;
    c["env"] = env;
    let mut spec = base_spec(run, &json!([c]));
    spec["nodeName"] = json!(node);
    spec["volumes"] = volumes;
    spec["tolerations"] = json!([{"operator": "Exists"}]);
    spec
}

/// The host KVM probe, pinned to `node`.
#[must_use]
pub(super) fn host_kvm(run: &Run, node: &str, image: &str) -> Value {
    host_spec(
        run,
        node,
        image,
        HOST_KVM,
        json!([{"name": "kvm", "hostPath": {"path": "/dev/kvm", "type": "CharDevice"}}]),
        json!([{"name": "kvm", "mountPath": "/dev/kvm"}]),
        json!([]),
    )
}

/// The Kata configuration host probe, pinned to `node`: kata-deploy's configuration tree
/// ([`CONFIG_ROOT`](crate::components::kata::shim::CONFIG_ROOT)) mounted read-only, nothing else
/// of the host; not privileged, no capabilities. `configs`: `{class, path, table}` per class.
#[must_use]
pub(super) fn kata_config(run: &Run, node: &str, image: &str, configs: &Value) -> Value {
    let root = crate::components::kata::shim::CONFIG_ROOT;
    let mut spec = host_spec(
        run,
        node,
        image,
        KATA_CONFIG,
        json!([{"name": "kata-config", "hostPath": {"path": root, "type": "Directory"}}]),
        json!([{"name": "kata-config", "mountPath": root, "readOnly": true}]),
        json!([{"name": "CONFIGS", "value": configs.to_string()}]),
    );
    spec["containers"][0]["securityContext"] = json!({
        "privileged": false,
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
    });
    spec
}

/// Where the VMM-memory host probe looks, for one container of a Kata sandbox.
pub(super) struct VmmTarget<'a> {
    /// The container's id.
    pub container_id: &'a str,
    /// containerd's task directory (`<dir>/<container id>/config.json`).
    pub task_dir: &'a str,
    /// The directory of the sandboxes' sockets.
    pub run_dir: &'a str,
    /// `qemu`, `clh` or `dragonball`.
    pub vmm: &'a str,
    /// The VMM's API socket in the sandbox directory (none for Dragonball).
    pub api_socket: Option<&'a str>,
}

/// The VMM-memory host probe for one container, pinned to its node, in the host's PID namespace.
#[must_use]
pub(super) fn vmm_memory(run: &Run, node: &str, image: &str, t: &VmmTarget<'_>) -> Value {
    let mut spec = host_spec(
        run,
        node,
        image,
        VMM_MEMORY,
        json!([
            {"name": "kata-run", "hostPath": {"path": t.run_dir, "type": "Directory"}},
            {"name": "tasks", "hostPath": {"path": t.task_dir, "type": "Directory"}},
        ]),
        json!([
            {"name": "kata-run", "mountPath": t.run_dir, "readOnly": true},
            {"name": "tasks", "mountPath": t.task_dir, "readOnly": true},
        ]),
        json!([
            {"name": "CONTAINER_ID", "value": t.container_id},
            {"name": "TASK_DIR", "value": t.task_dir},
            {"name": "KATA_RUN_DIR", "value": t.run_dir},
            {"name": "VMM", "value": t.vmm},
            {"name": "API_SOCKET", "value": t.api_socket.unwrap_or_default()},
        ]),
    );
    // The VMM is a process of the host: its command line and memory maps are read there.
    spec["hostPID"] = json!(true);
    spec
}

/// The SPIFFE probe: `spire-agent api fetch x509` through the Workload API socket (the CSI
/// volume, or the node directory `socketHostPath` names), under the given ServiceAccount and
/// runtime class. The SVID certificate (public) becomes the
/// termination message; the private key stays in an emptyDir that is deleted with the pod.
/// On failure the agent's error (log tail) becomes the message.
#[must_use]
pub(super) fn spiffe(
    run: &Run,
    smoke: &crate::profile::SpiffeSmoke,
    service_account: &str,
    runtime_class: Option<&str>,
) -> Value {
    let socket = format!("/spiffe-workload-api/{}", smoke.socket);
    let mut c = container(
        "probe",
        &smoke.image,
        &json!([
            "/opt/spire/bin/spire-agent",
            "api",
            "fetch",
            "x509",
            "-socketPath",
            socket,
            "-timeout",
            "10s",
            "-write",
            "/out"
        ]),
    );
    c["terminationMessagePath"] = json!("/out/svid.0.pem");
    c["volumeMounts"] = json!([
        {"name": "spiffe-workload-api", "mountPath": "/spiffe-workload-api", "readOnly": true},
        {"name": "out", "mountPath": "/out"},
    ]);
    let mut spec = base_spec(run, &json!([c]));
    // Attempts again in the same pod, whose UID the registration entry names.
    spec["restartPolicy"] = json!("OnFailure");
    spec["serviceAccountName"] = json!(service_account);
    let workload_api = match &smoke.socket_host_path {
        Some(dir) => json!({"name": "spiffe-workload-api", "hostPath": {"path": dir, "type": "Directory"}}),
        None => json!({"name": "spiffe-workload-api", "csi": {"driver": smoke.csi_driver, "readOnly": true}}),
    };
    spec["volumes"] = json!([workload_api, {"name": "out", "emptyDir": {"medium": "Memory"}}]);
    if let Some(rc) = runtime_class {
        spec["runtimeClassName"] = json!(rc);
    }
    spec
}

/// Where the reclaim host probe looks, for one Kata sandbox.
pub(super) struct ReclaimTarget<'a> {
    /// `resolve` (before the delete: find the sandbox id) or `watch` (after it).
    pub mode: &'a str,
    /// The pod's first container (`resolve`).
    pub container_id: &'a str,
    /// containerd's task directory (`<dir>/<container id>/config.json`).
    pub task_dir: &'a str,
    /// The sandbox id (`watch`).
    pub sandbox_id: &'a str,
    /// The pod's UID (its kubelet directory and block emptyDirs).
    pub pod_uid: &'a str,
    /// The directories whose `<dir>/<sandbox id>` must be gone after the delete.
    pub dirs: &'a [String],
    /// The kubelet's pod directories (`<dir>/<pod UID>/volumes/...`).
    pub kubelet_pods: &'a str,
    /// The direct-volume entries of block emptyDirs (named by the base64 of their path).
    pub direct_volumes: &'a str,
    /// How long `watch` waits for everything to go.
    pub grace_seconds: u64,
}

/// The directory a host path is read through: `/run` for what is under it (always there on a
/// node), else the path's parent (a run directory set elsewhere).
fn mount_root(path: &str) -> String {
    if path == "/run" || path.starts_with("/run/") {
        return "/run".to_owned();
    }
    std::path::Path::new(path).parent().map_or_else(|| path.to_owned(), |p| p.display().to_string())
}

/// The reclaim host probe, pinned to `node`, in the host's PID namespace, reading the run
/// directories and the kubelet's pod directories read-only where the host has them.
#[must_use]
pub(super) fn reclaim(run: &Run, node: &str, image: &str, t: &ReclaimTarget<'_>) -> Value {
    let mut roots: Vec<String> = t.dirs.iter().map(|d| mount_root(d)).collect();
    roots.push(mount_root(t.direct_volumes));
    if t.mode == "resolve" {
        roots.push(t.task_dir.to_owned());
    }
    roots.sort();
    roots.dedup();
    // A root under another one is read through it.
    let kept: Vec<&String> =
        roots.iter().filter(|r| !roots.iter().any(|o| o != *r && r.starts_with(&format!("{o}/")))).collect();
    let mut volumes: Vec<Value> = kept
        .iter()
        .enumerate()
        .map(|(i, r)| json!({"name": format!("host-{i}"), "hostPath": {"path": r, "type": "Directory"}}))
        .collect();
    let mut mounts: Vec<Value> = kept
        .iter()
        .enumerate()
        .map(|(i, r)| json!({"name": format!("host-{i}"), "mountPath": r, "readOnly": true}))
        .collect();
    volumes.push(json!({"name": "kubelet-pods", "hostPath": {"path": t.kubelet_pods}}));
    mounts.push(json!({"name": "kubelet-pods", "mountPath": t.kubelet_pods, "readOnly": true}));
    let mut spec = host_spec(
        run,
        node,
        image,
        RECLAIM,
        json!(volumes),
        json!(mounts),
        json!([
            {"name": "MODE", "value": t.mode},
            {"name": "CONTAINER_ID", "value": t.container_id},
            {"name": "TASK_DIR", "value": t.task_dir},
            {"name": "SANDBOX_ID", "value": t.sandbox_id},
            {"name": "POD_UID", "value": t.pod_uid},
            {"name": "DIRS", "value": t.dirs.join(":")},
            {"name": "KUBELET_PODS", "value": t.kubelet_pods},
            {"name": "DIRECT_VOLUMES", "value": t.direct_volumes},
            {"name": "GRACE", "value": t.grace_seconds.to_string()},
        ]),
    );
    // The VMM, virtiofsd and the shim are processes of the host: their command lines are read there.
    spec["hostPID"] = json!(true);
    spec
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reclaim script run here, as the host probe runs it (its termination log a file).
    fn reclaim_here(env: &[(&str, String)]) -> Value {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("termination-log");
        let script = RECLAIM.replace("/dev/termination-log", &log.display().to_string());
        let out = std::process::Command::new("python3")
            .args(["-c", &script])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .expect("python3");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_str(&std::fs::read_to_string(log).unwrap()).unwrap()
    }

    /// What a sandbox leaves is listed by kind: a process naming its id (PID and command line),
    /// its run directory, a block emptyDir's `disk.img` and the direct-volume entry naming it;
    /// once they are gone, the list is empty before the grace period ends.
    #[test]
    fn the_reclaim_probe_lists_every_leftover_and_then_none() {
        let sid = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let root = tempfile::tempdir().unwrap();
        let (run, pods, direct) = (root.path().join("vm"), root.path().join("pods"), root.path().join("direct"));
        let disk = pods.join("uid-1/volumes/kubernetes.io~empty-dir/docker/disk.img");
        std::fs::create_dir_all(run.join(sid)).unwrap();
        std::fs::create_dir_all(disk.parent().unwrap()).unwrap();
        std::fs::write(&disk, b"").unwrap();
        let entry = direct.join(base64_url(&disk.display().to_string()));
        std::fs::create_dir_all(&entry).unwrap();
        // The VMM stands in as `sleep` itself, named after the sandbox (a shell around it would
        // leave the sleep running, holding the test's output, when it is killed).
        let mut vmm = std::os::unix::process::CommandExt::arg0(
            &mut std::process::Command::new("sleep"),
            format!("sandbox-{sid}"),
        )
        .arg("60")
        .spawn()
        .unwrap();
        let env = |grace: &str| {
            vec![
                ("MODE", "watch".to_owned()),
                ("SANDBOX_ID", sid.to_owned()),
                ("POD_UID", "uid-1".to_owned()),
                ("DIRS", format!("{}:{}", run.display(), root.path().join("sbs").display())),
                ("KUBELET_PODS", pods.display().to_string()),
                ("DIRECT_VOLUMES", direct.display().to_string()),
                ("GRACE", grace.to_owned()),
            ]
        };
        let r = reclaim_here(&env("1"));
        let left = &r["left"];
        assert_eq!(left["processes"][0]["pid"], vmm.id(), "{r}");
        assert!(left["processes"][0]["cmdline"].as_str().unwrap().contains(sid), "{r}");
        assert_eq!(left["dirs"], json!([run.join(sid).display().to_string()]), "{r}");
        assert_eq!(left["files"], json!([disk.display().to_string(), entry.display().to_string()]), "{r}");
        vmm.kill().unwrap();
        vmm.wait().unwrap();
        std::fs::remove_dir_all(run.join(sid)).unwrap();
        std::fs::remove_dir_all(pods.join("uid-1")).unwrap();
        std::fs::remove_dir_all(&entry).unwrap();
        let r = reclaim_here(&env("30"));
        assert_eq!(r["left"], json!({"processes": [], "dirs": [], "files": []}), "{r}");
        assert!(r["waited_s"].as_f64().unwrap() < 5.0, "{r}");
    }

    /// Base64 with the URL alphabet, as the Kata runtime names direct-volume entries.
    fn base64_url(s: &str) -> String {
        let out = std::process::Command::new("python3")
            .args(["-c", "import base64, sys; print(base64.urlsafe_b64encode(sys.argv[1].encode()).decode())", s])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// The probe reads the host where it keeps each path: `/run` for what is under it, the parent
    /// of a run directory set elsewhere, the task directory only to find the sandbox id.
    #[test]
    fn the_reclaim_probe_mounts_the_roots_of_its_paths() {
        let run = Run::new(60, std::time::Duration::from_secs(60), None);
        let dirs = vec![
            "/tmp/ok1/vc".to_owned(),
            "/tmp/ok1/sbs".to_owned(),
            "/run/kata-containers/shared/sandboxes".to_owned(),
        ];
        let t = ReclaimTarget {
            mode: "resolve",
            container_id: "c1",
            task_dir: "/tmp/ok1/tasks",
            sandbox_id: "",
            pod_uid: "u",
            dirs: &dirs,
            kubelet_pods: "/var/lib/kubelet/pods",
            direct_volumes: "/run/kata-containers/shared/direct-volumes",
            grace_seconds: 0,
        };
        let spec = reclaim(&run, "n1", "python:3", &t);
        let paths: Vec<&str> =
            spec["volumes"].as_array().unwrap().iter().map(|v| v["hostPath"]["path"].as_str().unwrap()).collect();
        assert_eq!(paths, ["/run", "/tmp/ok1", "/var/lib/kubelet/pods"]);
        assert_eq!(spec["hostPID"], true);
        assert_eq!(spec["nodeName"], "n1");
    }
}
