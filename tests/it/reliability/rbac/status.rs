//! `osbx rbac --for status` is enough for `osbx status` and `status --watch`, and holds nothing
//! they do not use: as a user holding only those roles (not even the default discovery
//! bindings), status reads the platform (exit 0 or 1, never a refused read); without any one
//! permission it stops with exit 2, saying what was forbidden, or (a `watch`, which only
//! `--watch` uses) `--watch` says the watch was forbidden and tries it again after a bounded
//! delay, not at once. As that user, `--watch` shows a Pool change within a second of it,
//! through a watch (the health tick, the only poll, is seconds away), picks up the Pool kind
//! installed after it started, and outlives the API server's restart.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;

use super::*;

const USER: &str = "st-ci";

/// A plane of its own with the Flux CRDs (and the OpenSandbox ones when `pools_kind`), the
/// status user bound to exactly the printed roles and nothing else.
struct Setup {
    plane: OwnPlane,
    client: kube::Client,
    dir: tempfile::TempDir,
    profile: PathBuf,
    user: PathBuf,
    objects: Vec<Value>,
}

/// The status tests' profile: a runc and a Kata pool.
fn st_profile() -> TestProfile {
    TestProfile::new("st").pool("pod", "runc", [1, 2, 1, 4]).pool("vm", "kata", [1, 1, 0, 2])
}

impl Setup {
    async fn start(pools_kind: bool) -> Self {
        Self::start_with(pools_kind, st_profile()).await
    }

    async fn start_with(pools_kind: bool, profile: TestProfile) -> Self {
        let plane = tokio::task::spawn_blocking(OwnPlane::start).await.unwrap();
        let client = cluster::client_for(&plane.kubeconfig).await;
        cluster::install_crds(&client, "flux").await;
        if pools_kind {
            cluster::install_crds(&client, "opensandbox").await;
        }
        let dir = tempfile::tempdir().unwrap();
        profile.write_to(dir.path());
        let profile = dir.path().join("profile.yaml");
        let out = osbx().args(["rbac", "--for", "status", "--user", USER, "--profile"]).arg(&profile).output().unwrap();
        let (stdout, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let objects: Vec<Value> = stdout.split("\n---\n").skip(1).map(|d| serde_saphyr::from_str(d).unwrap()).collect();
        let mut namespaces: Vec<&str> = vec!["st-flux", "st-system", "st-sbx"];
        namespaces.extend(objects.iter().filter_map(|o| o["metadata"]["namespace"].as_str()));
        namespaces.sort_unstable();
        namespaces.dedup();
        for ns in namespaces {
            apply(&client, &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await;
        }
        for obj in &objects {
            apply(&client, obj).await;
        }
        for name in DEFAULT_BINDINGS {
            Api::<ClusterRoleBinding>::all(client.clone()).delete(name, &DeleteParams::default()).await.unwrap();
        }
        for atom in &atoms(&objects) {
            settle(&client, USER, &objects[atom.role], atom, true).await;
        }
        let user = cluster::user_kubeconfig(&plane.kubeconfig, USER, dir.path());
        Self { plane, client, dir, profile, user, objects }
    }

    async fn status(&self) -> Output {
        let mut cmd = osbx();
        cmd.args(["status", "-o", "json", "--profile"]).arg(&self.profile).arg("--kubeconfig").arg(&self.user);
        output_off_runtime(cmd).await
    }

    /// `osbx status --watch` as the user, its output lines on channels.
    fn watch(&self, extra: &[&str]) -> Watching {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_osbx"))
            .env("OSBX_COLOR", "never")
            .args(["status", "--watch"])
            .args(extra)
            .arg("--profile")
            .arg(&self.profile)
            .arg("--kubeconfig")
            .arg(&self.user)
            .current_dir(self.dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = |stream: Box<dyn std::io::Read + Send>| {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if tx.send((Instant::now(), line)).is_err() {
                        return;
                    }
                }
            });
            rx
        };
        let stdout = lines(Box::new(child.stdout.take().unwrap()));
        let stderr = lines(Box::new(child.stderr.take().unwrap()));
        Watching { child, stdout, stderr }
    }

    /// How many requests of `verb` (`LIST`, `GET`, `WATCH`) on `resource` the API server has
    /// answered, by its own metrics.
    async fn requests(&self, verb: &str, resource: &str) -> u64 {
        self.metric("apiserver_request_total", verb, resource).await
    }

    /// The sum of the API server's metric `name` over its series of `verb` on `resource`.
    async fn metric(&self, name: &str, verb: &str, resource: &str) -> u64 {
        let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
        let text = self.client.request_text(req).await.unwrap();
        let (series, verb, resource) =
            (format!("{name}{{"), format!("verb=\"{verb}\""), format!("resource=\"{resource}\""));
        text.lines()
            .filter(|l| l.starts_with(&series) && l.contains(&verb) && l.contains(&resource))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }
}

/// `osbx status --watch` running; killed when dropped.
struct Watching {
    child: Child,
    stdout: mpsc::Receiver<(Instant, String)>,
    stderr: mpsc::Receiver<(Instant, String)>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first line of `lines` containing every one of `what` within `timeout`, and when it came.
fn line_with(lines: &mpsc::Receiver<(Instant, String)>, what: &[&str], timeout: Duration) -> Option<(Instant, String)> {
    let until = Instant::now() + timeout;
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok((at, l)) if what.iter().all(|w| l.contains(w)) => return Some((at, l)),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_status_role_is_enough_and_each_permission_is_needed() {
    let setup = Setup::start(true).await;
    let (client, objects) = (&setup.client, &setup.objects);
    // Nothing is deployed: not Ready, but every read allowed.
    let out = setup.status().await;
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["layers"][0]["message"], "no such Kustomization", "{doc:#}");
    let atoms = atoms(objects);
    assert!(atoms.len() >= 8, "{atoms:?}");
    let watches = atoms.iter().filter(|a| a.verb == "watch").count();
    // Kustomizations, Pools, Nodes; the HelmRelease and the RuntimeClass by name.
    assert_eq!(watches, 5, "{atoms:?}");
    for atom in &atoms {
        let role = &objects[atom.role];
        apply(client, &without(role, atom)).await;
        settle(client, USER, role, atom, false).await;
        if atom.verb == "watch" {
            let Target::Resource { resource, .. } = &atom.target else { panic!("{atom:?}") };
            let reads = || async { setup.requests("LIST", resource).await + setup.requests("GET", resource).await };
            let (before, since) = (reads().await, Instant::now());
            let watching = tokio::task::block_in_place(|| setup.watch(&[]));
            let refused = tokio::task::block_in_place(|| {
                line_with(&watching.stderr, &["watching", "forbidden"], Duration::from_secs(60))
            });
            assert!(refused.is_some(), "without {atom:?}, --watch did not say in 60 s that its watch was forbidden");
            tokio::time::sleep(Duration::from_secs(3)).await;
            let (read, window) = (reads().await - before, since.elapsed());
            drop(watching);
            // The overview's read and the watch's first, then one after each refusal, waited at
            // least 125 ms, 250 ms, 500 ms, … (half of each doubling delay): n retries take at
            // least 125 ms × (2^n − 1). A watch tried again at once reads hundreds of times.
            let retries = (window.as_secs_f64() / 0.125 + 1.0).log2().floor();
            let most = 2.0 + retries;
            assert!(
                f64::from(u32::try_from(read).unwrap()) <= most,
                "without {atom:?}, --watch read {resource} {read} times in {window:?} (at most {most} with the backoff)"
            );
        } else {
            let out = setup.status().await;
            let (stdout, stderr) = outputs(&out);
            assert_eq!(out.status.code(), Some(2), "without {atom:?} status still ran: {stdout}{stderr}");
            // A refused read says so; a refused discovery is explained by connecting's own
            // review (which names what it could check).
            assert!(stderr.contains("forbidden") || stderr.contains("may not"), "without {atom:?}: {stderr}");
        }
        apply(client, role).await;
        settle(client, USER, role, atom, true).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_as_the_printed_user_shows_a_pool_change_through_a_watch_within_a_second_of_it() {
    // The Pool kind is not served when --watch starts.
    let setup = Setup::start(false).await;
    let client = &setup.client;
    // A HelmRelease there before the start: watched by name, from then on.
    let release = json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": {"name": "opensandbox", "namespace": "st-system"},
        "spec": {"interval": "10m", "chart": {"spec": {"chart": "opensandbox",
                 "sourceRef": {"kind": "GitRepository", "name": "opensandbox"}}}}});
    apply(client, &release).await;
    let watching = tokio::task::block_in_place(|| setup.watch(&[]));
    let json = tokio::task::block_in_place(|| setup.watch(&["-o", "json"]));
    let first =
        tokio::task::block_in_place(|| line_with(&watching.stdout, &["pod", "no such Pool"], Duration::from_secs(20)));
    assert!(first.is_some(), "the first draw");

    // The kind installed after the start, then a Pool: shown.
    cluster::install_crds(client, "opensandbox").await;
    let pools = cluster::pool_api_in(client, "st-sbx").await;
    let pool = json!({"apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": "Pool",
        "metadata": {"name": "pod", "namespace": "st-sbx"},
        "spec": {"capacitySpec": {"bufferMin": 1, "bufferMax": 2, "poolMin": 1, "poolMax": 4},
                 "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}});
    pools.patch("pod", &PatchParams::apply("test").force(), &Patch::Apply(&pool)).await.unwrap();
    let status = |total: i64| json!({"status": {"total": total, "allocated": 0, "available": total, "revision": "r"}});
    pools.patch_status("pod", &PatchParams::default(), &Patch::Merge(&status(2))).await.unwrap();
    let seen = tokio::task::block_in_place(|| {
        line_with(&watching.stdout, &["pod", "total 2/4", "available 2"], Duration::from_secs(15))
    });
    assert!(seen.is_some(), "--watch did not pick up the Pool kind installed after it started");

    // Just after a read that nothing changed caused (the health tick, every 10 s: the only
    // poll), a change: a poll would show it 10 s later; the watch within a second.
    just_after_a_tick(&setup).await;
    // Followed by a watch: one is open on Pools.
    assert!(setup.metric("apiserver_longrunning_requests", "WATCH", "pools").await >= 1, "no watch of Pools is open");
    pools.patch_status("pod", &PatchParams::default(), &Patch::Merge(&status(3))).await.unwrap();
    let changed = Instant::now();
    let shown = tokio::task::block_in_place(|| {
        line_with(&watching.stdout, &["pod", "total 3/4", "available 3"], Duration::from_secs(5))
    });
    let (at, line) = shown.expect("--watch did not show the change");
    let latency = at.duration_since(changed);
    assert!(latency < Duration::from_secs(1), "--watch showed the change {latency:?} after it: {line}");
    // `-o json`: each document whole, one a line.
    let (_, doc) = tokio::task::block_in_place(|| line_with(&json.stdout, &["\"total\":3"], Duration::from_secs(5)))
        .expect("--watch -o json did not show the change");
    let doc: Value = serde_json::from_str(&doc).unwrap_or_else(|e| panic!("{e}: {doc}"));
    assert_eq!(doc["pools"].as_array().unwrap().iter().find(|p| p["name"] == "pod").unwrap()["total"], 3, "{doc}");

    // The HelmRelease, watched by name (the role grants its watch by resourceNames), Ready.
    just_after_a_tick(&setup).await;
    let (releases, _) = cluster::api_for(client, &release).await;
    let ready = json!({"status": {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True",
        "reason": "InstallSucceeded", "message": "installed", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    releases.patch_status("opensandbox", &PatchParams::default(), &Patch::Merge(&ready)).await.unwrap();
    let changed = Instant::now();
    let shown = tokio::task::block_in_place(|| {
        line_with(&watching.stdout, &["✔ st-system/opensandbox"], Duration::from_secs(5))
    });
    let (at, line) = shown.expect("--watch did not show the HelmRelease Ready");
    let latency = at.duration_since(changed);
    assert!(latency < Duration::from_secs(1), "--watch showed the HelmRelease {latency:?} after it: {line}");

    // The API server restarts: --watch says the reads failed, goes on, and shows the next change.
    let argv = setup.plane.kill_apiserver();
    // (The server stays down until it is said: on a loaded machine the watches' reconnects and
    // the health tick that report it can take longer than 15 s; CI saw that once.)
    let said = tokio::task::block_in_place(|| line_with(&watching.stderr, &["watching"], Duration::from_secs(30)));
    assert!(said.is_some(), "--watch did not say its watches broke");
    let (dir, kc) = (setup.plane.dir().to_path_buf(), setup.plane.kubeconfig.clone());
    tokio::task::spawn_blocking(move || cluster::restart_apiserver_in(&dir, &kc, &argv)).await.unwrap();
    let client = cluster::client_for(&setup.plane.kubeconfig).await;
    let pools = cluster::pool_api_in(&client, "st-sbx").await;
    pools.patch_status("pod", &PatchParams::default(), &Patch::Merge(&status(4))).await.unwrap();
    let after = tokio::task::block_in_place(|| {
        line_with(&watching.stdout, &["pod", "total 4/4", "available 4"], Duration::from_secs(40))
    });
    let mut watching = watching;
    assert!(watching.child.try_wait().unwrap().is_none(), "--watch ended with the API server's restart");
    assert!(after.is_some(), "--watch did not show a change after the API server came back");
}

/// Wait for the health tick's read (a LIST of Pools that no change caused), so that the next
/// tick is 10 s away.
async fn just_after_a_tick(setup: &Setup) {
    let lists = setup.requests("LIST", "pools").await;
    cluster::wait_for("the health tick's read", Duration::from_secs(15), || async {
        (setup.requests("LIST", "pools").await > lists).then_some(())
    })
    .await;
}

/// `osbx status` reads the acceptance layer's report from the real API server, as the printed
/// status user, and says what it is: the verdict of the revision rendered now and fresh (Ready),
/// older than three of the layer's intervals (stale: not Ready, with its age and the bound), or
/// of another revision (not current) (issue 54, item 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reads_a_real_report_current_stale_or_of_another_revision() {
    let profile = st_profile().acceptance(json!({"image": "registry.example.org/osbx:test", "namespace": "st-acc",
                                                 "name": "acc", "interval": "10m"}));
    let loaded = osbx::profile::from_value("st", &serde_saphyr::from_str(&profile.yaml()).unwrap()).unwrap();
    let rendered = osbx::commands::renderer(None).unwrap().render(&loaded).unwrap();
    let objects: Vec<_> =
        rendered.objects().into_iter().filter(|o| o.layer == "acceptance").map(|o| o.object).collect();
    let revision = loaded.profile.sections.acceptance.as_ref().unwrap().revision_in(objects.iter()).unwrap();
    let setup = Setup::start_with(false, profile).await;
    let publish = |revision: String, age: i64| {
        let client = setup.client.clone();
        async move {
            let time = k8s_openapi::jiff::Timestamp::from_second(k8s_openapi::jiff::Timestamp::now().as_second() - age)
                .unwrap()
                .to_string();
            let report = json!({"run": "r-1", "writer": {"kind": "Job", "name": "acc", "uid": "u-1", "pod": "acc-x"},
                                "revision": revision, "criteria": "c", "started": time, "time": time, "ready": true,
                                // Whoever may write the ConfigMap may write anything: a terminal's
                                // escape sequence (setting its title) is shown, never run.
                                "summary": "Ready\u{1b}]0;owned\u{7}", "checks": []});
            apply(
                &client,
                &json!({"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": "acc-report", "namespace": "st-acc"},
                                   "data": {"report.json": report.to_string()}}),
            )
            .await;
        }
    };
    let acceptance = |out: &Output| -> Value {
        let (stdout, stderr) = outputs(out);
        assert_ne!(out.status.code(), Some(2), "{stderr}");
        let doc: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
        doc["acceptance"].clone()
    };
    // Fresh, of this revision: Ready.
    publish(revision.clone(), 60).await;
    let a = acceptance(&setup.status().await);
    assert_eq!(
        (a["ready"].as_bool(), a["current"].as_bool(), a["stale"].as_bool()),
        (Some(true), Some(true), Some(false)),
        "{a:#}"
    );
    assert_eq!(a["staleAfterSeconds"], 1800, "three intervals of 10m: {a:#}");
    // Older than three intervals: stale, not Ready, in text too.
    publish(revision.clone(), 2 * 3600).await;
    let a = acceptance(&setup.status().await);
    assert_eq!((a["current"].as_bool(), a["stale"].as_bool()), (Some(true), Some(true)), "{a:#}");
    let mut text = osbx();
    text.args(["status", "--profile"]).arg(&setup.profile).arg("--kubeconfig").arg(&setup.user);
    let out = output_off_runtime(text).await;
    assert_eq!(out.status.code(), Some(1), "a stale verdict is not Ready");
    let line = outputs(&out).0.lines().find(|l| l.starts_with("acceptance:")).map(str::to_owned).unwrap_or_default();
    assert!(line.contains("stale: 2h ago, older than 30m"), "{line}");
    assert!(line.contains(r"Ready\u{1b}]0;owned\u{7}, revision"), "{line}");
    assert!(!out.stdout.contains(&0x1b) && !out.stdout.contains(&0x07), "{line}");
    // Of another revision: not current.
    publish("0123456789abcdef".to_owned(), 60).await;
    let a = acceptance(&setup.status().await);
    assert_eq!((a["current"].as_bool(), a["revision"].as_str()), (Some(false), Some("0123456789abcdef")), "{a:#}");
}
