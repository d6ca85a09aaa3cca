//! `osbx rollout` across three real planes, each with the real Flux controllers syncing one
//! Flux repository (on the first plane's git server) at its own `clusters/<name>/` path: a
//! healthy rollout goes wave by wave; a change that breaks one cluster's gate stops before the
//! next wave, a run that gates the canary again and fails it makes `--resume` start at the
//! canary, and `--resume` after the fix completes it; a cluster whose checks all skip fails its
//! gate unless the fleet file accepts that; a rollout killed mid-wave converges when run again,
//! with no cluster skipped or changed twice.
//!
//! Every rollout runs as a CI user that holds, on each cluster, exactly the roles `osbx rbac
//! --for rollout --fleet … --cluster <name>` prints for it (applied before each run), and not
//! even the default discovery and self-review bindings; and each permission of those roles is
//! shown needed: without it, the rollout stops before it writes anything and names it.
//!
//! The scenarios share the planes (starting three planes with their controllers takes most of a
//! minute), one scenario at a time; each makes its own change to the fleet's base profile, so
//! every wave has something to roll out whatever ran before. The gate runs the checks these
//! planes can pass (`flux.layers`, `nodes.ready`, `opensandbox.pools`: the chart's server runs on
//! a kwok node, so its Lifecycle API is not there to call).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::discovery::Discovery;
use serde_json::{Value, json};

use super::git::{FluxRepo, publish_chart};
use super::world::{
    ControllerPlane, apply_object, apply_sync, default_profile, node_and_runtime_class, write_bootstrap,
};
use super::{KEY, bench};
use crate::cluster;
use crate::reliability::rbac::DEFAULT_BINDINGS;
use crate::reliability::rbac::atoms::{atoms, denial, names_denial, namespaced, settle, user_may_do, without};
use crate::support::{git, osbx, output_off_runtime, outputs};
use crate::turns::{self, Need, Turn};

/// The clusters, in fleet order, and their waves.
const CLUSTERS: [&str; 3] = ["lab-a", "lab-b", "lab-c"];
/// The checks the gate runs.
const GATE: &str = "flux.layers,nodes.ready,opensandbox.pools";
/// The CI user every rollout runs as.
const USER: &str = "rollout-ci";
/// How many scenarios share the world.
const SCENARIOS: usize = 6;

/// Three planes, one Flux repository, the fleet file and its base profile.
struct FleetWorld {
    planes: Vec<ControllerPlane>,
    flux: FluxRepo,
    work: tempfile::TempDir,
    /// The base profile (the embedded default, its chart source on loopback).
    base: Value,
    /// Per-cluster overrides.
    overrides: Vec<Value>,
    /// `rollout.acceptNoEvidence` of the fleet file.
    accept_no_evidence: bool,
    /// Each cluster's kubeconfig of [`USER`].
    users: Vec<PathBuf>,
    /// Whether the base profile written has an acceptance layer (reset for each scenario).
    in_cluster: bool,
}

/// The shared world, and how many of the scenarios are still to run (the last one drops it).
static WORLD: tokio::sync::Mutex<Option<FleetWorld>> = tokio::sync::Mutex::const_new(None);
static LEFT: AtomicUsize = AtomicUsize::new(SCENARIOS);

impl FleetWorld {
    async fn start() -> Self {
        let started = Instant::now();
        let planes: Vec<ControllerPlane> = futures::future::join_all(
            (0..3).map(|_| async { tokio::task::spawn_blocking(ControllerPlane::start).await.unwrap() }),
        )
        .await;
        // Clients are made per scenario: each test has its own runtime, which a client's
        // connection task belongs to.
        let mut clients = Vec::new();
        for plane in &planes {
            let client = cluster::client_for(&plane.kubeconfig).await;
            node_and_runtime_class(&client).await;
            clients.push(client);
        }
        let work = tempfile::Builder::new().prefix("osbx-e2e-fleet-").tempdir().unwrap();
        let mut base = default_profile(&publish_chart(&planes[0], work.path()));
        // Flux now holds the pools layer until its Pools are filled (healthCheckExprs), and applies
        // no newer revision of it while that health check waits: the default profile's 20m would
        // keep a fix from lab-b for 20 minutes, so the scenarios give up on a stuck Pool sooner.
        for layer in base["layers"].as_array_mut().expect("the default profile's layers") {
            if layer["name"] == "opensandbox-pools" {
                layer["timeout"] = json!("30s");
            }
        }
        // `flux bootstrap` of each cluster at its own path, the API key Secret created by hand
        // (osbx never writes it to git).
        let flux = FluxRepo::init(&planes[0], work.path());
        let mut syncs = Vec::new();
        for (name, client) in CLUSTERS.iter().zip(&clients) {
            syncs.push(write_bootstrap(&flux, name));
            for ns in ["flux-system", "opensandbox-system"] {
                apply_object(client, &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await;
            }
            let secret = json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "opensandbox-api-key", "namespace": "opensandbox-system"},
                "stringData": {"api-key": KEY}});
            apply_object(client, &secret).await;
        }
        flux.commit_all("flux bootstrap");
        flux.push();
        for (sync, client) in syncs.iter().zip(&clients) {
            apply_sync(client, sync).await;
        }
        // The CI user, on each cluster: a client certificate of its CA, and none of the bindings
        // every authenticated user has (the printed roles must grant discovery and reviews too).
        let mut users = Vec::new();
        for ((name, plane), client) in CLUSTERS.iter().zip(&planes).zip(&clients) {
            let dir = work.path().join("users").join(name);
            std::fs::create_dir_all(&dir).unwrap();
            users.push(cluster::user_kubeconfig(&plane.kubeconfig, USER, &dir));
            for binding in DEFAULT_BINDINGS {
                Api::<ClusterRoleBinding>::all(client.clone()).delete(binding, &DeleteParams::default()).await.unwrap();
            }
        }
        let healthz = SubjectAccessReviewSpec {
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some("/healthz".into()),
                verb: Some("get".into()),
            }),
            ..SubjectAccessReviewSpec::default()
        };
        for client in &clients {
            let start = Instant::now();
            while user_may_do(client, USER, healthz.clone()).await {
                assert!(start.elapsed() < Duration::from_secs(10), "the default bindings are still in effect");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        bench("rollout", "world_ready", started.elapsed().as_secs_f64());
        Self {
            planes,
            flux,
            work,
            base,
            overrides: vec![Value::Null; 3],
            accept_no_evidence: false,
            users,
            in_cluster: false,
        }
    }

    fn fleet_path(&self) -> PathBuf {
        self.work.path().join("fleet.yaml")
    }

    /// Write the fleet file and its base profile.
    fn write(&self) {
        let mut base = self.base.clone();
        if self.in_cluster {
            super::acceptance::with_acceptance(&mut base);
        }
        std::fs::write(self.work.path().join("base.yaml"), serde_saphyr::to_string(&base).unwrap()).unwrap();
        let clusters: Vec<Value> = CLUSTERS
            .iter()
            .zip(&self.users)
            .zip(&self.overrides)
            .map(|((name, user), overrides)| {
                json!({"name": name, "context": "osbx-test", "kubeconfig": user, "overrides": overrides,
                       "labels": {"tier": if *name == "lab-a" { "canary" } else { "main" }}})
            })
            .collect();
        let fleet = json!({
            "apiVersion": "osbx.dev/v1alpha1", "kind": "Fleet", "metadata": {"name": "labs"},
            "base": "base.yaml", "clusters": clusters,
            "rollout": {"waves": [
                {"name": "canary", "selector": {"matchLabels": {"tier": "canary"}}},
                {"name": "second", "clusters": ["lab-b"]},
                {"name": "rest", "selector": {}, "maxParallel": 1},
            ], "acceptNoEvidence": self.accept_no_evidence},
        });
        std::fs::write(self.fleet_path(), serde_saphyr::to_string(&fleet).unwrap()).unwrap();
    }

    /// Write the fleet file, and bind the CI user on each cluster to exactly the roles `osbx
    /// rbac --for rollout` prints for it (waiting until the authorizer grants each permission);
    /// returns them per cluster.
    async fn grant(&self) -> Vec<Vec<Value>> {
        self.write();
        let mut out = Vec::new();
        for (name, plane) in CLUSTERS.iter().zip(&self.planes) {
            let mut cmd = osbx();
            cmd.args(["rbac", "--for", "rollout", "--user", USER, "--cluster", name, "--fleet"]).arg(self.fleet_path());
            let printed = output_off_runtime(cmd).await;
            let (stdout, stderr) = outputs(&printed);
            assert_eq!(printed.status.code(), Some(0), "{stderr}");
            let objects: Vec<Value> =
                stdout.split("\n---\n").skip(1).map(|d| serde_saphyr::from_str(d).unwrap()).collect();
            let client = cluster::client_for(&plane.kubeconfig).await;
            for obj in &objects {
                apply_object(&client, obj).await;
            }
            for atom in atoms(&objects) {
                settle(&client, USER, &objects[atom.role], &atom, true).await;
            }
            out.push(objects);
        }
        out
    }

    /// `osbx rollout --push` with the gate's checks (unless `extra` selects others) and `extra`,
    /// as a process, after [`FleetWorld::grant`]; its output.
    async fn rollout(&self, extra: &[&str]) -> Output {
        self.grant().await;
        let only: &[&str] = if extra.contains(&"--only") { &[] } else { &["--only", GATE] };
        // A cluster that checks itself waits for its Job's run too: a longer limit, which a wave
        // that passes never reaches (under a load average of 27 here, its waves took about 50 s each).
        let limit = if self.in_cluster { "180s" } else { "60s" };
        let timeout: &[&str] = if extra.contains(&"--timeout") { &[] } else { &["--timeout", limit] };
        self.run(&[only, timeout, extra].concat()).await
    }

    /// `osbx rollout --push` with `args` and nothing granted; its output.
    async fn run(&self, args: &[&str]) -> Output {
        let child = self.spawn(args);
        tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap()
    }

    /// `osbx rollout --push` with the gate's checks, as a process (call [`FleetWorld::grant`]
    /// first).
    fn spawn_rollout(&self) -> std::process::Child {
        self.spawn(&["--only", GATE, "--timeout", "60s"])
    }

    fn spawn(&self, extra: &[&str]) -> std::process::Child {
        self.write();
        let fleet = self.fleet_path().display().to_string();
        let repo = self.flux.dir.display().to_string();
        let mut args = vec!["rollout", "--fleet", &fleet, "--repo", &repo, "--push"];
        args.extend_from_slice(extra);
        // A process of its own (the kill scenario kills it), with the environment `osbx()` sets.
        let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("osbx"));
        cmd.env_remove("OSBX_PROFILE").env_remove("OSBX_TEMPLATES").env("OSBX_COLOR", "never");
        cmd.args(&args).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.spawn().unwrap()
    }

    /// The subject lines of the Flux repository's commits, newest first.
    fn log(&self) -> Vec<String> {
        git(&self.flux.dir, &["log", "--format=%s"]).lines().map(str::to_owned).collect()
    }

    /// The gate records on `commit` (`git notes --ref osbx-rollout show`).
    fn gates(&self, commit: &str) -> Vec<Value> {
        let text = git(&self.flux.dir, &["notes", "--ref", "osbx-rollout", "show", commit]);
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("gate records on {commit}: {e}\n{text}"))
    }

    /// The record of `cluster` on `commit`.
    fn gate(&self, commit: &str, cluster: &str) -> Value {
        let gates = self.gates(commit);
        gates
            .iter()
            .find(|g| g["cluster"] == cluster)
            .unwrap_or_else(|| panic!("no gate of {cluster}: {gates:?}"))
            .clone()
    }

    /// The gate records were pushed: the remote's notes ref is the local one.
    fn assert_gates_pushed(&self) {
        let local = git(&self.flux.dir, &["rev-parse", "refs/notes/osbx-rollout"]);
        let remote = git(&self.flux.dir, &["ls-remote", "origin", "refs/notes/osbx-rollout"]);
        assert_eq!(remote.split_whitespace().next(), Some(local.trim()), "the gate records were not pushed");
    }

    /// Cordon (or uncordon) the node of cluster `k`: its `nodes.ready` check fails while it is.
    async fn cordon(&self, k: usize, cordoned: bool) {
        let client = cluster::client_for(&self.planes[k].kubeconfig).await;
        let patch = json!({"spec": {"unschedulable": cordoned}});
        Api::<Node>::all(client).patch("kwok-node-0", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    }

    /// The newest commit whose subject names `wave`.
    fn commit_of(&self, wave: &str) -> String {
        let log = git(&self.flux.dir, &["log", "--format=%H %s"]);
        let line = log
            .lines()
            .find(|l| l.contains(&format!(": wave {wave} ")))
            .unwrap_or_else(|| panic!("no commit of wave {wave}:\n{log}"));
        line.split(' ').next().unwrap().to_owned()
    }

    /// Every file the Flux repository holds for `cluster`, byte for byte, at HEAD and in the work
    /// tree (`None`: not there): `clusters/<cluster>/…` and the directories its layer
    /// Kustomizations (`clusters/<cluster>/apps/*.yaml`) apply, as HEAD has them.
    fn files_of(&self, cluster: &str) -> BTreeMap<String, (Vec<u8>, Option<Vec<u8>>)> {
        let at_head = |path: &str| {
            let out = Command::new("git")
                .arg("-C")
                .arg(&self.flux.dir)
                .args(["cat-file", "blob", &format!("HEAD:{path}")])
                .output()
                .unwrap();
            assert!(out.status.success(), "git cat-file HEAD:{path}: {}", String::from_utf8_lossy(&out.stderr));
            out.stdout
        };
        let head = git(&self.flux.dir, &["ls-tree", "-r", "--name-only", "HEAD"]);
        let mut dirs = vec![format!("clusters/{cluster}/")];
        let apps = format!("clusters/{cluster}/apps/");
        for app in head.lines().filter(|p| p.starts_with(&apps)) {
            let text = String::from_utf8(at_head(app)).unwrap();
            let path = text
                .lines()
                .find_map(|l| l.trim_start().strip_prefix("path: "))
                .unwrap_or_else(|| panic!("{app}: no path"));
            dirs.push(format!("{}/", path.trim().trim_start_matches("./").trim_end_matches('/')));
        }
        head.lines()
            .filter(|p| dirs.iter().any(|d| p.starts_with(d.as_str())))
            .map(|p| (p.to_owned(), (at_head(p), std::fs::read(self.flux.dir.join(p)).ok())))
            .collect()
    }

    /// Assert that each cluster applied the commit of its wave (later commits reach a cluster
    /// only when its Flux is next asked, and change nothing of it).
    async fn assert_applied_their_waves(&self) {
        let commits = [self.commit_of("canary"), self.commit_of("second"), self.commit_of("rest")];
        for ((name, revisions), commit) in CLUSTERS.iter().zip(self.applied().await).zip(commits) {
            for rev in revisions {
                assert!(rev.ends_with(&commit), "{name} applied {rev}, not its wave's {commit}");
            }
        }
    }

    /// The revision each cluster's layer Kustomizations last applied.
    async fn applied(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        for plane in &self.planes {
            let client: Client = cluster::client_for(&plane.kubeconfig).await;
            let client = &client;
            let mut revisions = Vec::new();
            for layer in ["opensandbox", "opensandbox-pools"] {
                let k =
                    super::flux::get(client, "kustomize.toolkit.fluxcd.io/v1", "Kustomization", "flux-system", layer)
                        .await;
                revisions.push(k.map_or_else(String::new, |k| {
                    k["status"]["lastAppliedRevision"].as_str().unwrap_or("").to_owned()
                }));
            }
            out.push(revisions);
        }
        out
    }
}

/// The scenario's turn ([`Need::Fleet`]: one scenario at a time), then the world (started by the
/// first scenario), held for the scenario.
async fn world() -> (Turn, tokio::sync::MutexGuard<'static, Option<FleetWorld>>) {
    let turn = turns::take(Need::Fleet).await;
    let mut guard = WORLD.lock().await;
    if guard.is_none() {
        *guard = Some(FleetWorld::start().await);
    }
    if let Some(w) = guard.as_mut() {
        // What the in-cluster scenario sets, should it have failed: its layer, a second node.
        w.in_cluster = false;
        let client = cluster::client_for(&w.planes[0].kubeconfig).await;
        let _ = Api::<Node>::all(client).delete(super::acceptance::CORDONED, &DeleteParams::default()).await;
    }
    (turn, guard)
}

/// After a scenario: the last one stops the planes.
fn done(guard: &mut tokio::sync::MutexGuard<'static, Option<FleetWorld>>) {
    if LEFT.fetch_sub(1, Ordering::SeqCst) == 1 {
        guard.take();
    }
}

/// The report of a rollout that exited `code` (else the test fails showing its output).
fn report_exited(out: &Output, code: i32) -> Value {
    let (stdout, stderr) = outputs(out);
    assert_eq!(out.status.code(), Some(code), "{stdout}{stderr}");
    report(out)
}

/// The rollout's JSON report.
fn report(out: &Output) -> Value {
    let (stdout, stderr) = outputs(out);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("rollout JSON: {e}\n{stdout}\n{stderr}"))
}

/// Each wave's state.
fn states(report: &Value) -> Vec<(String, String)> {
    report["waves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["name"].as_str().unwrap().to_owned(), w["state"].as_str().unwrap().to_owned()))
        .collect()
}

/// The gates' requests per cluster (`<gate>_reads`, `…_writes`, `…_reviews`, each the mean of the
/// clusters') and their time after Flux had reconciled (`<gate>_gate_sum`), for the benchmark.
#[allow(clippy::cast_precision_loss)]
fn bench_requests(gate: &str, report: &Value) {
    let clusters: Vec<&Value> =
        report["waves"].as_array().unwrap().iter().flat_map(|w| w["results"].as_array().unwrap()).collect();
    let n = clusters.len() as f64;
    for kind in ["reads", "writes", "reviews"] {
        let sum: u64 = clusters.iter().map(|c| c["requests"][kind].as_u64().expect("requests counted")).sum();
        bench("rollout", &format!("{gate}_{kind}"), sum as f64 / n);
    }
    let gate_ms: u64 = clusters.iter().map(|c| c["verify_ms"].as_u64().unwrap_or(0)).sum();
    bench("rollout", &format!("{gate}_gate_sum"), gate_ms as f64 / 1000.0);
    let flux_ms: u64 = clusters.iter().map(|c| c["reconciled_ms"].as_u64().unwrap_or(0)).sum();
    bench("rollout", &format!("{gate}_flux_sum"), flux_ms as f64 / 1000.0);
}

/// A change to every cluster: the runc pool's `poolMax`, a value no other scenario uses.
fn bump_pool(w: &mut FleetWorld, pool_max: i64) {
    let pools = w.base["pools"]["items"].as_array_mut().unwrap();
    let pod = pools.iter_mut().find(|p| p["name"] == "pod").unwrap();
    pod["capacity"]["poolMax"] = json!(pool_max);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_rollout_goes_wave_by_wave() {
    let (_one_at_a_time, mut guard) = world().await;
    let w = guard.as_mut().unwrap();
    // What another scenario may have left set when it failed: lab-b's override, a cordoned node.
    w.overrides[1] = Value::Null;
    w.cordon(0, false).await;
    bump_pool(w, 11);
    let before = w.log().len();
    let started = Instant::now();
    let out = w.rollout(&["-o", "json"]).await;
    let took = started.elapsed();
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(!stdout.contains(KEY) && !stderr.contains(KEY), "the API key was printed");
    let r = report(&out);
    assert_eq!(
        states(&r),
        [("canary".into(), "passed".into()), ("second".into(), "passed".into()), ("rest".into(), "passed".into())]
    );
    // One commit per wave, naming it, in wave order.
    let log = w.log();
    assert_eq!(log.len() - before, 3, "{log:?}");
    assert!(log[2].starts_with("osbx rollout labs: wave canary (lab-a)"), "{log:?}");
    assert!(log[1].starts_with("osbx rollout labs: wave second (lab-b)"), "{log:?}");
    assert!(log[0].starts_with("osbx rollout labs: wave rest (lab-c)"), "{log:?}");
    // Every cluster applied its wave's commit, and every gate ran its checks.
    w.assert_applied_their_waves().await;
    for wave in r["waves"].as_array().unwrap() {
        for c in wave["results"].as_array().unwrap() {
            let ids: Vec<&str> = c["checks"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
            assert_eq!(ids, ["flux.layers", "nodes.ready", "opensandbox.pools"], "{c}");
        }
    }
    // Rollout overhead: osbx's wall time minus Flux's own reconcile time, per cluster.
    let flux_ms: u64 = r["waves"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w["results"].as_array().unwrap().iter().map(|c| c["reconciled_ms"].as_u64().unwrap()))
        .sum();
    let verify_ms: u64 = r["waves"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w["results"].as_array().unwrap().iter().map(|c| c["verify_ms"].as_u64().unwrap()))
        .sum();
    bench("rollout", "three_waves_wall", took.as_secs_f64());
    bench_requests("remote", &r);
    #[allow(clippy::cast_precision_loss)]
    bench("rollout", "verify_sum", verify_ms as f64 / 1000.0);
    #[allow(clippy::cast_precision_loss)]
    bench("rollout", "flux_reconcile_sum", flux_ms as f64 / 1000.0);
    done(&mut guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_gate_stops_the_rollout_and_resume_completes_it_after_the_fix() {
    let (_one_at_a_time, mut guard) = world().await;
    let w = guard.as_mut().unwrap();
    w.overrides[1] = Value::Null;
    w.cordon(0, false).await;
    // lab-c must hold a render for "keeps its files" to say something: when no scenario has
    // reached it yet, this change is rolled out everywhere first, then another one breaks lab-b.
    if !w.files_of("lab-c").keys().any(|p| p.starts_with("clusters/lab-c/apps/")) {
        bump_pool(w, 12);
        let out = w.rollout(&[]).await;
        assert_eq!(out.status.code(), Some(0), "the rollout before the failure: {}", outputs(&out).1);
    }
    bump_pool(w, 14);
    // lab-b's pods can be placed on no node: Flux applies its Pools, they never hold capacity.
    w.overrides[1] = json!({"pools": {"defaults": {"nodeSelector": {"osbx.dev/no-such-node": "true"}}}});
    let lab_c_before = w.files_of("lab-c");
    assert!(
        lab_c_before.keys().any(|p| p.starts_with("clusters/lab-c/apps/"))
            && lab_c_before.keys().any(|p| !p.starts_with("clusters/")),
        "lab-c's files: {:?}",
        lab_c_before.keys()
    );
    let out = w.rollout(&["-o", "json"]).await;
    let r = report_exited(&out, 1);
    assert_eq!(
        states(&r),
        [("canary".into(), "passed".into()), ("second".into(), "failed".into()), ("rest".into(), "pending".into())]
    );
    let failed = &r["waves"][1]["results"][0];
    // Flux itself holds the pools layer on the Pool (its health rule), before verify runs.
    assert_eq!(
        (failed["cluster"].as_str(), failed["failure"]["check"].as_str()),
        (Some("lab-b"), Some("flux.reconcile")),
        "{failed}"
    );
    assert!(failed["failure"].to_string().contains("opensandbox-pools"), "{failed}");
    // The rest is untouched: lab-c did not get this change.
    let head = w.flux.head();
    let lab_c = &w.applied().await[2];
    assert!(lab_c.iter().all(|rev| !rev.ends_with(&head)), "lab-c applied the failed wave's commit: {lab_c:?}");
    // And the repository keeps lab-c's files byte for byte, at HEAD and in the work tree.
    let lab_c_after = w.files_of("lab-c");
    let changed: Vec<&String> =
        lab_c_before.keys().chain(lab_c_after.keys()).filter(|p| lab_c_before.get(*p) != lab_c_after.get(*p)).collect();
    assert!(changed.is_empty(), "the failed rollout changed lab-c's files: {changed:?}");
    let text = serde_json::to_string(&r).unwrap();
    assert!(!text.contains(KEY));
    // Each gate is recorded on the commit it gated, and pushed.
    // The commits the report says each wave was gated at (a wave whose render did not change
    // since an earlier scenario is gated at the commit that holds it, not a new one).
    let commit = |i: usize| r["waves"][i]["gated"].as_str().unwrap_or_else(|| panic!("not gated: {r}")).to_owned();
    let (canary, second) = (commit(0), commit(1));
    let gate = w.gate(&canary, "lab-a");
    assert_eq!((&gate["fleet"], &gate["wave"], &gate["outcome"]), (&json!("labs"), &json!("canary"), &json!("passed")));
    assert_eq!(gate["commit"], json!(canary));
    assert_eq!(gate["checks"], json!({"flux.layers": "PASS", "nodes.ready": "PASS", "opensandbox.pools": "PASS"}));
    let gate = w.gate(&second, "lab-b");
    assert_eq!((&gate["outcome"], &gate["failed"]), (&json!("failed"), &json!("flux.reconcile")), "{gate}");
    w.assert_gates_pushed();

    // The text output names the cluster, the check and the evidence, and says how to go on.
    let out = w.run(&["--dry-run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    assert!(outputs(&out).0.contains("wave rest: lab-c (pending"), "{}", outputs(&out).0);
    // --resume would start at wave second: the canary passed at what it holds.
    let out = w.run(&["--dry-run", "--resume", "--only", GATE, "-o", "json"]).await;
    assert_eq!(
        states(&report(&out)),
        [("canary".into(), "done".into()), ("second".into(), "committed".into()), ("rest".into(), "pending".into())]
    );

    // A run without --resume gates the canary again, and it fails there (its node cordoned):
    // the rollout stops at the canary, and the failure is recorded at the commit gated.
    w.cordon(0, true).await;
    let out = w.rollout(&["-o", "json"]).await;
    w.cordon(0, false).await;
    let r = report_exited(&out, 1);
    assert_eq!(states(&r)[0], ("canary".into(), "failed".into()), "{r}");
    assert_eq!(r["waves"][0]["results"][0]["failure"]["check"], "nodes.ready", "{r}");
    let gate = w.gate(&w.flux.head(), "lab-a");
    assert_eq!((&gate["outcome"], &gate["failed"]), (&json!("failed"), &json!("nodes.ready")), "{gate}");
    assert_eq!(w.gate(&w.flux.head(), "lab-b")["outcome"], "failed", "lab-b's record there is kept");
    w.assert_gates_pushed();
    // Its commit, and the wave committed after it, say nothing any more: --resume starts at
    // the canary.
    let out = w.run(&["--dry-run", "--resume", "--only", GATE, "-o", "json"]).await;
    assert_eq!(
        states(&report(&out)),
        [
            ("canary".into(), "committed".into()),
            ("second".into(), "committed".into()),
            ("rest".into(), "pending".into())
        ]
    );

    // The fix, then --resume: the canary gated again, wave second again (its fix committed),
    // then the rest.
    w.overrides[1] = json!({"pools": {"defaults": {"nodeSelector": {"kubernetes.io/os": "linux"}}}});
    let before = w.log().len();
    let out = w.rollout(&["--resume", "-o", "json"]).await;
    let r = report_exited(&out, 0);
    assert_eq!(
        states(&r),
        [("canary".into(), "passed".into()), ("second".into(), "passed".into()), ("rest".into(), "passed".into())]
    );
    assert_eq!(r["waves"][0]["results"][0]["cluster"], "lab-a", "the canary was not gated again: {}", r["waves"][0]);
    let log = w.log();
    assert_eq!(log.len() - before, 2, "the fix and the rest, nothing for the canary: {log:?}");
    w.assert_gates_pushed();
    done(&mut guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_whose_checks_all_skip_has_no_evidence_unless_the_fleet_accepts_it() {
    let (_one_at_a_time, mut guard) = world().await;
    let w = guard.as_mut().unwrap();
    bump_pool(w, 16);
    w.overrides[1] = Value::Null;
    // The SPIFFE checks skip on every cluster: the profile names no SPIFFE identity.
    let out = w.rollout(&["--only", "spiffe", "-o", "json"]).await;
    let r = report_exited(&out, 1);
    assert_eq!(states(&r)[0], ("canary".into(), "failed".into()), "{r}");
    let c = &r["waves"][0]["results"][0];
    assert_eq!((c["outcome"].as_str(), c["failure"]["check"].as_str()), (Some("no-evidence"), Some("gate.evidence")));
    assert!(c["failure"]["evidence"].as_str().unwrap().starts_with("every check skipped: spiffe.issued ("), "{c}");
    let canary = r["waves"][0]["gated"].as_str().unwrap_or_else(|| panic!("not gated: {r}")).to_owned();
    let gate = w.gate(&canary, "lab-a");
    assert_eq!((&gate["outcome"], &gate["failed"]), (&json!("no-evidence"), &json!("gate.evidence")), "{gate}");

    // The fleet file accepts it: every wave passes, each cluster recorded as no-evidence.
    w.accept_no_evidence = true;
    let out = w.rollout(&["--only", "spiffe", "-o", "json"]).await;
    w.accept_no_evidence = false;
    let r = report_exited(&out, 0);
    for wave in r["waves"].as_array().unwrap() {
        assert_eq!(wave["state"], "passed", "{wave}");
        for c in wave["results"].as_array().unwrap() {
            assert_eq!((c["passed"].as_bool(), c["outcome"].as_str()), (Some(true), Some("no-evidence")), "{c}");
        }
    }
    // The canary, gated again at the same commit, has one record there: the new one.
    assert_eq!(r["waves"][0]["gated"].as_str(), Some(canary.as_str()), "{r}");
    let canary = w.gates(&canary);
    let records: Vec<&Value> = canary.iter().filter(|g| g["cluster"] == "lab-a").collect();
    assert_eq!(records.len(), 1, "{canary:?}");
    assert!(records[0].get("failed").is_none(), "the accepted gate replaced the failed one: {canary:?}");
    // Those gates ran no check of the usual gate: a --resume with it starts at the first wave.
    let out = w.run(&["--dry-run", "--resume", "--only", GATE, "-o", "json"]).await;
    assert_eq!(states(&report(&out))[0], ("canary".into(), "committed".into()));
    done(&mut guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_killed_mid_wave_converges_when_run_again() {
    let (_one_at_a_time, mut guard) = world().await;
    let w = guard.as_mut().unwrap();
    bump_pool(w, 13);
    w.overrides[1] = Value::Null;
    let before = w.log().len();
    // Killed once wave `second` is committed, while it waits for Flux.
    w.grant().await;
    let mut child = w.spawn_rollout();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let log = w.log();
        if log.len() - before >= 2 && log[0].contains("wave second") {
            break;
        }
        assert!(Instant::now() < deadline, "wave second was never committed: {log:?}");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the rollout ended before wave second: {:?}",
            child.wait_with_output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    child.kill().unwrap();
    child.wait().expect("reap the killed osbx");
    // Run again: wave second is verified (not committed again), then the rest.
    let out = w.rollout(&["--resume", "-o", "json"]).await;
    let r = report_exited(&out, 0);
    assert_eq!(
        states(&r),
        [("canary".into(), "done".into()), ("second".into(), "passed".into()), ("rest".into(), "passed".into())]
    );
    assert!(r["waves"][1]["commit"].is_null(), "wave second committed twice: {}", r["waves"][1]);
    let log = w.log();
    let ours: Vec<&String> = log[..log.len() - before].iter().collect();
    assert_eq!(ours.len(), 3, "{ours:?}");
    for wave in ["canary", "second", "rest"] {
        assert_eq!(ours.iter().filter(|s| s.contains(&format!("wave {wave} "))).count(), 1, "{ours:?}");
    }
    w.assert_applied_their_waves().await;
    // A plain rerun after that has nothing to commit and passes again.
    let out = w.rollout(&["-o", "json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    assert_eq!(w.log().len(), log.len(), "nothing to commit");
    done(&mut guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_roles_are_enough_for_a_rollout_and_each_permission_is_needed() {
    let (_one_at_a_time, mut guard) = world().await;
    let w = guard.as_mut().unwrap();
    w.overrides = vec![Value::Null; 3];
    // Every rollout runs with exactly these roles (this one too): they are enough. It also
    // installs the platform on a fresh world, so that its kinds are served and reviewed.
    bump_pool(w, 15);
    let out = w.rollout(&[]).await;
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    // Each permission taken away in turn. The clusters' roles differ only in the cluster's
    // name, so proving them on the canary proves them for every cluster.
    let roles = w.grant().await;
    let shape = |objects: &[Value], name: &str| serde_json::to_string(objects).unwrap().replace(name, "<cluster>");
    for (k, name) in CLUSTERS.iter().enumerate().skip(1) {
        assert_eq!(shape(&roles[k], name), shape(&roles[0], "lab-a"), "{name}'s roles differ from lab-a's");
    }
    let client = cluster::client_for(&w.planes[0].kubeconfig).await;
    let discovery = Discovery::new(client.clone()).run_aggregated().await.unwrap();
    let atoms = atoms(&roles[0]);
    // The gate records are the clone's own notes ref; a run fetches the remote's into
    // refs/notes/remotes/<remote>/ before it plans (a copy of what the remote holds, as `git
    // fetch` updates refs/remotes/), which a refused run may do too.
    let records = || git(&w.flux.dir, &["for-each-ref", "refs/notes/osbx-rollout"]);
    let (head, notes) = (w.flux.head(), records());
    let started = Instant::now();
    for atom in &atoms {
        let role = &roles[0][atom.role];
        apply_object(&client, &without(role, atom)).await;
        settle(&client, USER, role, atom, false).await;
        // Every check (the roles grant them all), so that preflight reviews everything; short
        // limits, should a run get past it.
        let out = w.run(&["--timeout", "10s", "--verify-timeout", "30s"]).await;
        let (stdout, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(2), "{atom:?}: the rollout does not need it: {stdout}{stderr}");
        let expected = denial(role, atom, namespaced(&discovery, atom));
        assert!(names_denial(&stderr, &expected), "{atom:?}: {expected:?} not named:\n{stderr}");
        assert!(stderr.contains("cluster lab-a: "), "{stderr}");
        apply_object(&client, role).await;
        settle(&client, USER, role, atom, true).await;
    }
    let took = started.elapsed().as_secs_f64();
    bench("rollout", "rbac_each_permission", took);
    #[allow(clippy::print_stderr, reason = "the time the per-permission runs take")]
    let () = eprintln!("rollout rbac: {} permissions each proven needed in {took:.1}s", atoms.len());
    assert!(atoms.len() > 30, "{atoms:?}");
    assert_eq!(w.flux.head(), head, "a refused rollout committed");
    assert!(notes.contains("refs/notes/osbx-rollout"), "the healthy rollout recorded its gates: {notes}");
    assert_eq!(records(), notes, "a refused rollout recorded a gate");
    assert_eq!(w.flux.dirty(), "", "a refused rollout wrote");
    done(&mut guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_cluster_gate_reads_each_clusters_own_verdict_and_creates_nothing() {
    let (_one_at_a_time, mut guard) = world().await;
    let w = guard.as_mut().unwrap();
    w.overrides = vec![Value::Null; 3];
    w.cordon(0, false).await;
    // Every cluster checks itself: an acceptance layer after the pools, its Job's pods run by
    // the played kubelet (e2e::acceptance) on each plane.
    w.in_cluster = true;
    let work = tempfile::tempdir().unwrap();
    let mut kubelets = Vec::new();
    for (name, plane) in CLUSTERS.iter().zip(&w.planes) {
        let client = cluster::client_for(&plane.kubeconfig).await;
        let dir = work.path().join(name);
        kubelets.push(super::acceptance::Kubelet::start(client, plane.kubeconfig.clone(), dir));
    }
    bump_pool(w, 16);
    let started = Instant::now();
    let out = w.rollout(&["-o", "json"]).await;
    let took = started.elapsed();
    let r = report_exited(&out, 0);
    assert_eq!(
        states(&r),
        [("canary".into(), "passed".into()), ("second".into(), "passed".into()), ("rest".into(), "passed".into())]
    );
    w.assert_applied_their_waves().await;
    for (k, wave) in r["waves"].as_array().unwrap().iter().enumerate() {
        for c in wave["results"].as_array().unwrap() {
            // The verdict is the cluster's own run, at the revision of this wave's render.
            let runs = kubelets[k].runs();
            let last = runs.last().unwrap_or_else(|| panic!("{c}: no in-cluster run"));
            assert_eq!(last.code, 0, "{}", last.output);
            let ids: Vec<&str> = c["checks"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
            assert_eq!(ids, ["flux.layers", "nodes.ready", "opensandbox.pools"], "{c}");
            // Reads, and the one write that asks Flux to fetch: no probe, no sandbox.
            assert!(c["requests"]["writes"].as_u64().unwrap() <= 1, "the gate wrote: {c}");
        }
    }
    bench("rollout", "in_cluster_three_waves_wall", took.as_secs_f64());
    bench_requests("in_cluster", &r);
    // The canary's own run fails (a second node, cordoned: `nodes.ready`): its Job fails, Flux
    // holds the layer, and the gate names the check from the cluster's report; nothing goes on.
    let client = cluster::client_for(&w.planes[0].kubeconfig).await;
    super::acceptance::cordoned_node(&client).await;
    let canary_runs = kubelets[0].runs().len();
    bump_pool(w, 17);
    // The gate reads the run's failure and answers without waiting for Flux's verdict on the
    // layer (with a limit longer than the layer's `timeout`).
    let started = Instant::now();
    let out = w.rollout(&["-o", "json", "--timeout", "300s"]).await;
    let took = started.elapsed();
    let layer =
        super::flux::get(&client, "kustomize.toolkit.fluxcd.io/v1", "Kustomization", "flux-system", "acceptance")
            .await
            .expect("the acceptance layer");
    let ready = super::flux::condition(&layer, "Ready").expect("its Ready condition");
    // Flux is still checking the layer's health, or has given up early on the failed Job
    // (kustomize-controller fails fast on a stalled resource, about five seconds after the Job
    // fails: on a busy machine that can come before the gate's next read of the report, every
    // three seconds); it never timed out on it.
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        ready["status"] == "Unknown"
            || (ready["status"] == "False"
                && message.contains("failed early due to stalled resources")
                && message.contains("Job/osbx-acceptance/")),
        "the gate waited for Flux to give up on the Job: {ready}"
    );
    let r = report_exited(&out, 1);
    assert_eq!(
        states(&r),
        [("canary".into(), "failed".into()), ("second".into(), "pending".into()), ("rest".into(), "pending".into())]
    );
    let canary = &r["waves"][0]["results"][0];
    // The gate answered on the run's report, published before its process ended: its end next.
    let runs = kubelets[0].runs_at_least(canary_runs + 1).await;
    let seen = format!("{canary}\nruns: {runs:#?}\n{}", super::acceptance::state(&client).await);
    assert_eq!(canary["failure"]["check"], "nodes.ready", "{seen}");
    let why = canary["failure"]["diagnosis"].as_str().unwrap_or_default();
    assert!(why.contains(super::acceptance::CORDONED), "{seen}");
    assert_eq!(runs.len(), canary_runs + 1, "the failed run is never retried: {seen}");
    assert_eq!(runs.last().map(|r| r.code), Some(1), "the canary's own run failed");
    bench("rollout", "in_cluster_failed_canary_wall", took.as_secs_f64());
    trusts_only_this_waves_run(w, &kubelets, &client).await;
    drop(kubelets);
    w.in_cluster = false;
    w.overrides = vec![Value::Null; 3];
    done(&mut guard);
}

/// The ConfigMap of the canary's report holding `key` (`report.json`, the last run's: the
/// report; `job.json`, the last Job run's: the verdicts beside it).
fn map_of(key: &str) -> String {
    let report = format!("{}-report", super::acceptance::NAME);
    if key == "report.json" { report } else { format!("{report}-verdicts") }
}

/// The canary's `key` (see [`map_of`]).
async fn published(client: &Client, key: &str) -> Value {
    let map = Api::<ConfigMap>::namespaced(client.clone(), super::acceptance::NS).get(&map_of(key)).await.unwrap();
    serde_json::from_str(&map.data.unwrap()[key]).unwrap()
}

/// Write `report` as the canary's `key`, as another writer would.
async fn forge(client: &Client, key: &str, report: &Value) {
    let name = map_of(key);
    let patch = json!({"data": {key: report.to_string()}});
    Api::<ConfigMap>::namespaced(client.clone(), super::acceptance::NS)
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// The gate trusts only the report of the run of the Job Flux applied at the wave's commit, for
/// the wave's criteria (issue 54, item 4), after the canary's run failed (`nodes.ready`, a node
/// cordoned):
/// - the fault fixed and only `acceptance.image` changed (the fix of a false FAIL), every Job
///   runs again and the rollout passes on the new runs, not on the canary's earlier FAIL;
/// - only `verify.*` changed, every Job runs again and the gate reads those runs;
/// - a FAIL the serving pod published between rollouts (`report.json`) neither fails nor passes
///   a gate: the Job's own report does;
/// - a report of the wave's revision and criteria whose Job is not the one the cluster holds (an
///   earlier Job's) is not trusted: the gate says what it waited for.
async fn trusts_only_this_waves_run(w: &mut FleetWorld, kubelets: &[super::acceptance::Kubelet], client: &Client) {
    let _ = Api::<Node>::all(client.clone()).delete(super::acceptance::CORDONED, &DeleteParams::default()).await;
    let failed = published(client, "job.json").await;
    assert_eq!(failed["ready"], false, "{failed:#}");
    let runs_before: Vec<usize> = kubelets.iter().map(|k| k.runs().len()).collect();
    w.overrides = vec![json!({"acceptance": {"image": "registry.example.org/osbx:e2e-fixed"}}); 3];
    let out = w.rollout(&["-o", "json"]).await;
    let r = report_exited(&out, 0);
    assert_eq!(states(&r).iter().filter(|(_, s)| s == "passed").count(), 3, "{r:#}");
    let passed = published(client, "job.json").await;
    assert_ne!(passed["revision"], failed["revision"], "the image is of the criteria: a new revision");
    assert_ne!(passed["criteria"], failed["criteria"]);
    let last = kubelets[0].runs().last().cloned().unwrap();
    assert_eq!(
        (passed["writer"]["uid"].as_str(), passed["ready"].as_bool()),
        (Some(last.job_uid.as_str()), Some(true))
    );
    for (k, before) in kubelets.iter().zip(&runs_before) {
        assert_eq!(k.runs().len(), before + 1, "each cluster's Job ran once more");
    }

    // verify.* alone: every Job runs again, its report of the new criteria.
    let runs_before: Vec<usize> = kubelets.iter().map(|k| k.runs().len()).collect();
    for o in &mut w.overrides {
        o["verify"] = json!({"probeDeadlineSeconds": 61});
    }
    let out = w.rollout(&["-o", "json"]).await;
    let r = report_exited(&out, 0);
    assert_eq!(states(&r).iter().filter(|(_, s)| s == "passed").count(), 3, "{r:#}");
    for (k, before) in kubelets.iter().zip(&runs_before) {
        assert_eq!(k.runs().len(), before + 1, "a verify-only change ran each cluster's Job again");
    }
    let now = published(client, "job.json").await;
    assert_ne!(now["criteria"], passed["criteria"], "{now:#}");
    assert_eq!(now["run"].as_str().map(|r| kubelets[0].runs().last().unwrap().output.contains(r)), Some(true));

    // The serving pod's FAIL between rollouts: the gate (run again at the same commit) passes
    // on the Job's report of the wave.
    let mut by_pod = now.clone();
    by_pod["writer"] = json!({"kind": "Pod", "name": "acc-5d9c7b-x2x7q"});
    by_pod["ready"] = json!(false);
    by_pod["summary"] = json!("Not ready: 1 failed, 0 errors, 2 passed");
    for c in by_pod["checks"].as_array_mut().unwrap().iter_mut().filter(|c| c["id"] == "nodes.ready") {
        c["outcome"] = json!("FAIL");
    }
    forge(client, "report.json", &by_pod).await;
    let out = w.rollout(&["-o", "json"]).await;
    let r = report_exited(&out, 0);
    assert_eq!(r["waves"][0]["results"][0]["passed"], true, "{r:#}");

    // An earlier Job's report at the wave's revision and criteria: not this wave's run.
    let mut earlier = now.clone();
    earlier["writer"]["uid"] = json!(runs_before_uid(kubelets));
    forge(client, "job.json", &earlier).await;
    // It waits out its limit for the report it trusts.
    let out = w.rollout(&["-o", "json", "--timeout", "60s"]).await;
    let r = report_exited(&out, 1);
    let canary = &r["waves"][0]["results"][0];
    assert_eq!(canary["failure"]["check"], "acceptance.report", "{canary:#}");
    let evidence = canary["failure"]["evidence"].as_str().unwrap();
    let current = now["writer"]["uid"].as_str().unwrap();
    assert!(evidence.contains("waited for the report of the Job") && evidence.contains(current), "{evidence}");
    assert!(evidence.contains(earlier["writer"]["uid"].as_str().unwrap()), "{evidence}");
    // The Job's own report back: the next scenario starts from a cluster that passed.
    forge(client, "job.json", &now).await;
}

/// The uid of the first Job the canary's played kubelet ran (a Job long gone).
fn runs_before_uid(kubelets: &[super::acceptance::Kubelet]) -> String {
    kubelets[0].runs().first().map(|r| r.job_uid.clone()).unwrap()
}
