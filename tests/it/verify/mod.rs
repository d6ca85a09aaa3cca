//! `osbx verify` on a cluster of its own, one scenario per test: the stand-in plays what no
//! real component can play here (the probe results from inside a Kata VM and on the host, the
//! SPIFFE Workload API) and the Flux controllers' status, through the API; the played OpenSandbox
//! controller (`tests/played`) fills the Pools and allocates sandboxes.

mod annotations;
mod failures;
mod interrupts;
mod lifecycle;

use std::path::PathBuf;
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::builder::TestProfile;
use crate::cluster::standin::{self, KataCluster, Scenario};
use crate::cluster::{self, OwnPlane, RealServer};
use crate::played::opensandbox::Behaviour;
use crate::support::{assert_golden, osbx, outputs};

const SMOKE_ID: &str = "spiffe://ddupan.top/sandbox/smoke";

/// A runc and a Kata pool, a SPIFFE smoke identity, a renamed control-plane namespace
/// (`vf-system`) and short probe deadlines.
pub(crate) fn profile() -> TestProfile {
    TestProfile::new("vf")
        .pool("pod", "runc", [1, 2, 1, 4])
        .pool("vm", "kata", [1, 1, 0, 2])
        .set("verify.probeDeadlineSeconds", 4)
        .set(
            "verify.spiffe",
            json!({"namespace": "vf-spire", "serviceAccount": "spire-smoke", "id": SMOKE_ID,
                   "retrySeconds": 3, "clusterSpiffeId": "vf-smoke"}),
        )
}

fn healthy() -> Scenario {
    Scenario::healthy("vf-node", SMOKE_ID)
}

/// A plane with the Flux, OpenSandbox and SPIRE CRDs, a Kata node, the stand-in, and the
/// profile applied.
pub(crate) struct World {
    pub(crate) plane: OwnPlane,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) client: kube::Client,
    scenario: Arc<Mutex<Scenario>>,
    controllers: Mutex<Option<standin::AbortOnDrop>>,
    /// The played OpenSandbox controller (take it to stop it).
    opensandbox: Mutex<Option<standin::AbortOnDrop>>,
    behaviour: Arc<Mutex<Behaviour>>,
    _kubelet: standin::AbortOnDrop,
}

impl World {
    pub(crate) async fn start() -> Self {
        Self::start_with(&profile()).await
    }

    /// [`World::start`] with another profile over the same namespaces (`vf-…`).
    pub(crate) async fn start_with(profile: &TestProfile) -> Self {
        let scenario = Arc::new(Mutex::new(healthy()));
        let KataCluster { plane, client, controllers, opensandbox, behaviour, kubelet } =
            KataCluster::start("vf", scenario.clone()).await;
        let dir = tempfile::tempdir().unwrap();
        profile.write_to(dir.path());
        let world = Self {
            plane,
            dir,
            client,
            scenario,
            controllers: Mutex::new(Some(controllers)),
            opensandbox: Mutex::new(Some(opensandbox)),
            behaviour,
            _kubelet: kubelet,
        };
        let out = world.osbx(&["apply", "--timeout", "60s"]).await;
        assert_eq!(out.status.code(), Some(0), "apply: {}", outputs(&out).1);
        world
    }

    /// The real OpenSandbox server on loopback for this world's profile (API key `key`, the
    /// server's sandbox create timeout in seconds); the played OpenSandbox controller allocates
    /// the pods the stand-in kubelet runs, as the Lifecycle checks need.
    pub(crate) async fn lifecycle(&self, key: &'static str, create_timeout: &'static str) -> Lifecycle {
        let server = tokio::task::spawn_blocking({
            let dir = self.dir.path().join("server");
            let kubeconfig = self.plane.kubeconfig.clone();
            move || {
                RealServer::start(
                    &dir,
                    &kubeconfig,
                    "vf-sbx",
                    key,
                    &[("OSBX_OPENSANDBOX_CREATE_TIMEOUT", create_timeout)],
                )
            }
        })
        .await
        .unwrap();
        Lifecycle { server, behaviour: Arc::clone(&self.behaviour) }
    }

    /// The healthy scenario, changed by `f`.
    pub(crate) fn set(&self, f: impl FnOnce(&mut Scenario)) {
        let mut s = self.scenario.lock().unwrap();
        *s = healthy();
        f(&mut s);
    }

    pub(crate) fn profile_path(&self) -> PathBuf {
        self.dir.path().join("profile.yaml")
    }

    pub(crate) async fn osbx(&self, args: &[&str]) -> Output {
        let mut full: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        full.extend(["--profile".into(), self.profile_path().display().to_string()]);
        full.extend(["--kubeconfig".into(), self.plane.kubeconfig.display().to_string()]);
        let cwd = self.dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || osbx().current_dir(cwd).args(full).output().unwrap()).await.unwrap()
    }

    /// Run `verify --only <ids> -o json` and return the exit code and the checks.
    pub(crate) async fn verify(&self, only: &str) -> (Option<i32>, Vec<Value>) {
        let out = self.osbx(&["verify", "--only", only, "-o", "json"]).await;
        let (stdout, stderr) = outputs(&out);
        let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
        (out.status.code(), v["checks"].as_array().unwrap().clone())
    }
}

/// The Lifecycle API of a [`World`]: the real server, and how the played OpenSandbox controller
/// behaves (changeable while it runs).
pub(crate) struct Lifecycle {
    pub(crate) server: RealServer,
    pub(crate) behaviour: Arc<Mutex<Behaviour>>,
}

async fn apply(client: &kube::Client, obj: &Value) {
    let (api, name) = cluster::api_for(client, obj).await;
    api.patch(&name, &PatchParams::apply("test"), &Patch::Apply(obj)).await.unwrap();
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

pub(crate) async fn leftovers(client: &kube::Client) -> Vec<String> {
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

/// The verify table with what differs between runs (each check's time) replaced by `T.Ts`,
/// keeping the column widths.
fn stable(table: &str) -> String {
    let is_time = |w: &str| w.strip_suffix('s').is_some_and(|n| n.contains('.') && n.parse::<f64>().is_ok());
    let line = |line: &str| {
        let mut offset = 0;
        for word in line.split(' ') {
            if is_time(word) {
                let field_start = line[..offset].trim_end().len();
                let field_end = offset + word.len();
                let width = field_end - field_start;
                return format!("{}{:>width$}{}", &line[..field_start], "T.Ts", &line[field_end..]);
            }
            offset += word.len() + 1;
        }
        line.to_owned()
    };
    table.lines().map(|l| line(l) + "\n").collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_platform_is_ready_and_its_checks_run_concurrently() {
    let world = World::start().await;
    let junit = world.dir.path().join("junit.xml").display().to_string();

    // Every check passes (the Lifecycle API checks run against the real server in `lifecycle`).
    let out = world
        .osbx(&[
            "verify",
            "--skip",
            "opensandbox.server,opensandbox.lifecycle,opensandbox.exec,opensandbox.reclaim",
            "--junit",
            &junit,
        ])
        .await;
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert_eq!(stdout.lines().last(), Some("Ready"), "{stdout}");
    assert_golden("verify-healthy.txt", &stable(&stdout));
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("<testsuite name=\"osbx verify\" tests=\"11\" failures=\"0\" errors=\"0\" skipped=\"2\""),
        "{xml}"
    );
    wait_clean(&world.client).await;

    // For bench/run: a full verify's wall time against its slowest check.
    let start = Instant::now();
    let out = world
        .osbx(&[
            "verify",
            "--skip",
            "opensandbox.server,opensandbox.lifecycle,opensandbox.exec,opensandbox.reclaim",
            "-o",
            "json",
        ])
        .await;
    let wall = start.elapsed().as_secs_f64();
    let report: Value = serde_json::from_str(&outputs(&out).0).unwrap();
    let checks = report["checks"].as_array().unwrap();
    let slowest = checks.iter().filter_map(|c| c["duration_ms"].as_u64()).max().unwrap_or(1);
    // The smoke version: no check waits for another to finish. Run one after another, the
    // checks would span at least the sum of their durations, and the slowest would either start
    // after the others ended or end before they started; run at once, every check starts while
    // the slowest runs and the span is about the slowest's. (Not "every check starts before any
    // ends": on a loaded machine a 4 ms check can end before the scheduler has started the
    // eleventh, and that says nothing about waiting.) A check that skips does no work: it ends
    // as it starts, and says nothing of the others.
    let working: Vec<(u64, u64)> = checks
        .iter()
        .filter(|c| c["outcome"] != "SKIP")
        .filter_map(|c| Some((c["started_ms"].as_u64()?, c["duration_ms"].as_u64()?)))
        .collect();
    assert!(working.len() >= 2, "{report}");
    let (slow_start, slow_duration) = *working.iter().max_by_key(|(_, d)| *d).unwrap();
    let slow_end = slow_start + slow_duration;
    let span = working.iter().map(|(s, d)| s + d).max().unwrap() - working.iter().map(|(s, _)| *s).min().unwrap();
    let sum: u64 = working.iter().map(|(_, d)| d).sum();
    assert!(working.iter().all(|(s, _)| *s < slow_end), "a check started after the slowest ended: {report}");
    assert!(span < sum, "the checks spanned {span} ms, the sum of their durations {sum} ms: {report}");
    let slowest = Duration::from_millis(slowest).as_secs_f64();
    #[allow(clippy::print_stderr, reason = "the line bench/run reads")]
    let () = eprintln!(
        "verify-bench: full verify {:.0} ms wall, slowest check {:.0} ms, ratio {:.2} (target ≤ 1.2)",
        wall * 1000.0,
        slowest * 1000.0,
        wall / slowest
    );
    wait_clean(&world.client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_verify_is_ready_only_when_the_apply_is_ready_and_every_check_passes() {
    let world = World::start().await;
    let out = world.osbx(&["apply", "--verify", "--only", "nodes.ready,kata.runtimeclass"]).await;
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stderr.contains("all layers ready") && stdout.lines().last() == Some("Ready"), "{stdout}{stderr}");
    world.set(|s| s.guest_kernel = "6.8.0-45-generic".into());
    let out = world.osbx(&["apply", "--verify", "--only", "kata.guest-kernel"]).await;
    assert_eq!(out.status.code(), Some(1), "apply ready but verify failed: {}", outputs(&out).0);
    wait_clean(&world.client).await;
}

/// The fix of a server that is not Available names the profile's control-plane namespace
/// (`vf-system`), not the chart's default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_not_available_is_diagnosed_in_the_profiles_namespace() {
    let world = World::start().await;
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "opensandbox-server", "namespace": "vf-system"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "s"}},
                 "template": {"metadata": {"labels": {"app": "s"}}, "spec": {"containers": [{"name": "main", "image": "server:v0.2.2"}]}}}});
    apply(&world.client, &deployment).await;
    let (code, checks) = world.verify("opensandbox.server").await;
    assert_eq!(code, Some(1));
    assert_check(&checks, "opensandbox.server", "FAIL", "kubectl -n vf-system logs deploy/opensandbox-server");
    assert!(!check(&checks, "opensandbox.server").to_string().contains("opensandbox-system"), "{checks:?}");
}
