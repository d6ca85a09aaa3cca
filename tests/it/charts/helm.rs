//! The real helm binary on the shared upstream charts: chart preparation (a writable copy with its
//! `file://` dependencies built, offline) and `helm template` runs, cached by (chart, release,
//! namespace, values) for the whole test binary and run a few at a time.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::OnceMap;
use crate::support::{outputs, root, shared};

/// The test API server's version: every render targets it.
pub const KUBE_VERSION: &str = "v1.36.3";

/// Concurrent helm processes for the whole test binary (the machine has 2 cores).
const HELM_PARALLEL: usize = 3;

/// One `helm template` invocation. Equal jobs run once per test binary.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Job {
    /// Chart directory relative to the charts root (`opensandbox-401a525/opensandbox`).
    pub chart: &'static str,
    /// Release name.
    pub release: String,
    /// Release namespace.
    pub namespace: String,
    /// The values, as JSON text (helm reads JSON values files).
    pub values: String,
}

impl Job {
    /// A job for `values`.
    pub fn new(chart: &'static str, release: &str, namespace: &str, values: &Value) -> Self {
        Self { chart, release: release.to_owned(), namespace: namespace.to_owned(), values: values.to_string() }
    }
}

/// What one `helm template` printed.
#[derive(Debug, PartialEq, Eq)]
pub struct Run {
    /// Exit status 0.
    pub ok: bool,
    /// The manifests.
    pub stdout: String,
    /// Errors and warnings (empty on a clean render).
    pub stderr: String,
}

/// Where the upstream charts are read from: `../shared/charts/`, or `$OSBX_TEST_CHARTS` (a
/// directory of the same layout, e.g. with a chart's missing sibling dependencies added).
pub fn charts_root() -> PathBuf {
    let dir = std::env::var_os("OSBX_TEST_CHARTS")
        .filter(|v| !v.is_empty())
        .map_or_else(|| shared().join("charts"), PathBuf::from);
    dir.canonicalize().unwrap_or(dir)
}

/// The helm binary (`tests/cluster/build helm`, run once; builds only when missing).
pub fn helm() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        let out = Command::new(root().join("tests/cluster/build"))
            .arg("helm")
            .output()
            .expect("run tests/cluster/build helm");
        let (stdout, stderr) = outputs(&out);
        assert!(out.status.success(), "tests/cluster/build helm failed:\n{stderr}");
        let dir = stdout.lines().last().unwrap_or_default().trim().to_owned();
        let helm = PathBuf::from(dir).join("helm");
        assert!(helm.is_file(), "tests/cluster/build helm printed {stdout:?}, which holds no helm");
        helm
    })
}

/// This process's scratch directory (chart copies, values files, helm's homes). Directories of
/// earlier test processes that no longer run are removed on first use.
fn work() -> &'static Path {
    static WORK: OnceLock<PathBuf> = OnceLock::new();
    WORK.get_or_init(|| {
        let tmp = std::env::temp_dir();
        for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("osbx-charts-it-")
                && pid.parse::<u32>().is_ok()
                && !Path::new("/proc").join(pid).exists()
            {
                crate::support::remove_dir_if_there(&entry.path());
            }
        }
        let dir = tmp.join(format!("osbx-charts-it-{}", std::process::id()));
        crate::support::remove_dir_if_there(&dir);
        for sub in ["charts", "values", "helm/cache", "helm/config", "helm/data"] {
            std::fs::create_dir_all(dir.join(sub))
                .unwrap_or_else(|e| panic!("create {}: {e}", dir.join(sub).display()));
        }
        dir
    })
}

/// A helm command that touches nothing outside the scratch directory.
fn helm_command() -> Command {
    let mut cmd = Command::new(helm());
    let homes = work().join("helm");
    cmd.env("HELM_CACHE_HOME", homes.join("cache"))
        .env("HELM_CONFIG_HOME", homes.join("config"))
        .env("HELM_DATA_HOME", homes.join("data"))
        .env_remove("KUBECONFIG")
        .env_remove("HELM_KUBECONTEXT")
        .env_remove("HELM_NAMESPACE");
    cmd
}

/// Copy a directory tree (files keep their mode; directories are created writable).
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type()?.is_dir() {
            copy_tree(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

/// The `file://` dependencies of a chart's `Chart.yaml` (relative paths, each once), which
/// `helm dependency build` packages into `charts/`, offline. Remote dependencies are expected
/// vendored already.
fn file_dependencies(chart: &Path) -> Result<Vec<String>, String> {
    let path = chart.join("Chart.yaml");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let doc: Value = serde_saphyr::from_str(&text).map_err(|e| format!("parse {}: {e}", path.display()))?;
    let mut deps: Vec<String> = doc["dependencies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["repository"].as_str()?.strip_prefix("file://").map(str::to_owned))
        .collect();
    deps.dedup();
    Ok(deps)
}

/// A writable copy of `chart` (`<top>/<name>` under the charts root; the whole `<top>` directory
/// is copied, since `file://../x` dependencies point at siblings) with its dependencies built.
/// Once per chart per test binary; the error names the failing step and helm's output.
pub fn prepared(chart: &'static str) -> Result<PathBuf, String> {
    static CHARTS: OnceMap<&'static str, Result<PathBuf, String>> = OnceMap::new();
    CHARTS.get_or_init(chart, || {
        let top = chart.split('/').next().unwrap_or(chart);
        let copy = copied(top)?;
        let dir = copy.parent().unwrap_or(&copy).join(chart);
        let deps = file_dependencies(&dir)?;
        let absent: Vec<&String> = deps.iter().filter(|d| !dir.join(d).join("Chart.yaml").is_file()).collect();
        if !absent.is_empty() {
            return Err(format!(
                "the charts root {} lacks file:// dependencies of {chart}: {} (named in its Chart.yaml `dependencies`); \
                 add them from the same upstream commit",
                charts_root().display(),
                absent.iter().map(|d| format!("file://{d}")).collect::<Vec<_>>().join(", ")
            ));
        }
        if !deps.is_empty() {
            let start = Instant::now();
            let out = helm_command()
                .args(["dependency", "build", "--skip-refresh", "."])
                .current_dir(&dir)
                .output()
                .map_err(|e| format!("run helm dependency build: {e}"))?;
            count_run(start.elapsed());
            let (stdout, stderr) = outputs(&out);
            if !out.status.success() {
                return Err(format!(
                    "`helm dependency build` in a copy of {} failed: {} {}",
                    charts_root().join(chart).display(),
                    stderr.trim(),
                    stdout.trim()
                ));
            }
        }
        Ok(dir)
    })
}

/// The copy of `<charts root>/<top>` in the scratch directory (copied once).
fn copied(top: &'static str) -> Result<PathBuf, String> {
    static TOPS: OnceMap<&'static str, Result<PathBuf, String>> = OnceMap::new();
    TOPS.get_or_init(top, || {
        let (from, to) = (charts_root().join(top), work().join("charts").join(top));
        copy_tree(&from, &to).map_err(|e| format!("copy {} to {}: {e}", from.display(), to.display()))?;
        Ok(to)
    })
}

/// A counting semaphore over helm processes.
struct Slots {
    used: Mutex<usize>,
    freed: Condvar,
}

static SLOTS: Slots = Slots { used: Mutex::new(0), freed: Condvar::new() };

fn with_slot<T>(f: impl FnOnce() -> T) -> T {
    let mut used = SLOTS.used.lock().unwrap();
    while *used >= HELM_PARALLEL {
        used = SLOTS.freed.wait(used).unwrap();
    }
    *used += 1;
    drop(used);
    let out = f();
    *SLOTS.used.lock().unwrap() -= 1;
    SLOTS.freed.notify_one();
    out
}

static RUNS: AtomicUsize = AtomicUsize::new(0);
static REQUESTS: AtomicUsize = AtomicUsize::new(0);
static HELM_NANOS: AtomicU64 = AtomicU64::new(0);

fn count_run(elapsed: Duration) {
    RUNS.fetch_add(1, Ordering::Relaxed);
    HELM_NANOS.fetch_add(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// `helm template` for `job`, run once per test binary (later callers get the cached output; a
/// caller that asks while another runs it waits for that run).
pub fn template(job: &Job) -> Arc<Run> {
    static CACHE: OnceMap<Job, Arc<Run>> = OnceMap::new();
    REQUESTS.fetch_add(1, Ordering::Relaxed);
    CACHE.get_or_init(job.clone(), || Arc::new(run_template(job)))
}

fn run_template(job: &Job) -> Run {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = match prepared(job.chart) {
        Ok(dir) => dir,
        Err(e) => return Run { ok: false, stdout: String::new(), stderr: e },
    };
    let values = work().join("values").join(format!("{}.json", NEXT.fetch_add(1, Ordering::Relaxed)));
    if let Err(e) = std::fs::write(&values, &job.values) {
        return Run { ok: false, stdout: String::new(), stderr: format!("write {}: {e}", values.display()) };
    }
    let out = with_slot(|| {
        let start = Instant::now();
        let out = helm_command()
            .arg("template")
            .arg(&job.release)
            .arg(&dir)
            .args(["--namespace", &job.namespace, "--kube-version", KUBE_VERSION, "--include-crds", "--values"])
            .arg(&values)
            .output();
        count_run(start.elapsed());
        out
    });
    std::fs::remove_file(&values).unwrap_or_else(|e| panic!("removing {}: {e}", values.display()));
    match out {
        Ok(out) => {
            let (stdout, stderr) = outputs(&out);
            Run { ok: out.status.success(), stdout, stderr }
        }
        Err(e) => Run { ok: false, stdout: String::new(), stderr: format!("run {}: {e}", helm().display()) },
    }
}

/// `template` for every job, `HELM_PARALLEL` at a time, in job order.
pub fn template_all(jobs: &[Job]) -> Vec<Arc<Run>> {
    let next = AtomicUsize::new(0);
    let results: Vec<OnceLock<Arc<Run>>> = jobs.iter().map(|_| OnceLock::new()).collect();
    std::thread::scope(|s| {
        for _ in 0..HELM_PARALLEL.min(jobs.len()) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    // Each index is taken once (fetch_add), so the cell is empty and set cannot fail.
                    let _ = results[i].set(template(job));
                }
            });
        }
    });
    results.into_iter().map(|r| r.into_inner().expect("every job ran")).collect()
}

/// Helm runs so far in this test binary, for the log: processes, requests served, helm time.
pub fn stats() -> String {
    format!(
        "{} helm processes for {} template requests so far, {:.1} s of helm time",
        RUNS.load(Ordering::Relaxed),
        REQUESTS.load(Ordering::Relaxed),
        Duration::from_nanos(HELM_NANOS.load(Ordering::Relaxed)).as_secs_f64()
    )
}

/// The top-level keys of a chart's `values.yaml` plus its dependencies' names and aliases (the
/// sections its values can have); empty when the chart cannot be read.
pub fn top_level_names(chart: &'static str) -> std::collections::BTreeSet<String> {
    let dir = charts_root().join(chart);
    let read = |file: &str| -> Value {
        std::fs::read_to_string(dir.join(file))
            .ok()
            .and_then(|t| serde_saphyr::from_str(&t).ok())
            .unwrap_or(Value::Null)
    };
    let mut names: std::collections::BTreeSet<String> =
        read("values.yaml").as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default();
    for dep in read("Chart.yaml")["dependencies"].as_array().into_iter().flatten() {
        names.extend(["name", "alias"].iter().filter_map(|k| dep[*k].as_str()).map(str::to_owned));
    }
    names
}
