//! `opensandbox.reclaim.<pool>` against a real QEMU VMM: the Lifecycle check's sandbox, taken
//! from a Kata pool whose pods the played shim runs as real QEMU guests, is deleted through the
//! real OpenSandbox server; the host probe then reads this machine's processes and directories.
//! A VMM that exits on delete passes; one the played shim leaves running, and a run directory it
//! leaves behind, each fail naming the node, the PID and the path. (Before, `verify` saw only the
//! BatchSandbox and the pods go: a leaked VM passed.)

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use super::{assert_check, world as kata_world};
use crate::node::report;
use crate::played::kata::{Leave, Runtime, Shim, Vmm};
use crate::played::opensandbox::LABEL_POOL_NAME;
use crate::support::{osbx, output_off_runtime, outputs};
use crate::turns::{self, Need};
use crate::verify::World;

const KEY: &str = "osbx-test-key-reclaim";

/// `verify --only opensandbox.reclaim.vm` through the real server at `url`.
async fn verify(world: &World, url: &str) -> (Option<i32>, Vec<Value>) {
    let mut cmd = osbx();
    cmd.current_dir(world.dir.path()).env("OSBX_API_KEY", KEY);
    cmd.args(["verify", "--only", "opensandbox.reclaim.vm", "--server-url", url, "-o", "json"]);
    cmd.arg("--profile").arg(world.profile_path()).arg("--kubeconfig").arg(&world.plane.kubeconfig);
    let out = output_off_runtime(cmd).await;
    let (stdout, stderr) = outputs(&out);
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
    (out.status.code(), v["checks"].as_array().unwrap().clone())
}

/// Wait until a pod of pool `vm` is Running as a VM of the played shim and the Pool counts an
/// idle pod available (the Lifecycle check takes one).
async fn a_vm_is_available(world: &World) {
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), "vf-sbx");
    let pool = json!({"apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": "Pool", "metadata": {"name": "vm", "namespace": "vf-sbx"}});
    let (pools, _) = crate::cluster::api_for(&world.client, &pool).await;
    let start = Instant::now();
    loop {
        let lp = ListParams::default().labels(&format!("{LABEL_POOL_NAME}=vm"));
        let vm = pods.list(&lp).await.unwrap().items.iter().any(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .and_then(|c| c.first())
                    .and_then(|c| c.container_id.as_deref())
                    .is_some_and(|id| {
                        id.strip_prefix("containerd://")
                            .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
                    })
        });
        let available = pools.get("vm").await.ok().and_then(|p| p.data["status"]["available"].as_i64()).unwrap_or(0);
        if vm && available >= 1 {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "no pod of pool vm became a VM");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The sandbox the last run stopped: its VMM's PID and its directory.
fn last_stopped(shim: &Shim) -> (u32, String) {
    let (pid, dir) = shim.stopped().last().cloned().expect("the shim stopped no sandbox");
    (pid, dir.display().to_string())
}

/// Once a VM is available again: the reclaim check through the real server at `url`, its
/// checks reported; verify's exit code, its checks, and the PID and directory of the sandbox the
/// shim stopped.
async fn reclaim(world: &World, shim: &Shim, url: &str) -> (Option<i32>, Vec<Value>, u32, String) {
    a_vm_is_available(world).await;
    let (code, checks) = verify(world, url).await;
    report(&checks);
    let (pid, dir) = last_stopped(shim);
    (code, checks, pid, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vmm_that_exits_passes_one_left_running_or_a_run_directory_left_fails() {
    let _turn = turns::take(Need::Kata).await;
    let (world, shim) = kata_world("kata-qemu", Vmm::Qemu { shared: true }, Runtime::Go).await;
    // The profile kata_world wrote puts the Kata pool under its class: the played controller
    // replaces the pool's pods, which the played shim runs as real QEMU guests.
    let out = world.osbx(&["apply", "--timeout", "60s"]).await;
    assert_eq!(out.status.code(), Some(0), "apply: {}", outputs(&out).1);
    let lifecycle = world.lifecycle(KEY, "60").await;
    let url = lifecycle.server.url.clone();

    // The real QEMU exits when the shim stops the sandbox, its directory goes: PASS, with what
    // was there before the delete.
    let (code, checks, pid, dir) = reclaim(&world, &shim, &url).await;
    let sid = dir.rsplit('/').next().unwrap().to_owned();
    assert_check(
        &checks,
        "opensandbox.reclaim.vm",
        "PASS",
        &[
            &format!("sandbox {sid} of pod vf-sbx/"),
            "on node vf-node (QEMU, qemu)",
            &format!("before the delete PID {pid} ("),
            &format!("-name sandbox-{sid}"),
            &dir,
            "after it no process names the sandbox",
        ],
    );
    assert_eq!(code, Some(0));

    // The shim leaves the VMM running: FAIL naming the node and the QEMU's PID.
    shim.leave(Leave::Vmm);
    let (code, checks, pid, dir) = reclaim(&world, &shim, &url).await;
    assert_check(
        &checks,
        "opensandbox.reclaim.vm",
        "FAIL",
        &[
            "on node vf-node",
            &format!("still running: PID {pid} ("),
            "qemu-system-x86_64",
            "was not reclaimed on node vf-node",
        ],
    );
    assert!(!checks[0].to_string().contains(&format!("run directories left: {dir}")), "{checks:?}");
    assert_eq!(code, Some(1));

    // The VMM exits but the sandbox's run directory stays: FAIL naming the path.
    shim.leave(Leave::RunDir);
    let (code, checks, pid, dir) = reclaim(&world, &shim, &url).await;
    assert_check(
        &checks,
        "opensandbox.reclaim.vm",
        "FAIL",
        &["on node vf-node", &format!("run directories left: {dir}")],
    );
    assert!(!checks[0].to_string().contains(&format!("PID {pid} (")), "the exited VMM was reported: {checks:?}");
    assert_eq!(code, Some(1));
    drop(lifecycle);
}
