//! Probe pod specs and the scripts they run. Every probe prints one compact JSON line to
//! `/dev/termination-log` and stdout; verdicts come from that line and the exit code.

use serde_json::{Value, json};

use super::probe::Run;

/// In the guest: kernel release, the Kata kernel command-line marker, the `hypervisor` CPU flag
/// and guest memory.
const GUEST_KERNEL: &str = r#"k=$(uname -r)
m=false; grep -q 'systemd.unit=kata-containers.target' /proc/cmdline && m=true
h=false; grep -qw hypervisor /proc/cpuinfo && h=true
mem=$(awk '/MemTotal/ {print $2}' /proc/meminfo)
line=$(printf '{"check":"kata.guest-kernel","kernel":"%s","cmdline_marker":%s,"hypervisor":%s,"mem_kib":%s}' "$k" "$m" "$h" "${mem:-0}")
echo "$line" | tee /dev/termination-log"#;

/// On the host: `/dev/kvm` is a character device, `KVM_GET_API_VERSION` is 12 and
/// `KVM_CREATE_VM` works (what `kata-ctl check` does).
const HOST_KVM: &str = r#"import json, os, stat, fcntl
r = {"check": "kata.host-kvm"}
try:
    st = os.stat("/dev/kvm")
    r["char_device"] = stat.S_ISCHR(st.st_mode)
    fd = os.open("/dev/kvm", os.O_RDWR)
    r["api_version"] = fcntl.ioctl(fd, 0xAE00)
    try:
        vm = fcntl.ioctl(fd, 0xAE01, 0)
        os.close(vm)
        r["create_vm"] = True
    except OSError as e:
        r["create_vm"] = False
        r["create_vm_error"] = str(e)
    os.close(fd)
except OSError as e:
    r["error"] = str(e)
for p in ("/sys/module/kvm_intel/parameters/nested", "/sys/module/kvm_amd/parameters/nested"):
    if os.path.exists(p):
        r["nested"] = open(p).read().strip()
try:
    r["host_is_vm"] = " hypervisor" in open("/proc/cpuinfo").read()
except OSError:
    pass
line = json.dumps(r, separators=(",", ":"))
open("/dev/termination-log", "w").write(line)
print(line)
"#;

/// On the host: find the Kata sandbox of a container (bundle `config.json` → CRI sandbox id) and
/// ask Cloud Hypervisor for `vm.info` over its API socket.
const VM_INFO: &str = r#"import json, os, socket
r = {"check": "kata.vmm-shared-memory"}
cid, task_dir, run_dir = os.environ["CONTAINER_ID"], os.environ["TASK_DIR"], os.environ["KATA_RUN_DIR"]
def out():
    line = json.dumps(r, separators=(",", ":"))
    open("/dev/termination-log", "w").write(line[-4000:])
    print(line)
try:
    cfg = json.load(open(os.path.join(task_dir, cid, "config.json")))
    sid = cfg.get("annotations", {}).get("io.kubernetes.cri.sandbox-id")
    r["sandbox_id"] = sid
    sock_path = os.path.join(run_dir, sid or "?", "ch-api.sock")
    if not os.path.exists(sock_path):
        r["error"] = "socket %s missing" % sock_path
        r["sandboxes"] = sorted(os.listdir(run_dir)) if os.path.isdir(run_dir) else []
    else:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(sock_path)
        s.sendall(b"GET /api/v1/vm.info HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        r["http_status"] = int(head.split(b" ")[1])
        info = json.loads(body) if r["http_status"] == 200 else {}
        if r["http_status"] != 200:
            r["error"] = body.decode(errors="replace")[:300]
        mem = info.get("config", {}).get("memory", {})
        r.update({"state": info.get("state"), "shared": mem.get("shared"), "hugepages": mem.get("hugepages"),
                  "size": mem.get("size"), "zones_shared": [z.get("shared") for z in mem.get("zones") or []],
                  "boot_vcpus": info.get("config", {}).get("cpus", {}).get("boot_vcpus"),
                  "fs_tags": [f.get("tag") for f in info.get("config", {}).get("fs") or []]})
except Exception as e:
    r["error"] = "%s: %s" % (type(e).__name__, e)
out()
"#;

fn base_spec(run: &Run, containers: &Value) -> Value {
    json!({
        "restartPolicy": "Never",
        "activeDeadlineSeconds": run.deadline_seconds,
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": false,
        "containers": containers,
    })
}

fn container(name: &str, image: &str, command: &Value) -> Value {
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

/// The `vm.info` host probe for one container, pinned to its node.
#[must_use]
pub(super) fn vm_info(
    run: &Run,
    node: &str,
    image: &str,
    container_id: &str,
    task_dir: &str,
    kata_run_dir: &str,
) -> Value {
    host_spec(
        run,
        node,
        image,
        VM_INFO,
        json!([
            {"name": "kata-run", "hostPath": {"path": kata_run_dir, "type": "Directory"}},
            {"name": "tasks", "hostPath": {"path": task_dir, "type": "Directory"}},
        ]),
        json!([
            {"name": "kata-run", "mountPath": kata_run_dir, "readOnly": true},
            {"name": "tasks", "mountPath": task_dir, "readOnly": true},
        ]),
        json!([
            {"name": "CONTAINER_ID", "value": container_id},
            {"name": "TASK_DIR", "value": task_dir},
            {"name": "KATA_RUN_DIR", "value": kata_run_dir},
        ]),
    )
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
