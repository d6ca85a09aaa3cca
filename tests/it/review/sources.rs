//! The chart sources a review fetches from, served on loopback from the real upstream charts in
//! `../shared/charts/` (read at test time, never copied into the repository):
//!
//! - a git smart-HTTP server (`tests/cluster/githttp.py`) holding the "OpenSandbox" repository
//!   with the charts at `kubernetes/charts/` under the tags `helm/opensandbox/0.1.0`, `0.2.0`
//!   (both as upstream tagged them: 0.2.0 with its stale `Chart.lock`) and `0.2.2` (the pinned
//!   copy at 401a525); the same server's `/static/helm-charts-hardened/` is a Helm repository
//!   (`index.yaml` + packages made by the real helm) of the SPIRE charts `spire` 0.30.0 and
//!   `spire-crds` 0.6.0;
//! - an OCI registry (go-containerregistry's, `crane registry serve`, from the Go module proxy:
//!   `tests/cluster/build review`) holding kata-deploy 4.1.0, pushed by `helm push` over plain
//!   HTTP at `oci://127.0.0.1:PORT/kata-containers/kata-deploy-charts/kata-deploy`.
//!
//! Both servers listen on 127.0.0.1 only and are stopped when [`ChartSources`] is dropped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::charts::helm::helm;
pub use crate::e2e::git::copy_dir;
use crate::support::{git, outputs, root, shared};

/// The OpenSandbox chart tags the git server holds, and the copy each is made from.
pub const OPENSANDBOX_TAGS: [(&str, &str); 3] = [
    ("helm/opensandbox/0.1.0", "opensandbox-0.1.0"),
    ("helm/opensandbox/0.2.0", "opensandbox-0.2.0"),
    ("helm/opensandbox/0.2.2", "opensandbox-401a525"),
];

/// A binary of `tests/cluster/build` (built once when missing).
pub fn built(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let out = Command::new(root().join("tests/cluster/build"))
            .args(["helm", "review"])
            .output()
            .expect("run tests/cluster/build");
        let (stdout, stderr) = outputs(&out);
        assert!(out.status.success(), "tests/cluster/build helm review failed:\n{stderr}");
        PathBuf::from(stdout.lines().last().unwrap_or_default().trim())
    });
    let path = dir.join(name);
    assert!(path.is_file(), "{} is not built", path.display());
    path
}

/// The real OCI registry (go-containerregistry's, `crane registry serve`, in memory) on a free
/// port of 127.0.0.1, and its port.
pub fn registry() -> (Server, u16) {
    let mut child = Command::new(built("crane"))
        .args(["registry", "serve", "--address", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the registry");
    let port = read_port(&mut child, "the registry", |line| line.split("serving on port ").nth(1)?.trim().parse().ok());
    (Server(child), port)
}

/// `crane ARGS` (plain HTTP to a loopback registry), its stdout.
pub fn crane(args: &[&str]) -> String {
    crane_with(None, args)
}

/// `crane ARGS` with the Docker config directory `docker` (its credentials), its stdout.
pub fn crane_with(docker: Option<&Path>, args: &[&str]) -> String {
    let mut cmd = Command::new(built("crane"));
    cmd.args(args).arg("--insecure");
    if let Some(docker) = docker {
        cmd.env("DOCKER_CONFIG", docker);
    }
    let out = cmd.output().unwrap();
    let (stdout, stderr) = outputs(&out);
    assert!(out.status.success(), "crane {args:?}: {stderr}");
    stdout.trim().to_owned()
}

/// A child process killed (and reaped) on drop.
pub struct Server(Child);

impl From<Child> for Server {
    fn from(child: Child) -> Self {
        Self(child)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Best effort when dropped: kill fails only if the server already exited, and wait then reaps it.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The three kinds of chart source, serving.
pub struct ChartSources {
    /// The servers' scratch directory (the git root, the Helm repository's files).
    _dir: tempfile::TempDir,
    /// `http://127.0.0.1:P/git/opensandbox.git`.
    pub opensandbox_git: String,
    /// `http://127.0.0.1:P/static/helm-charts-hardened`.
    pub spire_repo: String,
    /// `oci://127.0.0.1:Q/kata-containers/kata-deploy-charts/kata-deploy`.
    pub kata_oci: String,
    _git: Server,
    _registry: Server,
}

/// Run a command, panicking with its output on failure.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    let (stdout, stderr) = outputs(&out);
    assert!(out.status.success(), "{cmd:?} failed:\n{stdout}{stderr}");
    stdout
}

/// A helm command whose homes are under `scratch` (nothing of the user's is read or written).
pub fn helm_command(scratch: &Path) -> Command {
    let mut cmd = Command::new(helm());
    for (var, sub) in [("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config"), ("HELM_DATA_HOME", "data")] {
        cmd.env(var, scratch.join("helm-home").join(sub));
    }
    cmd.env_remove("KUBECONFIG");
    cmd
}

/// Wait until `find` finds the port in a line of the child's stderr (read to its end after).
fn read_port(child: &mut Child, what: &str, find: impl Fn(&str) -> Option<u16> + Send + 'static) -> u16 {
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !sent && let Some(port) = find(&line) {
                // The receiver gives up after its own timeout; a late port has no one to tell.
                let _ = tx.send(port);
                sent = true;
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| panic!("{what} did not say its port in 30 s"))
}

/// A git smart-HTTP server (`tests/cluster/githttp.py`) on loopback over `srv` (bare
/// repositories under `srv/git/`, static files under `srv/static/`), and its `http://` base URL.
pub fn git_http(srv: &Path, port_file: &Path) -> (Server, String) {
    let server = Server(
        Command::new("python3")
            .arg(root().join("tests/cluster/githttp.py"))
            .args(["--root", &srv.display().to_string(), "--bind", "127.0.0.1", "--port", "0"])
            .arg("--port-file")
            .arg(port_file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start githttp.py"),
    );
    let started = Instant::now();
    let port = loop {
        if let Some(port) = std::fs::read_to_string(port_file).ok().and_then(|p| p.trim().parse::<u16>().ok()) {
            break port;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "githttp.py did not start in 30 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    (server, format!("http://127.0.0.1:{port}"))
}

impl ChartSources {
    /// Start both servers and publish every chart.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let srv = dir.path().join("srv");
        std::fs::create_dir_all(srv.join("git")).unwrap();
        std::fs::create_dir_all(srv.join("static/helm-charts-hardened")).unwrap();

        // The git server (and the Helm repository's static files).
        let (git_server, http) = git_http(&srv, &dir.path().join("git.port"));

        // The OCI registry.
        let (registry, registry_port) = registry();

        // The OpenSandbox repository: one commit per tag, each holding that tag's charts.
        let opensandbox_git = format!("{http}/git/opensandbox.git");
        let bare = srv.join("git/opensandbox.git");
        git(&srv, &["init", "-q", "--bare", "-b", "main", &bare.display().to_string()]);
        let tree = dir.path().join("opensandbox-src");
        std::fs::create_dir_all(&tree).unwrap();
        git(&tree, &["init", "-q", "-b", "main"]);
        for (tag, copy) in OPENSANDBOX_TAGS {
            let charts = tree.join("kubernetes/charts");
            crate::support::remove_dir_if_there(&charts);
            for chart in ["opensandbox", "opensandbox-controller", "opensandbox-server"] {
                copy_dir(&shared().join("charts").join(copy).join(chart), &charts.join(chart));
            }
            git(&tree, &["add", "-A"]);
            git(&tree, &["commit", "-q", "-m", &format!("charts as {tag} holds them")]);
            git(&tree, &["tag", tag]);
        }
        git(&tree, &["push", "-q", &opensandbox_git, "main", "--tags"]);

        // The SPIRE Helm repository: packages made by helm, indexed for the URL they are served at.
        let spire_repo = format!("{http}/static/helm-charts-hardened");
        let spire = dir.path().join("spire-src");
        copy_dir(&shared().join("charts/spire-0.30.0"), &spire);
        run(helm_command(dir.path()).args(["dependency", "build", "--skip-refresh"]).current_dir(spire.join("spire")));
        let out = srv.join("static/helm-charts-hardened");
        run(helm_command(dir.path())
            .arg("package")
            .arg(spire.join("spire"))
            .arg(spire.join("spire-crds"))
            .arg("-d")
            .arg(&out));
        run(helm_command(dir.path()).args(["repo", "index"]).arg(&out).args(["--url", &spire_repo]));

        // kata-deploy, pushed to the registry.
        let kata = dir.path().join("kata-src");
        copy_dir(&shared().join("charts/kata-deploy-4.1.0/kata-deploy"), &kata.join("kata-deploy"));
        run(helm_command(dir.path()).arg("package").arg(kata.join("kata-deploy")).arg("-d").arg(&kata));
        let registry_url = format!("oci://127.0.0.1:{registry_port}/kata-containers/kata-deploy-charts");
        run(helm_command(dir.path())
            .arg("push")
            .arg(kata.join("kata-deploy-4.1.0.tgz"))
            .arg(&registry_url)
            .arg("--plain-http"));

        Self {
            _dir: dir,
            opensandbox_git,
            spire_repo,
            kata_oci: format!("{registry_url}/kata-deploy"),
            _git: git_server,
            _registry: registry,
        }
    }
}
