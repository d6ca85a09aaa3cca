//! One scenario's world: a plane with the real controllers, a kwok Node, the Kata RuntimeClass,
//! the OpenSandbox chart repository, the Flux repository with the render pushed, and the Flux
//! bootstrap objects, built by [`World::scenario`]; `apply` runs the first `osbx apply`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant, SystemTime};

use kube::Client;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::git::{self, FluxRepo};
use super::{KEY, assert_outcome, bench, checks, secs_since_epoch};
use crate::cluster::{self, RealServer, api_for, wait_for};
use crate::support::{osbx, outputs, root};
use crate::turns::{self, Need, Turn};

/// A plane started with `tests/cluster/up --with-controllers --watch-pid <this process>`:
/// kube-apiserver + etcd, kube-controller-manager, kube-scheduler, kwok, the Flux source,
/// kustomize and helm controllers, the played OpenSandbox controller and the git/static server.
/// `tests/cluster/down` stops all of it when dropped (and the watchdog if the test binary dies).
pub struct ControllerPlane {
    dir: tempfile::TempDir,
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// `GIT_HTTP_URL` of `controllers.env`.
    pub git_http_url: String,
    /// `GIT_ROOT` of `controllers.env`.
    pub git_root: PathBuf,
    /// How long `up --with-controllers` took.
    pub up_time: Duration,
}

impl ControllerPlane {
    /// Start one (blocking; about 8 s warm).
    pub fn start() -> Self {
        let started = Instant::now();
        let dir = cluster::up_in_new_dir("osbx-e2e-plane-", &["--with-controllers"]);
        let up_time = started.elapsed();
        let text = std::fs::read_to_string(dir.path().join("controllers.env")).expect("controllers.env");
        let env: BTreeMap<String, String> = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.trim_matches('\'').to_owned()))
            .collect();
        let get = |k: &str| env.get(k).cloned().unwrap_or_else(|| panic!("{k} missing from controllers.env:\n{text}"));
        Self {
            kubeconfig: PathBuf::from(get("KUBECONFIG")),
            git_http_url: get("GIT_HTTP_URL"),
            git_root: PathBuf::from(get("GIT_ROOT")),
            up_time,
            dir,
        }
    }

    /// The plane's directory (every controller's log is `<dir>/<name>.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for ControllerPlane {
    fn drop(&mut self) {
        crate::support::stop_in_drop(
            std::process::Command::new(root().join("tests/cluster/down")).arg(self.dir.path()),
        );
    }
}

/// The checks that can pass on this plane; the others need what kwok cannot give (see
/// `full_loop`).
const PASSING: &str = "flux.layers,nodes.ready,opensandbox.server,opensandbox.pools,opensandbox.lifecycle";

/// The flux-system sync objects of the cluster at `clusters/<name>/` as `flux bootstrap` commits
/// and applies them (the Flux components themselves run out of cluster): the repository, and the
/// root Kustomization at `./clusters/<name>`. The source interval is long on purpose: nothing
/// reaches a cluster until a test asks Flux, as `flux reconcile source git flux-system` (or `osbx
/// rollout`) does, so "osbx diff before Flux applies" is deterministic.
fn gotk_sync(flux_url: &str, name: &str) -> String {
    format!(
        "apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata:\n  name: flux-system\n  namespace: flux-system\n\
         spec:\n  interval: 1h\n  ref:\n    branch: main\n  url: {flux_url}\n---\n\
         apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: flux-system\n  namespace: flux-system\n\
         spec:\n  interval: 10m\n  path: ./clusters/{name}\n  prune: true\n  sourceRef:\n    kind: GitRepository\n    name: flux-system\n"
    )
}

/// `flux bootstrap`'s files for the cluster at `clusters/<name>/`, written into the Flux
/// repository's work tree (the caller commits them); returns the sync objects, for
/// [`apply_sync`].
pub(super) fn write_bootstrap(flux: &FluxRepo, name: &str) -> String {
    let sync = gotk_sync(&flux.url, name);
    crate::support::write(&flux.dir, &format!("clusters/{name}/flux-system/gotk-sync.yaml"), &sync);
    crate::support::write(
        &flux.dir,
        &format!("clusters/{name}/flux-system/kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - gotk-sync.yaml\n",
    );
    sync
}

/// `flux bootstrap` applying the sync objects it committed (`sync`, from [`write_bootstrap`]).
pub(super) async fn apply_sync(client: &Client, sync: &str) {
    for doc in sync.split("\n---\n") {
        apply_object(client, &serde_saphyr::from_str::<Value>(doc).unwrap()).await;
    }
}

/// The embedded `default` profile as every scenario starts from it: only the chart source
/// (`chart_url`, on loopback) and the probe deadline (see `full_loop`) changed.
pub(super) fn default_profile(chart_url: &str) -> Value {
    let (_, text) = osbx::profile::embedded_text("default").unwrap();
    let mut profile: Value = serde_saphyr::from_str(&text).unwrap();
    profile["opensandbox"]["source"]["url"] = json!(chart_url);
    profile["verify"] = json!({"probeDeadlineSeconds": 10});
    profile
}

/// A scenario to start, built from [`World::scenario`]: the default profile, edited with
/// [`Scenario::profile`]; with [`Scenario::applied`], the first `osbx apply` too.
pub struct Scenario<F> {
    name: &'static str,
    edit: F,
    applied: bool,
}

impl<F: FnOnce(&mut Value)> Scenario<F> {
    /// `edit` applied to the profile before it is rendered.
    pub fn profile<G: FnOnce(&mut Value)>(self, edit: G) -> Scenario<G> {
        Scenario { name: self.name, edit, applied: self.applied }
    }

    /// The first `osbx apply` as well, which must succeed with every layer Ready at its
    /// generation.
    pub fn applied(self) -> Self {
        Self { applied: true, ..self }
    }

    /// Wait for the scenario's turn ([`Need::Plane`]: the world holds it until it is dropped),
    /// then build its world: a plane, a Node, the RuntimeClass, the chart repository,
    /// the profile rendered, committed and pushed, and the Flux bootstrap objects; then the first
    /// apply, if asked for.
    pub async fn start(self) -> World {
        let turn = turns::take(Need::Plane).await;
        let started = Instant::now();
        let world = World::start(self.name, self.edit, started, turn).await;
        if self.applied {
            world.first_apply().await;
        }
        world
    }
}

/// Everything a scenario needs; dropped in field order (server, then plane, then files, then
/// the scenario's turn).
pub struct World {
    /// The real OpenSandbox server, once started.
    pub server: Option<RealServer>,
    /// The plane.
    pub plane: ControllerPlane,
    /// An admin client.
    pub client: Client,
    /// The profile document (the embedded `default`, edited).
    pub profile: Value,
    /// The Flux repository.
    pub flux: FluxRepo,
    scenario: String,
    started: Instant,
    work: tempfile::TempDir,
    _turn: Turn,
}

impl World {
    /// The scenario `name` (the first word of its `e2e-bench` lines) on the default profile as it
    /// is, to edit and start.
    pub fn scenario(name: &'static str) -> Scenario<fn(&mut Value)> {
        Scenario { name, edit: |_| {}, applied: false }
    }

    /// See [`Scenario::start`]; `started` is when the turn came.
    async fn start(scenario: &str, edit: impl FnOnce(&mut Value), started: Instant, turn: Turn) -> Self {
        let plane = tokio::task::spawn_blocking(ControllerPlane::start).await.unwrap();
        bench(scenario, "up_with_controllers", plane.up_time.as_secs_f64());
        let client = cluster::client_for(&plane.kubeconfig).await;
        node_and_runtime_class(&client).await;
        let work = tempfile::Builder::new().prefix("osbx-e2e-work-").tempdir().unwrap();
        let chart_url = git::publish_chart(&plane, work.path());

        // The default profile, then what the scenario asks for.
        let mut profile = default_profile(&chart_url);
        edit(&mut profile);

        let flux = FluxRepo::init(&plane, work.path());
        let sync = write_bootstrap(&flux, "sandbox");
        flux.commit_all("flux bootstrap");
        let world = Self {
            server: None,
            plane,
            client,
            profile,
            flux,
            scenario: scenario.to_owned(),
            started,
            work,
            _turn: turn,
        };
        world.render_commit_push().await;

        // `flux bootstrap` applies the sync objects it committed.
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "flux-system"}});
        apply_object(&world.client, &ns).await;
        apply_sync(&world.client, &sync).await;
        bench(scenario, "world_ready", started.elapsed().as_secs_f64());
        world
    }

    /// The first `osbx apply`, which must succeed with every layer Ready at its generation.
    async fn first_apply(&self) {
        let (out, took, _) = self.apply("5m").await;
        let (stdout, stderr) = outputs(&out);
        let helm_log = self.log_tail("helm-controller", 30);
        assert_eq!(out.status.code(), Some(0), "first apply:\n{stdout}{stderr}\nhelm-controller:\n{helm_log}");
        super::flux::assert_layers_ready(&self.client, &self.layout(), "after the first apply").await;
        bench(&self.scenario, "apply_wall", took.as_secs_f64());
    }

    /// Seconds since the scenario's turn came (its start).
    pub fn seconds(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Where the profile puts things.
    pub fn layout(&self) -> super::flux::Layout {
        super::flux::Layout::of(&self.profile)
    }

    /// The profile file (outside the Flux work tree, which must stay clean).
    pub fn profile_path(&self) -> PathBuf {
        self.work.path().join("profile.yaml")
    }

    /// Write [`World::profile`] to [`World::profile_path`].
    pub fn write_profile(&self) {
        std::fs::write(self.profile_path(), serde_saphyr::to_string(&self.profile).unwrap()).unwrap();
    }

    /// `osbx <args> --profile <profile> [--kubeconfig <plane>]` off the runtime, with
    /// `OSBX_API_KEY` set; returns its output and wall time. The key is never printed.
    pub async fn osbx(&self, args: &[&str]) -> (Output, Duration) {
        let (out, took) = self.osbx_with(args, &[("OSBX_API_KEY", KEY)], None).await;
        let (stdout, stderr) = outputs(&out);
        assert!(!stdout.contains(KEY) && !stderr.contains(KEY), "osbx {args:?} printed the API key");
        (out, took)
    }

    /// `osbx <args> --profile <profile> [--kubeconfig <plane>]` off the runtime with exactly
    /// the environment `env` adds (no API key unless given) and `stdin` piped in.
    pub async fn osbx_with(&self, args: &[&str], env: &[(&str, &str)], stdin: Option<&[u8]>) -> (Output, Duration) {
        let mut full: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        full.extend(["--profile".into(), self.profile_path().display().to_string()]);
        if !matches!(args[0], "render" | "secret") {
            full.extend(["--kubeconfig".into(), self.plane.kubeconfig.display().to_string()]);
        }
        let cwd = self.work.path().to_path_buf();
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let stdin = stdin.map(<[u8]>::to_vec);
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let mut cmd = osbx();
            cmd.current_dir(cwd).env_remove("OSBX_API_KEY").env_remove("SOPS_AGE_KEY_FILE").env_remove("SOPS_AGE_KEY");
            cmd.envs(env).args(full);
            if let Some(input) = stdin {
                cmd.write_stdin(input);
            }
            let out = cmd.output().unwrap();
            (out, started.elapsed())
        })
        .await
        .unwrap()
    }

    /// Write the profile, `osbx render --commit` into the Flux work tree and push; returns the
    /// pushed commit.
    pub async fn render_commit_push(&self) -> String {
        self.write_profile();
        let out_dir = self.flux.dir.display().to_string();
        let (out, _) = self.osbx(&["render", "--out", &out_dir, "--commit", "-m", "osbx: render"]).await;
        let (stdout, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(0), "osbx render --commit: {stdout}{stderr}");
        assert_eq!(self.flux.dirty(), "", "render --commit left changes behind");
        self.flux.push()
    }

    /// `osbx apply` with a wall-clock start (for comparing with the objects' timestamps).
    pub async fn apply(&self, timeout: &str) -> (Output, Duration, f64) {
        let repo = self.flux.dir.display().to_string();
        let start = secs_since_epoch(SystemTime::now());
        let (out, took) = self.osbx(&["apply", "--repo", &repo, "--timeout", timeout]).await;
        (out, took, start)
    }

    /// Ask Flux to fetch the Flux repository now, as `flux reconcile source git flux-system`
    /// does; the Kustomizations on that source follow its new artifact.
    pub async fn request_reconcile(&self) {
        let now = format!("{:?}", SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos());
        let patch = json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": now}}});
        let obj = json!({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
                         "metadata": {"name": "flux-system", "namespace": "flux-system"}});
        let (api, name) = api_for(&self.client, &obj).await;
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("annotate flux-system");
    }

    /// Start the real OpenSandbox server for the sandbox namespace, with the same API key: the
    /// version the pinned chart deploys (`opensandbox-server` 0.2.2).
    pub async fn start_server(&mut self) -> String {
        self.start_server_with_key(KEY).await
    }

    /// [`World::start_server`] with the API key `key` (what the chart's pod would read from the
    /// Secret).
    pub async fn start_server_with_key(&mut self, key: &str) -> String {
        let key = key.to_owned();
        let dir = self.work.path().join("server");
        let kubeconfig = self.plane.kubeconfig.clone();
        let namespace = self.layout().sandbox;
        let started = Instant::now();
        let server = tokio::task::spawn_blocking(move || RealServer::start(&dir, &kubeconfig, &namespace, &key, &[]))
            .await
            .unwrap();
        bench(&self.scenario, "server_start", started.elapsed().as_secs_f64());
        let url = server.url.clone();
        self.server = Some(server);
        url
    }

    /// `osbx verify` of the checks this plane can pass ([`PASSING`]) through the real server at
    /// `url`: each passes (the Lifecycle check of both pools, `pod` and `vm`) and verify exits 0;
    /// its wall time is benched as `verify_passing_wall`. Returns the checks.
    pub async fn verify_passing(&self, url: &str) -> Vec<Value> {
        let (out, took) = self.osbx(&["verify", "--only", PASSING, "--server-url", url, "-o", "json"]).await;
        let (stdout, stderr) = outputs(&out);
        let got = checks(&stdout, &stderr);
        for id in ["flux.layers", "nodes.ready", "opensandbox.server", "opensandbox.pools"] {
            assert_outcome(&got, id, "PASS");
        }
        for pool in ["pod", "vm"] {
            assert_outcome(&got, &format!("opensandbox.lifecycle.{pool}"), "PASS");
        }
        assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
        bench(&self.scenario, "verify_passing_wall", took.as_secs_f64());
        got
    }

    /// The tail of a controller's log (for failure messages).
    pub fn log_tail(&self, controller: &str, lines: usize) -> String {
        let text = std::fs::read_to_string(self.plane.dir().join(format!("{controller}.log"))).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// Server-side apply one object as the test.
pub async fn apply_object(client: &Client, obj: &Value) {
    let (api, name) = api_for(client, obj).await;
    api.patch(&name, &PatchParams::apply("osbx-e2e").force(), &Patch::Apply(obj))
        .await
        .unwrap_or_else(|e| panic!("apply {}/{name}: {e}", obj["kind"]));
}

/// A kwok Node for the Kata pool and the chart's Deployments, and the Kata RuntimeClass.
pub(super) async fn node_and_runtime_class(client: &Client) {
    let capacity = json!({"cpu": "32", "memory": "256Gi", "pods": "110"});
    let handler =
        |name: &str| json!({"name": name, "features": {"recursiveReadOnlyMounts": true, "userNamespaces": true}});
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "kwok-node-0", "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {"type": "kwok", "kubernetes.io/hostname": "kwok-node-0", "kubernetes.io/os": "linux",
                                "katacontainers.io/kata-runtime": "true", "kata-deploy.katacontainers.io/default": "true"}},
        // kwok keeps these (checked: they survive its node-initialize and heartbeat stages);
        // `osbx verify`'s nodes.ready reads runtimeHandlers when the server reports them.
        "status": {"capacity": capacity, "allocatable": capacity,
                   "runtimeHandlers": [handler("runc"), handler("kata-clh-runtime-rs")]},
    });
    let (api, _) = api_for(client, &node).await;
    api.create(&PostParams::default(), &serde_json::from_value(node).unwrap()).await.expect("create the kwok Node");
    wait_for("kwok-node-0 Ready", Duration::from_secs(30), || {
        let api = api.clone();
        async move {
            let n = api.get("kwok-node-0").await.ok()?;
            let conditions = n.data["status"]["conditions"].as_array()?.clone();
            conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True").then_some(())
        }
    })
    .await;
    // In a real cluster the (external) kata-deploy install creates this RuntimeClass; the
    // default profile's Kata pool only names it, so the test stands in for kata-deploy.
    let rc = json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata-clh-runtime-rs"},
        "handler": "kata-clh-runtime-rs", "overhead": {"podFixed": {"cpu": "250m", "memory": "130Mi"}},
        "scheduling": {"nodeSelector": {"katacontainers.io/kata-runtime": "true"}}});
    apply_object(client, &rc).await;
}
