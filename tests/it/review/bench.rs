//! What a review costs beyond helm (printed as `review-bench:` lines for bench/run; no timing is
//! asserted here): the homelab profile, its OpenSandbox chart fetched once into the cache, then
//! `osbx diff --base` with the charts expanded against the helm runs that review really makes
//! (recorded by a shim on `OSBX_HELM` in one run, each with its values file, then replayed by
//! hand), and the Flux-object-only review (`--no-charts`). `OSBX_BENCH_BIN` names the osbx to time
//! (bench/run: the release build).

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use serde_json::{Value, json};

use super::sources::helm_command;
use super::{Case, sources};
use crate::support::{outputs, root};

/// The osbx to time: `OSBX_BENCH_BIN` (bench/run: the release build), else the test build.
fn bench_bin() -> PathBuf {
    std::env::var_os("OSBX_BENCH_BIN").map_or_else(|| assert_cmd::cargo::cargo_bin("osbx"), PathBuf::from)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// What an osbx command with charts costs against the helm runs it makes: the median of `rounds`
/// runs of the command (`args`, its chart cache warm after a first run that must exit with
/// `code` too), the median of replaying its helm runs by hand (recorded by a shim on `OSBX_HELM`
/// in one run, each with its values file), and the helm verbs run.
struct AgainstHelm {
    total: f64,
    helm: f64,
    verbs: Vec<String>,
}

fn against_helm(case: &Case, args: &[&str], code: i32, rounds: usize) -> AgainstHelm {
    let bin = bench_bin();
    let command = |helm: &std::path::Path| {
        let mut cmd = Command::new(&bin);
        cmd.args(args).env("OSBX_COLOR", "never");
        cmd.env("OSBX_HELM", helm).env("OSBX_CHART_CACHE", case.scratch().join("chart-cache"));
        cmd
    };
    let run = || {
        let started = Instant::now();
        let out = command(crate::charts::helm::helm()).output().unwrap();
        let took = started.elapsed().as_secs_f64();
        let (stdout, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stdout}{stderr}");
        took
    };
    // Fill the cache (the fetch is the network's cost, not osbx's).
    run();
    let total: Vec<f64> = (0..rounds).map(|_| run()).collect();

    // The helm runs it makes: a shim records each (its arguments, and a copy of the values file
    // it is given, which osbx deletes after), and they are replayed by hand.
    let log = case.scratch().join(format!("helm-runs-{}", args[0]));
    std::fs::create_dir_all(&log).unwrap();
    let shim = case.scratch().join(format!("helm-shim-{}", args[0]));
    std::fs::write(
        &shim,
        format!(
            "#!/bin/sh\nn=$(date +%s%N)-$$\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done > {log}/$n.args\nfor a in \"$@\"; do case \"$a\" in --values=*) cp \"${{a#--values=}}\" {log}/$n.values;; esac; done\nexec {helm} \"$@\"\n",
            log = log.display(),
            helm = crate::charts::helm::helm().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&shim, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    assert_eq!(command(&shim).output().unwrap().status.code(), Some(code));
    let mut runs: Vec<(Vec<String>, Option<PathBuf>)> = std::fs::read_dir(&log)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "args"))
        .map(|p| {
            let args = std::fs::read_to_string(&p).unwrap();
            let values = p.with_extension("values");
            (
                args.split('\0').filter(|a| !a.is_empty()).map(str::to_owned).collect(),
                values.is_file().then_some(values),
            )
        })
        .collect();
    runs.sort();
    let verbs: Vec<String> = runs.iter().map(|(a, _)| a.first().cloned().unwrap_or_default()).collect();
    assert!(verbs.iter().any(|v| v == "template"), "{args:?} ran helm template: {verbs:?}");
    let by_hand: Vec<f64> = (0..rounds)
        .map(|_| {
            let started = Instant::now();
            for (args, values) in &runs {
                let mut args = args.clone();
                if let (Some(i), Some(values)) = (args.iter().position(|a| a.starts_with("--values=")), values) {
                    args[i] = format!("--values={}", values.display());
                }
                let out = helm_command(case.scratch()).args(&args).output().unwrap();
                assert!(out.status.success(), "helm {args:?}: {:?}", outputs(&out));
            }
            started.elapsed().as_secs_f64()
        })
        .collect();
    AgainstHelm { total: median(total), helm: median(by_hand), verbs }
}

impl AgainstHelm {
    /// osbx's own time: the total less the helm runs it made.
    fn own(&self) -> f64 {
        (self.total - self.helm).max(0.0)
    }

    /// `osbx … N ms, the K helm runs it makes (verbs) replayed by hand M ms, osbx's own …`.
    fn line(&self, what: &str) -> String {
        let own = self.own();
        format!(
            "{what} {:.0} ms, the {} helm runs it makes ({}) replayed by hand {:.0} ms, osbx's own {:.0} ms = {:.0}% of the total (target < 20%)",
            self.total * 1000.0,
            self.verbs.len(),
            self.verbs.join(", "),
            self.helm * 1000.0,
            own * 1000.0,
            own / self.total * 100.0
        )
    }
}

/// The homelab profile with its OpenSandbox chart from the loopback git server.
fn homelab() -> (Case, Value) {
    let s = sources();
    let text = std::fs::read_to_string(root().join("profiles/homelab.yaml")).unwrap();
    let mut p: Value = serde_saphyr::from_str(&text).unwrap();
    p["opensandbox"]["source"]["url"] = json!(s.opensandbox_git);
    let case = Case::new(Some(s), &p);
    (case, p)
}

#[test]
fn bench_a_review_costs_little_beyond_helm() {
    let (case, mut p) = homelab();
    p["pools"]["items"][0]["capacity"]["poolMax"] = json!(9);
    case.set_profile(&p);
    let profile = case.profile_path().display().to_string();
    let repo = case.repo.display().to_string();
    let diff = ["diff", "--base=HEAD", "-o", "json", "-p", &profile, "--repo", &repo];
    let rounds = 5;
    let review = against_helm(&case, &diff, 1, rounds);
    let flux_only: Vec<f64> = (0..rounds)
        .map(|_| {
            let bin = bench_bin();
            let started = Instant::now();
            let out = Command::new(bin).args(diff).arg("--no-charts").output().unwrap();
            assert_eq!(out.status.code(), Some(1), "{:?}", outputs(&out));
            started.elapsed().as_secs_f64()
        })
        .collect();
    #[allow(clippy::print_stderr)]
    {
        eprintln!("review-bench: {}", review.line("homelab with its chart: osbx diff --base"));
        eprintln!(
            "review-bench: homelab, Flux objects only (--no-charts): {:.0} ms (target < 50 ms)",
            median(flux_only) * 1000.0
        );
    }
}

/// `osbx images` of the homelab profile with its chart (cache warm) against the helm runs it
/// makes, and of a fleet of it (every tenth cluster its own pool image), with and without the
/// charts: 1,000 clusters for bench/run (`OSBX_BENCH_BIN`, the release build), 100 in the suite.
#[test]
fn bench_images_costs_little_beyond_helm() {
    let (case, p) = homelab();
    let profile = case.profile_path().display().to_string();
    let rounds = 5;
    let one = against_helm(&case, &["images", "-o", "json", "-p", &profile], 0, rounds);
    let clusters = if std::env::var_os("OSBX_BENCH_BIN").is_some() { 1000 } else { 100 };
    let members: Vec<Value> = (0..clusters)
        .map(|i| {
            let mut m = json!({"name": format!("c{i:04}")});
            if i % 10 == 0 {
                m["overrides"] =
                    json!({"pools": {"defaults": {"image": format!("registry.example/c{i:04}/code-interpreter:v1")}}});
            }
            m
        })
        .collect();
    let fleet = json!({"apiVersion": "osbx.dev/v1alpha1", "kind": "Fleet", "metadata": {"name": "bench"}, "base": "profile.yaml", "clusters": members});
    let path = case.repo.join("fleet.yaml");
    std::fs::write(&path, serde_json::to_string(&fleet).unwrap()).unwrap();
    let _ = p;
    let fleet_path = path.display().to_string();
    let fleet_charts = against_helm(&case, &["images", "-o", "json", "--fleet", &fleet_path], 0, 1);
    let bin = bench_bin();
    let started = Instant::now();
    let out = Command::new(bin).args(["images", "-o", "json", "--no-charts", "--fleet", &fleet_path]).output().unwrap();
    let no_charts = started.elapsed().as_secs_f64();
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let listed: Value = serde_json::from_str(&stdout).unwrap();
    assert!(listed.as_object().unwrap().len() >= clusters / 10, "every tenth cluster's own image is listed");
    #[allow(clippy::print_stderr)]
    {
        eprintln!("images-bench: {}", one.line("homelab with its chart: osbx images"));
        // A fleet shares its charts: helm runs once per chart and Kubernetes version, and the
        // rest is rendering each cluster, which the run without charts measures alone.
        let own = fleet_charts.own();
        let n = f64::from(u32::try_from(clusters).unwrap());
        eprintln!(
            "images-bench: {clusters} clusters of homelab with its chart: osbx images --fleet {:.0} ms = the {} helm runs it makes ({}) replayed by hand {:.0} ms + osbx's own {:.0} ms, {:.2} ms a cluster (target < 1 ms)",
            fleet_charts.total * 1000.0,
            fleet_charts.verbs.len(),
            fleet_charts.verbs.join(", "),
            fleet_charts.helm * 1000.0,
            own * 1000.0,
            own * 1000.0 / n
        );
        eprintln!(
            "images-bench: {clusters} clusters of homelab, no charts: osbx images --fleet --no-charts {:.0} ms, {:.2} ms a cluster",
            no_charts * 1000.0,
            no_charts * 1000.0 / n
        );
    }
}
