//! Interrupted runs: SIGTERM and SIGINT clean up at once; what a SIGKILLed run leaves is swept
//! by the next run.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use super::{World, leftovers, wait_clean};
use crate::support::outputs;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupted_runs_leave_nothing_behind_after_the_next_run() {
    let world = World::start().await;
    world.set(|s| s.kvm = false); // the host probe hangs until its deadline
    for signal in ["TERM", "INT"] {
        let child = spawn_verify(&world, &["--only", "kata.host-kvm"]);
        wait_for_probe_pod(&world.client).await;
        let status = kill(child, signal);
        assert_eq!(status.0, Some(2), "SIG{signal}: {}", status.1);
        assert!(status.1.contains("interrupted"), "{}", status.1);
        wait_clean(&world.client).await;
    }
    // SIGKILL: no chance to clean up; the next run sweeps it once the killed run has expired.
    let child = spawn_verify(&world, &["--only", "kata.host-kvm", "--verify-timeout", "2s"]);
    wait_for_probe_pod(&world.client).await;
    let (code, _) = kill(child, "KILL");
    assert_eq!(code, None, "SIGKILL leaves no exit code");
    assert!(!leftovers(&world.client).await.is_empty());
    tokio::time::sleep(Duration::from_secs(8)).await;
    world.set(|_| {});
    let out = world.osbx(&["verify", "--only", "nodes.ready"]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("removed what earlier interrupted runs left"), "{stderr}");
    wait_clean(&world.client).await;
}

fn spawn_verify(world: &World, extra: &[&str]) -> std::process::Child {
    let bin = assert_cmd::cargo::cargo_bin("osbx");
    std::process::Command::new(bin)
        .arg("verify")
        .args(extra)
        .arg("--profile")
        .arg(world.profile_path())
        .arg("--kubeconfig")
        .arg(&world.plane.kubeconfig)
        .env("OSBX_COLOR", "never")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

async fn wait_for_probe_pod(client: &kube::Client) {
    let start = Instant::now();
    loop {
        let lp = ListParams::default().labels("osbx.io/probe=host-kvm");
        if !Api::<Pod>::all(client.clone()).list(&lp).await.unwrap().items.is_empty() {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no probe pod appeared");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn kill(child: std::process::Child, signal: &str) -> (Option<i32>, String) {
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill").args([&format!("-{signal}"), &pid]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}
