//! `osbx verify` on a cluster of its own: the stand-in plays the Flux and OpenSandbox
//! controllers, the scheduler and the kubelet (probe results per scenario), through the API.

use std::path::PathBuf;
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::cluster::standin::{self, Controllers, Kubelet, NodeState, Scenario};
use crate::cluster::{self, OwnPlane};
use crate::support::{osbx, outputs};

const PROFILE: &str = "apiVersion: osbx.dev/v1alpha1
kind: Profile
metadata: {name: vf}
cluster: {name: vf, fluxNamespace: vf-flux}
layers:
  - {name: opensandbox, component: opensandbox}
  - {name: opensandbox-pools, component: pools, dependsOn: [opensandbox]}
opensandbox:
  namespaces: {controlPlane: vf-system, sandbox: vf-sbx}
  source: {url: https://github.com/opensandbox-group/OpenSandbox.git, ref: {tag: helm/opensandbox/0.2.2}}
  server:
    apiKey: {secretRef: {name: api-key}}
    config: {runtime: {execdImage: example.com/execd:v1.0.22}}
pools:
  defaults: {image: example.com/sandbox:v1, command: [sleep, infinity]}
  items:
    - {name: pod, runtime: runc, capacity: {bufferMin: 1, bufferMax: 2, poolMin: 1, poolMax: 4}}
    - {name: vm, runtime: kata, capacity: {bufferMin: 1, bufferMax: 1, poolMin: 0, poolMax: 2}}
verify:
  probeDeadlineSeconds: 4
  spiffe: {namespace: vf-spire, serviceAccount: spire-smoke, id: 'spiffe://ddupan.top/sandbox/smoke', retrySeconds: 3, clusterSpiffeId: vf-smoke}
";

const SMOKE_ID: &str = "spiffe://ddupan.top/sandbox/smoke";

fn healthy() -> Scenario {
    Scenario {
        node: "vf-node".into(),
        guest_kernel: "6.18.35".into(),
        cmdline_marker: true,
        kvm: true,
        shared_memory: true,
        smoke_id: Some(SMOKE_ID.into()),
        wrong_id: None,
        workload_api_error: None,
    }
}

struct World {
    plane: OwnPlane,
    dir: tempfile::TempDir,
    client: kube::Client,
    scenario: Arc<Mutex<Scenario>>,
    controllers: Mutex<Option<standin::AbortOnDrop>>,
    _kubelet: standin::AbortOnDrop,
}

impl World {
    async fn start() -> Self {
        let plane = tokio::task::spawn_blocking(OwnPlane::start).await.unwrap();
        let client = cluster::client_for(&plane.kubeconfig).await;
        for dir in ["flux", "opensandbox", "spire"] {
            cluster::install_crds(&client, dir).await;
        }
        for ns in ["vf-flux", "vf-spire"] {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            let (api, name) = cluster::api_for(&client, &obj).await;
            api.patch(&name, &PatchParams::apply("test"), &Patch::Apply(&obj)).await.unwrap();
        }
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "spire-smoke", "namespace": "vf-spire"}});
        let rc = json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata-clh-runtime-rs"},
            "handler": "kata-clh-runtime-rs", "overhead": {"podFixed": {"cpu": "250m", "memory": "130Mi"}},
            "scheduling": {"nodeSelector": {"katacontainers.io/kata-runtime": "true", "kata-deploy.katacontainers.io/default": "true"}}});
        for obj in [sa, rc] {
            let (api, name) = cluster::api_for(&client, &obj).await;
            api.patch(&name, &PatchParams::apply("test"), &Patch::Apply(&obj)).await.unwrap();
        }
        standin::node(&client, "vf-node", &NodeState {
            ready: true, kernel: "6.8.0-45-generic", runtime_handlers: &["runc", "kata-clh-runtime-rs"],
            labels: json!({"katacontainers.io/kata-runtime": "true", "kata-deploy.katacontainers.io/default": "true"}),
        })
        .await;
        let controllers = Controllers {
            flux_namespaces: vec!["vf-flux".into(), "vf-system".into()],
            pool_namespaces: vec!["vf-sbx".into()],
            ..Controllers::default()
        }
        .spawn(client.clone());
        let scenario = Arc::new(Mutex::new(healthy()));
        let kubelet = Kubelet::spawn(client.clone(), scenario.clone());
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("profile.yaml"), PROFILE).unwrap();
        let world =
            Self { plane, dir, client, scenario, controllers: Mutex::new(Some(controllers)), _kubelet: kubelet };
        let out = world.osbx(&["apply", "--timeout", "60s"]).await;
        assert_eq!(out.status.code(), Some(0), "apply: {}", outputs(&out).1);
        world
    }

    fn set(&self, f: impl FnOnce(&mut Scenario)) {
        let mut s = self.scenario.lock().unwrap();
        *s = healthy();
        f(&mut s);
    }

    async fn osbx(&self, args: &[&str]) -> Output {
        let mut full: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        full.extend(["--profile".into(), self.dir.path().join("profile.yaml").display().to_string()]);
        full.extend(["--kubeconfig".into(), self.plane.kubeconfig.display().to_string()]);
        let cwd = self.dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || osbx().current_dir(cwd).args(full).output().unwrap()).await.unwrap()
    }

    /// Run `verify --only <ids> -o json` and return the checks by id.
    async fn verify(&self, only: &str) -> (Option<i32>, Vec<Value>) {
        let out = self.osbx(&["verify", "--only", only, "-o", "json"]).await;
        let (stdout, stderr) = outputs(&out);
        let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
        (out.status.code(), v["checks"].as_array().unwrap().clone())
    }

    fn junit_path(&self) -> PathBuf {
        self.dir.path().join("junit.xml")
    }
}

fn check<'a>(checks: &'a [Value], id: &str) -> &'a Value {
    checks.iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("no {id} in {checks:?}"))
}

#[track_caller]
fn assert_check(checks: &[Value], id: &str, outcome: &str, fragment: &str) {
    let c = check(checks, id);
    assert_eq!(c["outcome"], outcome, "{id}: {c}");
    let field = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
    let text = format!("{} {} {}", field("evidence"), field("diagnosis"), field("fix"));
    assert!(text.contains(fragment), "{id}: {fragment:?} not in {c}");
}

async fn leftovers(client: &kube::Client) -> Vec<String> {
    let lp = ListParams::default().labels("app.kubernetes.io/managed-by=osbx-verify");
    let mut left: Vec<String> = Api::<Namespace>::all(client.clone())
        .list(&lp)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    left.extend(Api::<Pod>::all(client.clone()).list(&lp).await.unwrap().into_iter().filter_map(|p| p.metadata.name));
    left
}

async fn wait_clean(client: &kube::Client) {
    let start = Instant::now();
    while !leftovers(client).await.is_empty() && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(leftovers(client).await, Vec::<String>::new(), "a run left objects behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_platform_is_ready_and_each_failure_mode_has_its_diagnosis() {
    let world = World::start().await;
    let junit = world.junit_path().display().to_string();

    // Healthy: every check passes (the Lifecycle API checks run against the real server in
    // `lifecycle_against_the_real_opensandbox_server`).
    let out = world.osbx(&["verify", "--skip", "opensandbox.server,opensandbox.lifecycle", "--junit", &junit]).await;
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert_eq!(stdout.lines().last(), Some("Ready"), "{stdout}");
    for id in [
        "flux.layers",
        "nodes.ready",
        "kata.runtimeclass",
        "kata.guest-kernel",
        "kata.host-kvm",
        "kata.vmm-shared-memory",
        "spiffe.issued",
        "spiffe.denied",
        "opensandbox.pools",
    ] {
        assert!(stdout.lines().any(|l| l.starts_with(id) && l.contains("PASS")), "{id} did not pass:\n{stdout}");
    }
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("<testsuite name=\"osbx verify\" tests=\"9\" failures=\"0\" errors=\"0\""), "{xml}");
    wait_clean(&world.client).await;

    // For bench/run: a full verify's wall time against its slowest check (checks run concurrently).
    let start = Instant::now();
    let out = world.osbx(&["verify", "--skip", "opensandbox.server,opensandbox.lifecycle", "-o", "json"]).await;
    let wall = start.elapsed().as_millis();
    let report: Value = serde_json::from_str(&outputs(&out).0).unwrap();
    let checks = report["checks"].as_array().unwrap();
    let slowest = checks.iter().filter_map(|c| c["duration_ms"].as_u64()).max().unwrap_or(1);
    // The smoke version: every check starts at once, none waits for another to finish.
    let last_start = checks.iter().filter_map(|c| c["started_ms"].as_u64()).max().unwrap();
    let first_end =
        checks.iter().filter_map(|c| Some(c["started_ms"].as_u64()? + c["duration_ms"].as_u64()?)).min().unwrap();
    assert!(last_start <= first_end, "checks ran one after another: {report}");
    #[allow(clippy::print_stderr)]
    let () = eprintln!(
        "verify-bench: full verify {wall} ms wall, slowest check {slowest} ms, ratio {:.2} (target ≤ 1.2)",
        wall as f64 / slowest as f64
    );
    wait_clean(&world.client).await;

    // apply --verify: Ready only if the apply is ready and every selected check passes.
    let out = world.osbx(&["apply", "--verify", "--only", "nodes.ready,kata.runtimeclass"]).await;
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stderr.contains("all layers ready") && stdout.lines().last() == Some("Ready"), "{stdout}{stderr}");
    world.set(|s| s.guest_kernel = "6.8.0-45-generic".into());
    let out = world.osbx(&["apply", "--verify", "--only", "kata.guest-kernel"]).await;
    assert_eq!(out.status.code(), Some(1), "apply ready but verify failed: {}", outputs(&out).0);
    wait_clean(&world.client).await;

    // Each documented failure mode fails with its own diagnosis.
    world.set(|s| s.guest_kernel = "6.8.0-45-generic".into());
    let (code, checks) = world.verify("kata.guest-kernel").await;
    assert_eq!(code, Some(1));
    assert_check(&checks, "kata.guest-kernel", "FAIL", "not running in a Kata VM");

    world.set(|s| s.kvm = false);
    let (code, checks) = world.verify("kata.host-kvm").await;
    assert_eq!(code, Some(1));
    assert_check(&checks, "kata.host-kvm", "FAIL", "/dev/kvm is not a character device");

    world.set(|s| s.shared_memory = false);
    let (_, checks) = world.verify("kata.vmm-shared-memory").await;
    assert_check(&checks, "kata.vmm-shared-memory", "FAIL", "virtio-fs requires shared memory");

    world.set(|s| s.wrong_id = Some("spiffe://ddupan.top/ns/vf-spire/sa/spire-smoke-wrong".into()));
    let (_, checks) = world.verify("spiffe").await;
    assert_check(&checks, "spiffe.issued", "PASS", SMOKE_ID);
    assert_check(&checks, "spiffe.denied", "FAIL", "catch-all");

    world.set(|s| s.workload_api_error = Some("rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing: dial unix /spiffe-workload-api/spire-agent.sock: connect: connection refused\"".into()));
    let (code, checks) = world.verify("spiffe").await;
    assert_eq!(code, Some(1), "broken infrastructure is never a pass");
    assert_check(&checks, "spiffe.issued", "ERROR", "do not cross the VM boundary");
    assert_check(&checks, "spiffe.denied", "ERROR", "would prove nothing");

    world.set(|s| s.smoke_id = None);
    let (_, checks) = world.verify("spiffe.issued").await;
    assert_check(&checks, "spiffe.issued", "FAIL", "ClusterSPIFFEID vf-smoke does not exist");
    // The smoke ClusterSPIFFEID exists but carries a className no controller processes.
    let id = json!({"apiVersion": "spire.spiffe.io/v1alpha1", "kind": "ClusterSPIFFEID", "metadata": {"name": "vf-smoke"},
                    "spec": {"className": "other-class", "spiffeIDTemplate": SMOKE_ID, "workloadSelectorTemplates": ["k8s:sa:spire-smoke"]}});
    let (api, name) = cluster::api_for(&world.client, &id).await;
    api.patch(&name, &PatchParams::apply("test"), &Patch::Apply(&id)).await.unwrap();
    let (_, checks) = world.verify("spiffe.issued").await;
    assert_check(
        &checks,
        "spiffe.issued",
        "FAIL",
        "ClusterSPIFFEID vf-smoke has no status.stats: the installed spire-controller-manager ignores it (its className is not \"other-class\"",
    );

    // A Pool that lost its capacity.
    world.set(|_| {});
    let pools = cluster::pool_api_in(&world.client, "vf-sbx").await;
    let pool = pools.get("pod").await.unwrap();
    let generation = pool.metadata.generation.unwrap_or(1);
    let status = json!({"status": {"observedGeneration": generation, "total": 1, "allocated": 0, "available": 0, "revision": "x"}});
    pools.patch_status("pod", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    let (_, checks) = world.verify("opensandbox.pools").await;
    assert_check(&checks, "opensandbox.pools", "FAIL", "available 0 < 1");

    // A Flux object whose controller has not seen its latest generation (controllers stopped).
    world.controllers.lock().unwrap().take();
    let gvk = kube::core::GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", "GitRepository");
    let ar = kube::discovery::pinned_kind(&world.client, &gvk).await.unwrap().0;
    let repos: Api<kube::api::DynamicObject> = Api::namespaced_with(world.client.clone(), "vf-system", &ar);
    let status = json!({"status": {"observedGeneration": 0}});
    repos.patch_status("opensandbox", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    let (_, checks) = world.verify("flux.layers").await;
    assert_check(&checks, "flux.layers", "FAIL", "GitRepository/vf-system/opensandbox: InProgress");

    // The RuntimeClass is gone, then the node goes NotReady.
    let rcs: Api<k8s_openapi::api::node::v1::RuntimeClass> = Api::all(world.client.clone());
    rcs.delete("kata-clh-runtime-rs", &Default::default()).await.unwrap();
    let (_, checks) = world.verify("kata.runtimeclass").await;
    assert_check(&checks, "kata.runtimeclass", "FAIL", "RuntimeClass kata-clh-runtime-rs not found");
    standin::node(
        &world.client,
        "vf-node",
        &NodeState {
            ready: false,
            kernel: "6.8.0-45-generic",
            runtime_handlers: &["runc"],
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
    wait_clean(&world.client).await;
}

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
    let _ = kill(child, "KILL");
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
        .arg(world.dir.path().join("profile.yaml"))
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

/// The real OpenSandbox server (PyPI `opensandbox-server`, pinned in tests/opensandbox) on
/// loopback against this world's plane; stopped when dropped (and by its watchdog).
struct RealServer {
    dir: PathBuf,
    url: String,
}

impl Drop for RealServer {
    fn drop(&mut self) {
        let _ =
            std::process::Command::new(crate::support::root().join("tests/opensandbox/stop")).arg(&self.dir).output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_against_the_real_opensandbox_server() {
    let world = World::start().await;
    let key = "osbx-test-key-5f1d2c";
    let server = tokio::task::spawn_blocking({
        let world_dir = world.dir.path().to_path_buf();
        let kubeconfig = world.plane.kubeconfig.clone();
        move || {
            let fake = WorldPaths { dir: world_dir, kubeconfig };
            fake.start_server(key)
        }
    })
    .await
    .unwrap();
    let behaviour = Arc::new(Mutex::new(standin::SandboxBehaviour { allocate: true, release: true }));
    let _controller =
        standin::SandboxController::spawn(world.client.clone(), "vf-sbx".into(), "vf-node".into(), behaviour.clone());

    let run = |only: &'static str| {
        let url = server.url.clone();
        let world = &world;
        async move {
            let mut args: Vec<String> = ["verify", "--only", only, "--server-url", &url, "-o", "json"]
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
            args.extend(["--profile".into(), world.dir.path().join("profile.yaml").display().to_string()]);
            args.extend(["--kubeconfig".into(), world.plane.kubeconfig.display().to_string()]);
            let cwd = world.dir.path().to_path_buf();
            let out = tokio::task::spawn_blocking(move || {
                osbx().current_dir(cwd).env("OSBX_API_KEY", key).args(args).output().unwrap()
            })
            .await
            .unwrap();
            let (stdout, stderr) = outputs(&out);
            assert!(!stdout.contains(key) && !stderr.contains(key), "the API key was printed");
            let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
            (out.status.code(), v["checks"].as_array().unwrap().clone())
        }
    };

    let (code, checks) = run("opensandbox").await;
    assert_check(&checks, "opensandbox.server", "PASS", "no key → 401 MISSING_API_KEY");
    assert_check(&checks, "opensandbox.lifecycle.pod", "PASS", "deleted, BatchSandbox and pods gone, GET → 404");
    assert_check(&checks, "opensandbox.lifecycle.vm", "PASS", "Running on pool vm");
    assert_eq!(code, Some(0), "{checks:?}");

    // The controller never allocates: the server times out the create.
    *behaviour.lock().unwrap() = standin::SandboxBehaviour { allocate: false, release: true };
    let (code, checks) = run("opensandbox.lifecycle.pod").await;
    assert_eq!(code, Some(1));
    assert_check(
        &checks,
        "opensandbox.lifecycle.pod",
        "FAIL",
        "did not become Running within the server's create timeout",
    );

    // The controller never releases: the BatchSandbox stays behind after delete.
    *behaviour.lock().unwrap() = standin::SandboxBehaviour { allocate: true, release: false };
    let (code, checks) = run("opensandbox.lifecycle.pod").await;
    assert_eq!(code, Some(1));
    assert_check(&checks, "opensandbox.lifecycle.pod", "FAIL", "was left behind");
    *behaviour.lock().unwrap() = standin::SandboxBehaviour { allocate: true, release: true };

    // Without OSBX_API_KEY, the key comes from the Secret the profile names.
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "api-key", "namespace": "vf-system"},
                        "stringData": {"api-key": key}});
    let (api, name) = crate::cluster::api_for(&world.client, &secret).await;
    api.patch(&name, &PatchParams::apply("test"), &Patch::Apply(&secret)).await.unwrap();
    let mut args: Vec<String> = ["verify", "--only", "opensandbox.lifecycle.pod", "--server-url", &server.url]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    args.extend(["--profile".into(), world.dir.path().join("profile.yaml").display().to_string()]);
    args.extend(["--kubeconfig".into(), world.plane.kubeconfig.display().to_string()]);
    let out = tokio::task::spawn_blocking(move || osbx().env_remove("OSBX_API_KEY").args(args).output().unwrap())
        .await
        .unwrap();
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(!stdout.contains(key) && !stderr.contains(key));
    drop(server);
}

/// What `RealServer::start` needs of a world, movable to a blocking thread.
struct WorldPaths {
    dir: PathBuf,
    kubeconfig: PathBuf,
}

impl WorldPaths {
    fn start_server(&self, key: &str) -> RealServer {
        let dir = self.dir.join("server");
        let out = std::process::Command::new(crate::support::root().join("tests/opensandbox/serve"))
            .arg("--watch-pid")
            .arg(std::process::id().to_string())
            .arg(&dir)
            .arg(&self.kubeconfig)
            .arg("vf-sbx")
            .env("OPENSANDBOX_SERVER_API_KEY", key)
            .env("OSBX_OPENSANDBOX_CREATE_TIMEOUT", "6")
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("tests/opensandbox/serve");
        assert!(out.status.success(), "tests/opensandbox/serve failed (see stderr)");
        let url = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_owned();
        RealServer { dir, url }
    }
}
