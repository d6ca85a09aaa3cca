//! `opensandbox.reclaim.<pool>` against a real QEMU VMM: the Lifecycle check's sandbox, taken
//! from a Kata pool whose pods the played shim runs as real QEMU guests, is deleted through the
//! real OpenSandbox server; the host probe then reads this machine's processes and directories.
//! A VMM that exits on delete passes; one the played shim leaves running, and a run directory it
//! leaves behind, each fail naming the node, the PID and the path. (Before, `verify` saw only the
//! BatchSandbox and the pods go: a leaked VM passed.)

use serde_json::Value;

use super::{assert_check, world as kata_world};
use crate::e2e::SERIAL;
use crate::node::report;
use crate::played::kata::{Leave, Runtime, Shim, Vmm};
use crate::support::{osbx, outputs};
use crate::verify::World;

const KEY: &str = "osbx-test-key-reclaim";

/// `verify --only opensandbox.reclaim.vm` through the real server at `url`.
async fn verify(world: &World, url: &str) -> (Option<i32>, Vec<Value>) {
    let mut args: Vec<String> =
        ["verify", "--only", "opensandbox.reclaim.vm", "--server-url", url, "-o", "json"].map(str::to_owned).to_vec();
    args.extend(["--profile".into(), world.profile_path().display().to_string()]);
    args.extend(["--kubeconfig".into(), world.plane.kubeconfig.display().to_string()]);
    let cwd = world.dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        osbx().current_dir(cwd).env("OSBX_API_KEY", KEY).args(args).output().unwrap()
    })
    .await
    .unwrap();
    let (stdout, stderr) = outputs(&out);
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
    (out.status.code(), v["checks"].as_array().unwrap().clone())
}

/// The sandbox the last run stopped: its VMM's PID and its directory.
fn last_stopped(shim: &Shim) -> (u32, String) {
    let (pid, dir) = shim.stopped().last().cloned().expect("the shim stopped no sandbox");
    (pid, dir.display().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vmm_that_exits_passes_one_left_running_or_a_run_directory_left_fails() {
    let _turn = SERIAL.lock().await;
    let (world, shim) = kata_world("kata-qemu", Vmm::Qemu { shared: true }, Runtime::Go).await;
    let lifecycle = world.lifecycle(KEY, "60").await;
    let url = lifecycle.server.url.clone();

    // The real QEMU exits when the shim stops the sandbox, its directory goes: PASS, with what
    // was there before the delete.
    let (code, checks) = verify(&world, &url).await;
    report(&checks);
    let (pid, dir) = last_stopped(&shim);
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
    let (code, checks) = verify(&world, &url).await;
    report(&checks);
    let (pid, dir) = last_stopped(&shim);
    assert_check(
        &checks,
        "opensandbox.reclaim.vm",
        "FAIL",
        &[
            "on node vf-node",
            &format!("still running: PID {pid} ("),
            "qemu-system-x86_64",
            "not reclaimed on node vf-node",
        ],
    );
    assert!(!checks[0].to_string().contains(&format!("run directories left: {dir}")), "{checks:?}");
    assert_eq!(code, Some(1));

    // The VMM exits but the sandbox's run directory stays: FAIL naming the path.
    shim.leave(Leave::RunDir);
    let (code, checks) = verify(&world, &url).await;
    report(&checks);
    let (pid, dir) = last_stopped(&shim);
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
