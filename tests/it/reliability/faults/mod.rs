//! The network fault matrix: `osbx apply`, `osbx diff` and `osbx verify` run through the
//! fault-injecting proxy of [`super::proxy`] in front of the test API server, and `osbx render
//! --commit`, which involves no network (git2 on the local repository; osbx never pushes or
//! fetches), under its failpoints (`OSBX_FAILPOINT=rename:N` / `kill:N`) and a held git index
//! lock.
//!
//! Every faulted run must end either in success or in a clear error: exit 2 with an `error:`
//! line naming what failed (the object or the cluster) and why; for `verify`, whose failed
//! checks exit 1, an ERROR verdict is also a clear end, a FAIL never is (the platform is
//! healthy: a FAIL would be a wrong diagnosis). Never a panic, never a hang (the runs use
//! `--request-timeout 5s`: a run that fails ends within [`AFTER_FAULT`] of the fault), never an
//! apply that created an object its inventory does not list, never a diff that reports other
//! changes than a clean one. Then runs without faults
//! converge: `apply` exits 0 and reports as created exactly what was missing, `diff` is clean,
//! every object is present once and the inventory lists every object, as created by osbx.
//!
//! Cut points are placed from a clean run's own counts (its client TLS records and response
//! bytes, [`Stats`]), so they fall in the same phase of a run whatever its size; "every record"
//! sweeps cut a run at each of its request bursts in turn. Each faulted run prints a line
//! `fault-matrix: <command> | <fault> | <outcome>` (shown with `--nocapture`): RELIABILITY.md's
//! table is made from them. A test collects every violation of its cases and fails at the end
//! with all of them, so one misbehaviour does not hide the rest of the matrix.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::proxy::{Conns, Cut, Fault, Proxy, Script, Stats};
use crate::builder::TestProfile;
use crate::cluster::{self, standin::Controllers};
use crate::support::{osbx, outputs, tree};

/// `--request-timeout` of every faulted run.
const REQUEST_TIMEOUT: &str = "5s";
/// How long after the first fault a run that fails may still take: the request timeout, and
/// slack for a loaded 2-core machine.
const AFTER_FAULT: Duration = Duration::from_secs(5 + 4);
/// The longest any run here may take, faulted or not.
const BOUND: Duration = Duration::from_secs(30);
/// A run still going after this is killed and reported as hung.
const HANG: Duration = Duration::from_secs(45);
/// A stall far past the request timeout (then the proxy closes the connection).
const LONG_STALL: Duration = Duration::from_secs(12);
/// Cases of one test that run at once (each with its own proxy; apply cases with their own
/// profile).
const PARALLEL: usize = 3;
/// Pools of every profile here (with the two Namespaces, the values ConfigMap, the
/// HelmRelease, the GitRepository and two Kustomizations: 13 objects).
const POOLS: usize = 6;

/// A finished (or killed) `osbx` run.
struct Ran {
    started: Instant,
    code: Option<i32>,
    stdout: String,
    stderr: String,
    wall: Duration,
    hung: bool,
}

mod apply;
mod diff_verify;
mod render;
mod repeated_create;

/// Run `osbx` in `dir` with `args`, killing it after [`HANG`].
fn osbx_blocking(dir: &Path, args: &[String]) -> Ran {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_osbx"))
        .current_dir(dir)
        .env("OSBX_COLOR", "never")
        .env_remove("OSBX_PROFILE")
        .env_remove("OSBX_TEMPLATES")
        .env_remove("OSBX_FAILPOINT")
        .env_remove("OSBX_API_KEY")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start osbx");
    let pipe = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            // What was read before a broken pipe is the output; the test asserts on it.
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let stdout = pipe(Box::new(child.stdout.take().unwrap()));
    let stderr = pipe(Box::new(child.stderr.take().unwrap()));
    let mut hung = false;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for osbx") {
            break status;
        }
        if start.elapsed() > HANG {
            hung = true;
            // It may have exited since try_wait; the wait below is checked.
            let _ = child.kill();
            break child.wait().expect("reap osbx");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let wall = start.elapsed();
    Ran {
        started: start,
        code: status.code(),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
        wall,
        hung,
    }
}

/// [`osbx_blocking`] off the async runtime, with `--profile dir/profile.yaml --kubeconfig`.
async fn osbx_on(kubeconfig: &Path, dir: &Path, args: &[&str]) -> Ran {
    let mut full: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    full.extend(["--profile".into(), dir.join("profile.yaml").display().to_string()]);
    full.extend(["--kubeconfig".into(), kubeconfig.display().to_string()]);
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || osbx_blocking(&dir, &full)).await.unwrap()
}

/// The violations a test found, reported all at once at its end.
#[derive(Default)]
struct Findings(Vec<String>);

impl Findings {
    fn extend(&mut self, other: Self) {
        self.0.extend(other.0);
    }

    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.0.push(what());
        }
    }

    #[track_caller]
    fn assert_none(&self, test: &str) {
        assert!(self.0.is_empty(), "{test}: {} violation(s):\n\n{}", self.0.len(), self.0.join("\n\n"));
    }
}

/// One line of the matrix.
#[allow(clippy::print_stderr, reason = "the matrix lines RELIABILITY.md is made from")]
fn matrix(command: &str, fault: &str, outcome: &str) {
    eprintln!("fault-matrix: {command} | {fault} | {outcome}");
}

/// The `error:` line of a run and the last cause of its chain, shortened.
fn error_of(stderr: &str) -> String {
    let line = stderr.lines().find(|l| l.starts_with("error:")).unwrap_or_default();
    let line = line.split(": https://docs.rs").next().unwrap_or(line);
    let subject = line.trim_start_matches("error: ").split(": ").next().unwrap_or_default();
    let cause = stderr
        .lines()
        .filter_map(|l| l.trim().strip_prefix("caused by: "))
        .next_back()
        .unwrap_or_else(|| line.rsplit(": ").next().unwrap_or_default());
    let cause = cause.split(": https://").next().unwrap_or(cause);
    format!("{subject}: {cause}")
}

/// The outcome of a run, in the matrix's words.
fn outcome(ran: &Ran) -> String {
    if ran.hung {
        return format!("HUNG (killed after {:.0} s)", ran.wall.as_secs_f64());
    }
    let took = format!("{:.1} s", ran.wall.as_secs_f64());
    match ran.code {
        Some(2) => format!("exit 2 in {took}: {}", error_of(&ran.stderr)),
        Some(code) => format!("exit {code} in {took}"),
        None => format!("killed by a signal in {took}"),
    }
}

/// Whether the text says why a request failed, in transport terms.
fn says_why(text: &str) -> bool {
    let text = text.to_lowercase();
    ["timed out", "timeout", "connection", "reset", "closed", "close_notify", "eof", "broken pipe", "tls"]
        .iter()
        .any(|w| text.contains(w))
}

/// Check what every faulted run must satisfy: no panic, an allowed exit code, never a hang (a
/// run that does not succeed ends within [`AFTER_FAULT`] of the first fault, any run within
/// [`BOUND`]), and an exit 2 whose error names what failed (`names` lists acceptable fragments:
/// the profile's objects, the cluster, discovery) and why.
fn check_end(f: &mut Findings, case: &str, ran: &Ran, codes: &[i32], names: &[String], fault_at: Option<Instant>) {
    let detail = || format!("{case}: {}\n--- stderr:\n{}", outcome(ran), ran.stderr);
    f.check(!ran.hung && ran.wall <= BOUND, || format!("ran past the bound of {BOUND:?}: {}", detail()));
    if ran.code != Some(0)
        && let Some(at) = fault_at
    {
        let since_fault = (ran.started + ran.wall).saturating_duration_since(at);
        f.check(since_fault <= AFTER_FAULT, || {
            format!(
                "still running {:.1} s after the fault (request timeout {REQUEST_TIMEOUT}): {}",
                since_fault.as_secs_f64(),
                detail()
            )
        });
    }
    f.check(!ran.stderr.contains("panicked") && !ran.stderr.contains("stack backtrace"), || {
        format!("panicked: {}", detail())
    });
    f.check(ran.code.is_some_and(|c| codes.contains(&c)), || format!("exit code not in {codes:?}: {}", detail()));
    if ran.code == Some(2) {
        let line = ran.stderr.lines().find(|l| l.starts_with("error:")).unwrap_or_default();
        f.check(names.iter().any(|n| line.contains(n.as_str())) && says_why(&ran.stderr), || {
            format!("the error does not say what failed and why: {}", detail())
        });
    }
}

/// One fault of the matrix.
struct Case {
    /// In words, for the matrix.
    fault: String,
    script: Script,
    /// Whether a run must reach it: a cut late in a clean run's records may fall after a run's
    /// end, since concurrent requests share TLS records differently from run to run (a first
    /// apply sent 31 to 48 when several ran at once).
    must_fire: bool,
    /// Whether the run must succeed (a fault well within the request timeout).
    must_succeed: bool,
}

impl Case {
    fn new(fault: String, script: Script) -> Self {
        Self { fault, script, must_fire: true, must_succeed: false }
    }

    fn harmless(fault: String, script: Script) -> Self {
        Self { must_succeed: true, ..Self::new(fault, script) }
    }
}

/// A run through the proxy, and what the proxy saw.
struct Faulted {
    ran: Ran,
    stats: Stats,
    fault_at: Option<Instant>,
    /// What an error may name (see [`names`]).
    names: Vec<String>,
    events: Vec<String>,
}

/// Run `osbx args` for the profile `p` in `dir` through a proxy in front of `kubeconfig`.
async fn through_proxy(kubeconfig: &Path, dir: &Path, args: &[&str], script: Script, p: &str) -> Faulted {
    let (proxy, through) = Proxy::in_front_of(kubeconfig, script);
    let ran = osbx_on(&through, dir, args).await;
    Faulted {
        ran,
        stats: proxy.stats(),
        fault_at: proxy.first_fault(),
        names: names(p, &proxy),
        events: proxy.events(),
    }
}

impl Faulted {
    /// [`check_end`] with the exit codes allowed (the first is the command's success), and that
    /// the fault fired when it must have.
    fn check(&self, f: &mut Findings, command: &str, case: &Case, codes: &[i32]) {
        let what = format!("{command} | {}", case.fault);
        f.check(!case.must_fire || self.stats.faults_fired > 0, || {
            format!("{what}: the fault never fired ({:?}); {}", self.stats, outcome(&self.ran))
        });
        let what = format!("{what} [proxy: {}]", self.events.join("; "));
        let success = [codes[0]];
        let codes = if case.must_succeed { &success[..] } else { codes };
        check_end(f, &what, &self.ran, codes, &self.names, self.fault_at);
    }
}

/// Run `one` for every case, `parallel` at a time; the findings of all.
async fn all_cases<Fut>(cases: Vec<Case>, parallel: usize, one: impl Fn(usize, Case) -> Fut) -> Findings
where
    Fut: std::future::Future<Output = Findings>,
{
    use futures::StreamExt as _;
    let found: Vec<Findings> = futures::stream::iter(cases.into_iter().enumerate().map(|(i, case)| one(i, case)))
        .buffer_unordered(parallel)
        .collect()
        .await;
    let mut all = Findings::default();
    for f in found {
        all.extend(f);
    }
    all
}

/// Where a cut falls: every client record of a clean run (`record_fractions: None`), or
/// fractions of its records; then fractions of its response bytes.
fn cuts(clean: Stats, record_fractions: Option<&[f64]>, byte_fractions: &[f64]) -> Vec<Case> {
    let mut out = Vec::new();
    let records: Vec<u64> = match record_fractions {
        None => (1..=clean.client_records).collect(),
        Some(fractions) => fractions.iter().map(|x| at(clean.client_records, *x).max(1)).collect(),
    };
    for record in records {
        out.push(Case {
            must_fire: record * 2 <= clean.client_records,
            ..Case::new(
                format!("close (FIN) at client record {record} of {}", clean.client_records),
                Script::clean().on(Conns::Nth(1), Fault::CutAtRecord { record, cut: Cut::Close }),
            )
        });
    }
    for x in byte_fractions {
        let bytes = at(clean.bytes_down, *x);
        out.push(Case::new(
            format!("reset after {bytes} of {} response bytes", clean.bytes_down),
            Script::clean().on(Conns::Nth(1), Fault::ResetAfterBytes(bytes)),
        ));
    }
    out
}

/// The faults of time: stalls below and past the request timeout, latency, refused connections.
fn timing(clean: Stats, long_stall_fractions: &[f64]) -> Vec<Case> {
    let mut out = vec![
        Case::new(
            "reset at connect, every connection".to_owned(),
            Script::clean().on(Conns::All, Fault::ResetAfterBytes(0)),
        ),
        Case::new(
            "reset at connect, first connection only".to_owned(),
            Script::clean().on(Conns::First(1), Fault::ResetAfterBytes(0)),
        ),
        Case::harmless(
            "stall 2 s half-way, then continue".to_owned(),
            Script::clean().on(
                Conns::Nth(1),
                Fault::Stall { after_bytes: at(clean.bytes_down, 0.5), duration: Duration::from_secs(2), then: None },
            ),
        ),
        Case::new(
            "latency 25 ms per chunk".to_owned(),
            Script::clean().on(Conns::All, Fault::Latency(Duration::from_millis(25))),
        ),
        Case::new(
            "latency 6 s per chunk".to_owned(),
            Script::clean().on(Conns::All, Fault::Latency(Duration::from_secs(6))),
        ),
    ];
    for x in long_stall_fractions {
        let after_bytes = at(clean.bytes_down, *x);
        out.push(Case::new(
            format!("stall {LONG_STALL:?} after {after_bytes} of {} response bytes, then close", clean.bytes_down),
            Script::clean()
                .on(Conns::Nth(1), Fault::Stall { after_bytes, duration: LONG_STALL, then: Some(Cut::Close) }),
        ));
    }
    out
}

/// `fraction` of `total`, rounded down.
fn at(total: u64, fraction: f64) -> u64 {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "test counts"
    )]
    let n = (total as f64 * fraction) as u64;
    n
}

/// A profile whose namespaces start with `p`, with [`POOLS`] runc pools `p0`…
fn profile(p: &str) -> TestProfile {
    (0..POOLS).fold(TestProfile::new(p), |profile, i| profile.pool(&format!("p{i}"), "runc", [0, 1, 0, 2]))
}

/// The shared plane with every CRD, its kubeconfig, and the Flux namespace of `p`.
async fn prepare(p: &str) -> (kube::Client, PathBuf) {
    let client = cluster::client().await;
    cluster::install_all_crds().await;
    let name = format!("{p}-flux");
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone()).patch(&name, &PatchParams::apply("test"), &Patch::Apply(&ns)).await.unwrap();
    (client, cluster::plane().kubeconfig.clone())
}

/// The stand-in Flux controllers and Pool status for the namespaces of `p`.
fn controllers(client: &kube::Client, p: &str) -> cluster::standin::AbortOnDrop {
    Controllers {
        flux_namespaces: vec![format!("{p}-flux"), format!("{p}-system")],
        pool_namespaces: vec![format!("{p}-sbx")],
        ..Controllers::default()
    }
    .spawn(client.clone())
}

fn json_of(ran: &Ran) -> Value {
    serde_json::from_str(&ran.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", ran.stdout, ran.stderr))
}

/// The names of the Pools in `ns`.
async fn pools_in(client: &kube::Client, ns: &str) -> BTreeSet<String> {
    let api = cluster::pool_api_in(client, ns).await;
    api.list(&ListParams::default()).await.unwrap().items.into_iter().filter_map(|p| p.metadata.name).collect()
}

/// The names an error may give for what failed: the profile's objects and namespaces, its
/// inventory, verify's probe namespace, API discovery, the preflight's access reviews, the
/// cluster.
fn names(p: &str, proxy: &Proxy) -> Vec<String> {
    vec![
        format!("/{p}-"),
        format!("osbx-inventory-{p}"),
        "osbx-verify-".to_owned(),
        "error: discovery: ".to_owned(),
        "error: SelfSubjectAccessReview: ".to_owned(),
        format!("cannot reach the cluster at https://127.0.0.1:{}", proxy.addr().port()),
    ]
}
