//! Probe pod specs and the scripts they run. Every probe prints one compact JSON line to
//! `/dev/termination-log` and stdout; verdicts come from that line and the exit code.

use serde_json::{Value, json};

use super::probe::Run;

/// In the guest: kernel release, the CPU's `hypervisor` flag, the `agent.*` kernel parameters the
/// Kata runtime passes, the systemd marker runtime-rs (and image-based Go guests) add, and guest
/// memory.
const GUEST_KERNEL: &str = r#"k=$(uname -r)
m=false; grep -q 'systemd.unit=kata-containers.target' /proc/cmdline && m=true
h=false; grep -qw hypervisor /proc/cpuinfo && h=true
a=$(tr ' ' '\n' </proc/cmdline | grep '^agent\.' | tr -d '"\\' | tr '\n' ' ')
mem=$(awk '/MemTotal/ {print $2}' /proc/meminfo)
line=$(printf '{"check":"kata.guest-kernel","kernel":"%s","cmdline_marker":%s,"hypervisor":%s,"agent_params":"%s","mem_kib":%s}' "$k" "$m" "$h" "${a% }" "${mem:-0}")
echo "$line" | tee /dev/termination-log"#;

/// On the host: `/dev/kvm` is a character device, `KVM_GET_API_VERSION` is 12, `KVM_CREATE_VM`
/// works (what `kata-ctl check` does), which KVM module backs it (`kvm_intel`, `kvm_amd`, or
/// `kvm_pvm`: a Pagetable-based VM, on which stock guest kernels do not boot) and its `nested`
/// parameter, and whether `/dev/vhost-vsock` exists (QEMU needs it).
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
for m in ("kvm_intel", "kvm_amd", "kvm_pvm"):
    if os.path.isdir("/sys/module/" + m):
        r["module"] = m
        p = "/sys/module/%s/parameters/nested" % m
        if os.path.exists(p):
            r["nested"] = open(p).read().strip()
try:
    r["vhost_vsock"] = stat.S_ISCHR(os.stat("/dev/vhost-vsock").st_mode)
except OSError:
    r["vhost_vsock"] = False
try:
    r["host_is_vm"] = " hypervisor" in open("/proc/cpuinfo").read()
except OSError:
    pass
line = json.dumps(r, separators=(",", ":"))
open("/dev/termination-log", "w").write(line)
print(line)
"#;

/// On the host (its PID namespace): find the Kata sandbox of a container (bundle `config.json`
/// → CRI sandbox id), ask its VMM how guest RAM is backed (Cloud Hypervisor `GET
/// /api/v1/vm.info`, read by `Content-Length` as CH keeps the connection open; QEMU QMP
/// `query-memdev`), and read the VMM process's `/proc/<pid>/maps` for guest RAM mapped shared
/// (`rw-s`), which holds for every VMM.
const VMM_MEMORY: &str = r#"import json, os, socket
r = {"check": "kata.vmm-shared-memory"}
env = os.environ
cid, task_dir, run_dir, vmm, api = env["CONTAINER_ID"], env["TASK_DIR"], env["KATA_RUN_DIR"], env["VMM"], env.get("API_SOCKET", "")
def out():
    line = json.dumps(r, separators=(",", ":"))
    open("/dev/termination-log", "w").write(line[-4000:])
    print(line)
def ch_vm_info(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    s.sendall(b"GET /api/v1/vm.info HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = None
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v.strip())
    while length is not None and len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    s.close()
    return int(head.split(b" ")[1]), body if length is None else body[:length]
def qmp(path, command):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    f = s.makefile("rwb")
    json.loads(f.readline())
    def call(cmd):
        f.write(json.dumps({"execute": cmd}).encode() + b"\n")
        f.flush()
        while True:
            m = json.loads(f.readline())
            if "return" in m or "error" in m:
                return m
    call("qmp_capabilities")
    res = call(command)
    s.close()
    return res
def vmm_pid(sid):
    names = {"qemu": ("qemu-system",), "clh": ("cloud-hypervisor",), "dragonball": ("containerd-shim-kata",)}.get(vmm, ())
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cmd = open("/proc/%s/cmdline" % p, "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        exe = os.path.basename(cmd.split(" ")[0])
        if sid in cmd and any(exe.startswith(n) for n in names):
            return int(p)
    return None
def largest_shared(pid):
    best = None
    for line in open("/proc/%d/maps" % pid):
        parts = line.split(None, 5)
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if parts[1][3] == "s" and (best is None or hi - lo > best["size"]):
            best = {"size": hi - lo, "perms": parts[1], "name": parts[5].strip() if len(parts) > 5 else ""}
    return best
try:
    cfg = json.load(open(os.path.join(task_dir, cid, "config.json")))
    sid = cfg.get("annotations", {}).get("io.kubernetes.cri.sandbox-id") or "?"
    r["sandbox_id"] = sid
    if api:
        sock = os.path.join(run_dir, sid, api)
        if not os.path.exists(sock):
            r["error"] = "socket %s missing" % sock
            r["sandboxes"] = sorted(os.listdir(run_dir))[:10] if os.path.isdir(run_dir) else []
        elif vmm == "clh":
            status, body = ch_vm_info(sock)
            r["http_status"] = status
            info = json.loads(body) if status == 200 else {}
            if status != 200:
                r["error"] = body.decode(errors="replace")[:300]
            mem = info.get("config", {}).get("memory", {})
            r["api"] = {"state": info.get("state"), "shared": mem.get("shared"), "hugepages": mem.get("hugepages"),
                        "size": mem.get("size"), "fs_tags": [f.get("tag") for f in info.get("config", {}).get("fs") or []]}
        else:
            res = qmp(sock, "query-memdev")
            if "error" in res:
                r["error"] = "QMP query-memdev: %s" % res["error"].get("desc")
            r["api"] = {"memdevs": [{"id": d.get("id"), "type": d.get("type"), "size": d.get("size"), "share": d.get("share")}
                                    for d in res.get("return", [])]}
    pid = vmm_pid(sid)
    r["vmm_pid"] = pid
    if pid:
        r["maps_shared"] = largest_shared(pid)
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
