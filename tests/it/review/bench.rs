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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn bench_a_review_costs_little_beyond_helm() {
    let s = sources();
    let text = std::fs::read_to_string(root().join("profiles/homelab.yaml")).unwrap();
    let mut p: Value = serde_saphyr::from_str(&text).unwrap();
    p["opensandbox"]["source"]["url"] = json!(s.opensandbox_git);
    let case = Case::new(Some(s.clone()), &p);
    p["pools"]["items"][0]["capacity"]["poolMax"] = json!(9);
    case.set_profile(&p);
    let bin = std::env::var_os("OSBX_BENCH_BIN").map_or_else(|| assert_cmd::cargo::cargo_bin("osbx"), PathBuf::from);
    let review = |args: &[&str]| -> (f64, Value) {
        let mut cmd = Command::new(&bin);
        cmd.args(["diff", "--base=HEAD", "-o", "json", "-p"]).arg(case.profile_path()).arg("--repo").arg(&case.repo);
        cmd.args(args).env("OSBX_COLOR", "never");
        cmd.env("OSBX_HELM", crate::charts::helm::helm()).env("OSBX_CHART_CACHE", case.scratch().join("chart-cache"));
        let started = Instant::now();
        let out = cmd.output().unwrap();
        let took = started.elapsed().as_secs_f64();
        let (stdout, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
        (took, serde_json::from_str(&stdout).unwrap())
    };
    // Fill the cache (the fetch is the network's cost, not the review's).
    let (_, r) = review(&[]);
    assert!(r["helm"].is_string(), "{r}");
    let rounds = 5;
    let with_charts: Vec<f64> = (0..rounds).map(|_| review(&[]).0).collect();
    let flux_only: Vec<f64> = (0..rounds).map(|_| review(&["--no-charts"]).0).collect();

    // The helm runs the review makes: a shim records each (its arguments, and a copy of the
    // values file it is given, which osbx deletes after), and they are replayed by hand.
    let log = case.scratch().join("helm-runs");
    std::fs::create_dir_all(&log).unwrap();
    let shim = case.scratch().join("helm-shim");
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
    let mut cmd = Command::new(&bin);
    cmd.args(["diff", "--base=HEAD", "-o", "json", "-p"]).arg(case.profile_path()).arg("--repo").arg(&case.repo);
    cmd.env("OSBX_HELM", &shim).env("OSBX_CHART_CACHE", case.scratch().join("chart-cache"));
    assert_eq!(cmd.output().unwrap().status.code(), Some(1));
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
    assert!(verbs.iter().any(|v| v == "template"), "the review ran helm template: {verbs:?}");
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
    let (total, helm, flux) = (median(with_charts), median(by_hand), median(flux_only));
    let own = (total - helm).max(0.0);
    #[allow(clippy::print_stderr)]
    {
        eprintln!(
            "review-bench: homelab with its chart: osbx diff --base {:.0} ms, the {} helm runs it makes ({}) replayed by hand {:.0} ms, osbx's own {:.0} ms = {:.0}% of the total (target < 20%)",
            total * 1000.0,
            runs.len(),
            verbs.join(", "),
            helm * 1000.0,
            own * 1000.0,
            own / total * 100.0
        );
        eprintln!("review-bench: homelab, Flux objects only (--no-charts): {:.0} ms (target < 50 ms)", flux * 1000.0);
    }
}
