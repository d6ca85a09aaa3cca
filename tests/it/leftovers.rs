//! `tests/cluster/leftovers`, what `tests/run` looks for after a run: besides processes naming a
//! plane's directory, the processes the tests started whatever their command line (the played
//! Kata shim's QEMU and Cloud Hypervisor name only their own `/tmp` directory) and, after a run
//! with a node, the processes in the node's pod cgroups (containers' processes name neither).
//! Needs root (another process's environment, a cgroup of its own).

use std::process::{Child, Command};

use crate::support::root;

/// What the script prints for `args`, with `OSBX_POD_CGROUP` at `pods` (a cgroup of this test's
/// own, so that a real test node's pods on this machine are not this test's business).
fn leftovers(pods: &str, args: &[&str]) -> String {
    let out = Command::new(root().join("tests/cluster/leftovers"))
        .env("OSBX_POD_CGROUP", pods)
        .env_remove("OSBX_TEST_PLANES")
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn sleeper(seconds: &str, marker: Option<&str>) -> Child {
    let mut cmd = Command::new("sleep");
    cmd.arg(seconds).env_remove("OSBX_TEST_PLANES");
    if let Some(marker) = marker {
        cmd.env("OSBX_TEST_PLANES", marker);
    }
    cmd.spawn().unwrap()
}

fn stop(mut child: Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn the_leftover_check_finds_what_the_tests_started_and_pod_processes() {
    let dir = tempfile::tempdir().unwrap();
    let plane = dir.path().to_str().unwrap().to_owned();
    let marker = format!("{plane}.planes");
    // A cgroup of our own, as the test node's kubelet makes `/kubepods` (cgroup v1's pids
    // hierarchy where there is one, else the unified root).
    let pods = format!("osbx-leftovers-test-{}", std::process::id());
    let hierarchy = ["/sys/fs/cgroup/pids", "/sys/fs/cgroup"]
        .into_iter()
        .find(|h| std::path::Path::new(h).join("cgroup.procs").exists())
        .expect("a cgroup hierarchy");
    let cgroup = std::path::Path::new(hierarchy).join(&pods);
    std::fs::create_dir(&cgroup).unwrap();

    // Started by the tests (the run's marker inherited), naming no plane: like the played QEMU.
    let started = sleeper("300", Some(&marker));
    // Another run's process, and one of nobody's run: not this run's leftovers.
    let other = sleeper("302", Some("/tmp/osbx-plane.other.planes"));
    // A container's process: in the node's pod cgroup, with neither the marker nor the plane.
    let pod = sleeper("301", None);
    std::fs::write(cgroup.join("cgroup.procs"), pod.id().to_string()).unwrap();

    let said = leftovers(&pods, &["--marker", &marker, "--pods", &plane]);
    let lines: Vec<&str> = said.lines().collect();
    assert!(lines.contains(&format!("process {} (started by the tests): sleep 300 ", started.id()).as_str()), "{said}");
    assert!(
        lines.contains(&format!("process {} (in the test node's pod cgroup /{pods}): sleep 301 ", pod.id()).as_str()),
        "{said}"
    );
    assert!(!said.contains(&other.id().to_string()), "another run's process is not this run's: {said}");
    // Without a node in the run, pod cgroups are not looked at; the plane's own processes are
    // still found by its directory.
    let said = leftovers(&pods, &["--marker", &marker, &plane]);
    assert!(!said.contains(&format!("process {} ", pod.id())), "{said}");
    // A plane's own process names its directory (as etcd's --data-dir does).
    let named = Command::new("bash")
        .args(["-c", "exec -a \"sleep-in $0\" sleep 303", &plane])
        .env_remove("OSBX_TEST_PLANES")
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let line = format!("process {} (names {plane}): sleep-in {plane} 303 ", named.id());
    while !leftovers(&pods, &[&plane]).lines().any(|l| l == line) {
        assert!(std::time::Instant::now() < deadline, "{line:?} not found: {}", leftovers(&pods, &[&plane]));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    for child in [started, other, pod, named] {
        stop(child);
    }
    assert_eq!(leftovers(&pods, &["--marker", &marker, "--pods", &plane]), "", "nothing once they are stopped");
    std::fs::remove_dir(&cgroup).unwrap();
}
