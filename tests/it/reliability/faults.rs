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

/// The stand-in Flux and OpenSandbox controllers for the namespaces of `p`.
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

/// Each object's subject (`Kind/ns/name`) and action in a report of `apply` or `diff`.
fn actions(report: &Value) -> BTreeMap<String, String> {
    report["changes"]
        .as_array()
        .map(|changes| {
            changes
                .iter()
                .map(|c| {
                    (
                        c["object"].as_str().unwrap_or_default().to_owned(),
                        c["action"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The inventory of the profile `p` (`None`: no ConfigMap): each entry's subject and `created`,
/// in stored order, or why it is unreadable.
async fn inventory(client: &kube::Client, p: &str) -> Option<Result<Vec<(String, bool)>, String>> {
    let name = format!("osbx-inventory-{p}-{p}");
    let cm = Api::<ConfigMap>::namespaced(client.clone(), &format!("{p}-flux")).get_opt(&name).await.unwrap()?;
    let Some(text) = cm.data.as_ref().and_then(|d| d.get("inventory.json")) else {
        return Some(Err(format!("{name} has no inventory.json: {:?}", cm.data)));
    };
    let entries: Vec<Value> = match serde_json::from_str(text) {
        Ok(e) => e,
        Err(e) => return Some(Err(format!("{name}: inventory.json is not JSON ({e}): {text}"))),
    };
    Some(Ok(entries
        .iter()
        .map(|e| {
            let ns = e["namespace"].as_str().map(|n| format!("{n}/")).unwrap_or_default();
            let subject = format!("{}/{ns}{}", e["kind"].as_str().unwrap_or("?"), e["name"].as_str().unwrap_or("?"));
            (subject, e["created"] == true)
        })
        .collect()))
}

/// The names of the Pools in `ns`.
async fn pools_in(client: &kube::Client, ns: &str) -> BTreeSet<String> {
    let api = cluster::pool_api_in(client, ns).await;
    api.list(&ListParams::default()).await.unwrap().items.into_iter().filter_map(|p| p.metadata.name).collect()
}

/// After a faulted apply of the profile `p` on a cluster that had none of its objects: the
/// inventory covers every object that now exists; a rerun without faults creates exactly what
/// is missing and converges (diff clean, every object once, all in the inventory as created).
async fn check_apply_converges(
    f: &mut Findings,
    case: &str,
    client: &kube::Client,
    kubeconfig: &Path,
    dir: &Path,
    p: &str,
) {
    // What exists now, as a diff without faults sees it (a diff writes nothing).
    let before = osbx_on(kubeconfig, dir, &["diff", "-o", "json"]).await;
    f.check(matches!(before.code, Some(0 | 1)), || {
        format!("{case}: diff after the fault: {}\n{}", outcome(&before), before.stderr)
    });
    let before = actions(&json_of(&before));
    let existing: Vec<&String> = before.iter().filter(|(_, a)| *a != "created").map(|(s, _)| s).collect();
    match inventory(client, p).await {
        None => f.check(existing.is_empty(), || {
            format!("{case}: the faulted apply created {existing:?} and wrote no inventory: osbx no longer knows it created them")
        }),
        Some(Err(e)) => f.check(false, || format!("{case}: half-written inventory: {e}")),
        Some(Ok(entries)) => {
            let listed: BTreeMap<&str, bool> = entries.iter().map(|(s, c)| (s.as_str(), *c)).collect();
            let untracked: Vec<&&String> =
                existing.iter().filter(|s| listed.get(s.as_str()) != Some(&true)).collect();
            f.check(untracked.is_empty(), || {
                format!("{case}: objects the faulted apply created are not in its inventory as created: {untracked:?}; inventory: {entries:?}")
            });
        }
    }

    let rerun = osbx_on(kubeconfig, dir, &["apply", "--no-wait", "-o", "json"]).await;
    f.check(rerun.code == Some(0), || {
        format!("{case}: the rerun without faults: {}\n{}", outcome(&rerun), rerun.stderr)
    });
    if rerun.code != Some(0) {
        return;
    }
    let done = actions(&json_of(&rerun));
    for (subject, was) in &before {
        let now = done.get(subject).map_or("missing", String::as_str);
        // Created exactly when it was missing: never "unchanged" for an object that was not there.
        let expected = if was == "created" {
            "created"
        } else if was == "configured" {
            "configured"
        } else {
            "unchanged"
        };
        f.check(now == expected, || {
            format!("{case}: rerun says {subject} {now}, expected {expected} (diff before it: {was})")
        });
    }
    let after = osbx_on(kubeconfig, dir, &["diff", "-o", "json"]).await;
    let summary = json_of(&after)["summary"].clone();
    f.check(
        after.code == Some(0) && summary == json!({"create": 0, "change": 0, "unchanged": before.len(), "prune": 0}),
        || format!("{case}: not converged: diff {} {summary}", outcome(&after)),
    );
    let want: BTreeSet<String> = (0..POOLS).map(|i| format!("p{i}")).collect();
    let live = pools_in(client, &format!("{p}-sbx")).await;
    f.check(live == want, || format!("{case}: pools {live:?}, expected {want:?}"));
    match inventory(client, p).await {
        Some(Ok(entries)) => {
            let subjects: Vec<&String> = entries.iter().map(|(s, _)| s).collect();
            let unique: BTreeSet<&String> = subjects.iter().copied().collect();
            let expected: BTreeSet<&String> = before.keys().collect();
            f.check(unique.len() == subjects.len() && unique == expected, || {
                format!("{case}: the inventory lists {subjects:?}, expected each of {expected:?} once")
            });
            let not_created: Vec<&String> = entries.iter().filter(|(_, c)| !c).map(|(s, _)| s).collect();
            f.check(not_created.is_empty(), || {
                format!("{case}: osbx created every object of {p}, but its inventory says it did not create {not_created:?} (so --prune would never delete them)")
            });
        }
        other => f.check(false, || format!("{case}: no readable inventory after the rerun: {other:?}")),
    }
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

/// A first `apply` of a fresh profile `p` through the proxy under `case` (`None`: no fault, to
/// measure a clean run), then the convergence checks; the proxy's counts and what was wrong.
async fn apply_case(p: String, case: Option<Case>, wait: bool) -> (Stats, Findings) {
    let mut f = Findings::default();
    let p = p.as_str();
    let (client, kubeconfig) = prepare(p).await;
    let _controllers = wait.then(|| controllers(&client, p));
    let dir = tempfile::tempdir().unwrap();
    profile(p).write_to(dir.path());
    let command = if wait { "apply" } else { "apply --no-wait" };
    let extra: &[&str] = if wait { &["--timeout", "30s"] } else { &["--no-wait"] };
    let args = [&["apply", "-o", "json", "--request-timeout", REQUEST_TIMEOUT], extra].concat();
    let script = case.as_ref().map_or_else(Script::clean, |c| c.script.clone());
    let run = through_proxy(&kubeconfig, dir.path(), &args, script, p).await;
    let Some(case) = case else {
        f.check(run.ran.code == Some(0), || format!("clean {command}: {}\n{}", outcome(&run.ran), run.ran.stderr));
        return (run.stats, f);
    };
    matrix(command, &case.fault, &outcome(&run.ran));
    run.check(&mut f, command, &case, &[0, 2]);
    let what = format!("{command} | {}", case.fault);
    if run.ran.code == Some(0) {
        // A first apply: everything created, nothing claimed unchanged.
        let got = actions(&json_of(&run.ran));
        f.check(got.len() == 7 + POOLS && got.values().all(|a| a == "created"), || format!("{what}: {got:?}"));
    }
    check_apply_converges(&mut f, &what, &client, &kubeconfig, dir.path(), p).await;
    (run.stats, f)
}

/// A clean first apply of `<prefix>0` to measure, then every case on `<prefix>1`, `<prefix>2`…,
/// `parallel` at a time.
async fn apply_matrix(test: &str, prefix: &str, wait: bool, parallel: usize, cases: impl FnOnce(Stats) -> Vec<Case>) {
    let (clean, f) = apply_case(format!("{prefix}0"), None, wait).await;
    f.assert_none(&format!("{test} (the clean run)"));
    let f = all_cases(cases(clean), parallel, |i, case| async move {
        apply_case(format!("{prefix}{}", i + 1), Some(case), wait).await.1
    })
    .await;
    f.assert_none(test);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_cut_at_every_request_burst_converges() {
    // One at a time: when several run at once, a run's concurrent requests share TLS records
    // more often, and the cut between the first objects and the inventory written with them
    // falls less often.
    apply_matrix("apply, cut at every client record", "pxr", false, 1, |clean| cuts(clean, None, &[])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_reset_part_way_through_the_responses_converges() {
    let fractions: Vec<f64> = (1..=12).map(|i| f64::from(i) / 13.0).collect();
    apply_matrix("apply, reset part-way", "pxb", false, PARALLEL, |clean| cuts(clean, Some(&[][..]), &fractions)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_with_stalls_latency_and_refused_connections_ends_in_time_and_converges() {
    apply_matrix("apply, time faults", "pxt", true, PARALLEL, |clean| timing(clean, &[0.3, 0.6, 0.9])).await;
}

/// The diff of every case: the objects and actions it lists (`► Kind/ns/name action`) and its
/// summary line, which a clean diff of the same state repeats exactly.
fn diff_lines(stdout: &str) -> Vec<String> {
    stdout.lines().filter(|l| l.starts_with('►') || l.ends_with("to prune")).map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_under_every_fault_is_the_clean_diff_or_a_clear_error() {
    let p = "pxd";
    let (client, kubeconfig) = prepare(p).await;
    let dir = tempfile::tempdir().unwrap();
    profile(p).write_to(dir.path());
    let applied = osbx_on(&kubeconfig, dir.path(), &["apply", "--no-wait"]).await;
    assert_eq!(applied.code, Some(0), "{}", applied.stderr);
    // The profile changes: a pool changed, one dropped, one added.
    let changed = (1..POOLS)
        .fold(TestProfile::new(p).pool("p0", "runc", [0, 2, 0, 3]), |pr, i| {
            if i == 3 { pr } else { pr.pool(&format!("p{i}"), "runc", [0, 1, 0, 2]) }
        })
        .pool("extra", "runc", [0, 1, 0, 2]);
    changed.write_to(dir.path());
    let args = ["diff", "--request-timeout", REQUEST_TIMEOUT];
    let (proxy, through) = Proxy::in_front_of(&kubeconfig, Script::clean());
    let reference = osbx_on(&through, dir.path(), &args).await;
    let clean = proxy.stats();
    drop(proxy);
    assert_eq!(reference.code, Some(1), "{}{}", reference.stdout, reference.stderr);
    let expected = diff_lines(&reference.stdout);
    assert!(expected.last().is_some_and(|l| l == "1 to create, 1 to change, 11 unchanged, 1 to prune"), "{expected:?}");

    let mut faults = cuts(clean, None, &(1..=12).map(|i| f64::from(i) / 13.0).collect::<Vec<_>>());
    faults.extend(timing(clean, &[0.4, 0.9]));
    let (kubeconfig, dir, expected) = (&kubeconfig, dir.path(), &expected);
    let f = all_cases(faults, PARALLEL, |_, case| async move {
        let mut f = Findings::default();
        let run = through_proxy(kubeconfig, dir, &args, case.script.clone(), p).await;
        matrix("diff", &case.fault, &outcome(&run.ran));
        run.check(&mut f, "diff", &case, &[1, 2]);
        let case = format!("diff | {}", case.fault);
        if run.ran.code == Some(1) {
            let got = diff_lines(&run.ran.stdout);
            f.check(got == *expected, || format!("{case}: a different diff:\n{got:#?}\nexpected:\n{expected:#?}"));
        }
        // A diff writes nothing, faulted or not: a clean diff still says the same.
        let again = osbx_on(kubeconfig, dir, &["diff"]).await;
        f.check(again.code == Some(1) && diff_lines(&again.stdout) == *expected, || {
            format!("{case}: state changed: {}", again.stdout)
        });
        f
    })
    .await;
    // Converges: the changed profile applied (with prune), then nothing to do.
    let out = osbx_on(kubeconfig, dir, &["apply", "--no-wait", "--prune"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = osbx_on(kubeconfig, dir, &["diff"]).await;
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    let want: BTreeSet<String> = ["p0", "p1", "p2", "p4", "p5", "extra"].map(String::from).into();
    assert_eq!(pools_in(&client, &format!("{p}-sbx")).await, want);
    f.assert_none("diff");
}

/// The probe namespace a verify run names on stderr (`► verify run … (probe namespace NS)`), if
/// it still exists and is not being deleted.
async fn probe_namespace_left(client: &kube::Client, stderr: &str) -> Option<String> {
    let name = stderr.split("(probe namespace ").nth(1)?.split(')').next()?.to_owned();
    let ns = Api::<Namespace>::all(client.clone()).get_opt(&name).await.unwrap()?;
    ns.metadata.deletion_timestamp.is_none().then_some(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_under_every_fault_passes_or_says_which_check_could_not_run() {
    let p = "pxv";
    let (client, kubeconfig) = prepare(p).await;
    let _controllers = controllers(&client, p);
    let dir = tempfile::tempdir().unwrap();
    profile(p).write_to(dir.path());
    let applied = osbx_on(&kubeconfig, dir.path(), &["apply", "--timeout", "60s"]).await;
    assert_eq!(applied.code, Some(0), "{}", applied.stderr);
    // The checks that read the cluster only (no probe pods, no Lifecycle API).
    let args = [
        "verify",
        "--only",
        "flux.layers,opensandbox.pools",
        "-o",
        "json",
        "--request-timeout",
        REQUEST_TIMEOUT,
        "--verify-timeout",
        "30s",
    ];
    let (proxy, through) = Proxy::in_front_of(&kubeconfig, Script::clean());
    let reference = osbx_on(&through, dir.path(), &args).await;
    let clean = proxy.stats();
    drop(proxy);
    assert_eq!(reference.code, Some(0), "{}{}", reference.stdout, reference.stderr);

    let mut faults = cuts(clean, Some(&[0.1, 0.3, 0.5, 0.7, 0.9][..]), &[0.2, 0.4, 0.6, 0.8, 0.95]);
    faults.extend(timing(clean, &[0.4, 0.9]));
    let (client, kubeconfig, dir) = (&client, &kubeconfig, dir.path());
    let f = all_cases(faults, PARALLEL, |_, case| async move {
        let mut f = Findings::default();
        let run = through_proxy(kubeconfig, dir, &args, case.script.clone(), p).await;
        run.check(&mut f, "verify", &case, &[0, 1, 2]);
        let (ran, fault) = (&run.ran, &case.fault);
        let case = format!("verify | {fault}");
        let mut said = outcome(ran);
        if matches!(ran.code, Some(0 | 1)) {
            let report = json_of(ran);
            let checks = report["checks"].as_array().cloned().unwrap_or_default();
            let not_passed: Vec<&Value> = checks.iter().filter(|c| c["outcome"] != "PASS").collect();
            for c in &not_passed {
                f.check(c["outcome"] == "ERROR" && says_why(&c.to_string()), || {
                    format!("{case}: the healthy platform got {} for {}: {c}", c["outcome"], c["id"])
                });
            }
            if !not_passed.is_empty() {
                let ids: Vec<String> = not_passed
                    .iter()
                    .map(|c| format!("{} {}", c["id"].as_str().unwrap_or("?"), c["outcome"].as_str().unwrap_or("?")))
                    .collect();
                said = format!("{said}: {}", ids.join(", "));
            }
        }
        if let Some(ns) = probe_namespace_left(client, &ran.stderr).await {
            said = format!("{said}; probe namespace {ns} left for a later run's sweep");
        }
        matrix("verify", fault, &said);
        f
    })
    .await;
    // Converges: a verify without faults passes.
    let out = osbx_on(kubeconfig, dir, &args).await;
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    f.assert_none("verify");
}

/// A git repository at `dir/repo` holding the render of `profile`, committed by `render
/// --commit`.
fn committed_repo(dir: &Path, profile: &TestProfile) -> PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    let out = render(&repo, &profile.write_to(dir), &["--commit", "-m", "first"], None);
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    repo
}

fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git").arg("-C").arg(repo).args(args).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", outputs(&out).1);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn render(repo: &Path, profile: &Path, args: &[&str], failpoint: Option<&str>) -> std::process::Output {
    let mut cmd = osbx();
    if let Some(point) = failpoint {
        cmd.env("OSBX_FAILPOINT", point);
    }
    cmd.arg("render").args(args).arg("--profile").arg(profile).arg("--out").arg(repo).output().unwrap()
}

/// What a repository says about itself: work tree, `git status`, commit count, HEAD's files.
fn repo_state(repo: &Path) -> (BTreeMap<String, String>, String, String, String) {
    (
        tree(repo),
        git(repo, &["status", "--porcelain", "--untracked-files=all"]),
        git(repo, &["rev-list", "--count", "HEAD"]).trim().to_owned(),
        git(repo, &["ls-tree", "-r", "HEAD"]),
    )
}

#[test]
fn render_commit_after_a_failed_or_killed_write_or_commit_leaves_a_consistent_repository() {
    use std::os::unix::process::ExitStatusExt as _;
    // From two layers to one: files written, deleted, the cluster index and the state edited.
    let old = TestProfile::new("lab").pool("small", "runc", [1, 2, 1, 3]);
    let new = TestProfile::new("lab").set("layers", json!([{"name": "opensandbox", "component": "opensandbox"}]));
    let (expected, expected_head) = {
        let dir = tempfile::tempdir().unwrap();
        let repo = committed_repo(dir.path(), &old);
        let out = render(&repo, &new.write_to(dir.path()), &["--commit", "-m", "second"], None);
        assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
        let (files, status, count, head) = repo_state(&repo);
        assert_eq!((status.as_str(), count.as_str()), ("", "2"));
        (files, head)
    };
    let mut f = Findings::default();
    // The next run without a fault finishes the job: the new tree, committed, nothing left over.
    let converges = |f: &mut Findings, case: &str, repo: &Path, profile: &Path| {
        let out = render(repo, profile, &["--commit", "-m", "second"], None);
        let (_, stderr) = outputs(&out);
        f.check(out.status.code() == Some(0), || format!("{case}: the next render: {stderr}"));
        let (files, status, count, head) = repo_state(repo);
        f.check(files == expected, || format!("{case}: the work tree is not the new render"));
        f.check(status.is_empty(), || {
            format!("{case}: after the next `render --commit` the repository is not clean (Flux would not see these):\n{status}next render said:\n{stderr}")
        });
        f.check(head == expected_head && count == "2", || {
            format!("{case}: HEAD is not the new render in one commit ({count} commits)")
        });
    };
    let mut steps = 0;
    for step in 1.. {
        // A failure at a step of the write: undone at once, nothing committed.
        let dir = tempfile::tempdir().unwrap();
        let repo = committed_repo(dir.path(), &old);
        let before = repo_state(&repo);
        let profile = new.write_to(dir.path());
        let out = render(&repo, &profile, &["--commit", "-m", "second"], Some(&format!("rename:{step}")));
        if out.status.code() == Some(0) {
            break; // past the last step
        }
        steps += 1;
        let case = format!("render --commit | OSBX_FAILPOINT=rename:{step}");
        let (_, stderr) = outputs(&out);
        matrix("render --commit", &format!("OSBX_FAILPOINT=rename:{step}"), &format!("exit {:?}", out.status.code()));
        f.check(out.status.code() == Some(2) && stderr.contains("injected failure"), || format!("{case}: {stderr}"));
        f.check(repo_state(&repo) == before, || format!("{case}: the repository changed"));
        converges(&mut f, &case, &repo, &profile);

        // A kill at the same step: the next render completes the write, and must commit it.
        let dir = tempfile::tempdir().unwrap();
        let repo = committed_repo(dir.path(), &old);
        let out = render(&repo, &profile, &["--commit", "-m", "second"], Some(&format!("kill:{step}")));
        let case = format!("render --commit | OSBX_FAILPOINT=kill:{step}");
        f.check(out.status.signal() == Some(9), || format!("{case}: not killed: {:?}", out.status));
        let (files, status, ..) = repo_state(&repo);
        let uncommitted = status.lines().count();
        converges(&mut f, &case, &repo, &profile);
        let (_, status_after, ..) = repo_state(&repo);
        matrix(
            "render --commit",
            &format!("OSBX_FAILPOINT=kill:{step}"),
            &format!(
                "killed with {uncommitted} uncommitted path(s), {} file(s); next run leaves {} uncommitted",
                files.len(),
                status_after.lines().count()
            ),
        );
    }
    assert!(steps >= 5, "the write has only {steps} steps");

    // The commit itself fails (another git process holds the index): exit 2 naming it.
    let dir = tempfile::tempdir().unwrap();
    let repo = committed_repo(dir.path(), &old);
    let profile = new.write_to(dir.path());
    let lock = repo.join(".git/index.lock");
    std::fs::write(&lock, "").unwrap();
    let out = render(&repo, &profile, &["--commit", "-m", "second"], None);
    let (_, stderr) = outputs(&out);
    let case = "render --commit | .git/index.lock held";
    f.check(out.status.code() == Some(2) && stderr.contains("the index is locked"), || format!("{case}: {stderr}"));
    std::fs::remove_file(&lock).unwrap();
    converges(&mut f, case, &repo, &profile);
    let (_, status_after, ..) = repo_state(&repo);
    matrix(
        "render --commit",
        ".git/index.lock held",
        &format!(
            "exit {:?}: {}; next run leaves {} uncommitted",
            out.status.code(),
            error_of(&stderr),
            status_after.lines().count()
        ),
    );
    f.assert_none("render --commit");
}
