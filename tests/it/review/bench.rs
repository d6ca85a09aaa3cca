//! What a review costs beyond helm (printed as `review-bench:` lines for bench/run; no timing is
//! asserted here): the homelab profile, its OpenSandbox chart fetched once into the cache, then
//! `osbx diff --base` with the charts expanded against `helm template` of the same chart with the
//! same values run by hand (once per side, as the review runs it), and the Flux-object-only review
//! (`--no-charts`). `OSBX_BENCH_BIN` names the osbx to time (bench/run: the release build).

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
    let chart: PathBuf = std::fs::read_dir(case.scratch().join("chart-cache/git"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("kubernetes/charts/opensandbox/Chart.yaml").is_file())
        .expect("the cached chart")
        .join("kubernetes/charts/opensandbox");
    assert!(r["helm"].is_string(), "{r}");
    let rounds = 5;
    let with_charts: Vec<f64> = (0..rounds).map(|_| review(&[]).0).collect();
    let flux_only: Vec<f64> = (0..rounds).map(|_| review(&["--no-charts"]).0).collect();

    // helm by hand: the same chart and values, once per side.
    let values = case.scratch().join("values.yaml");
    // The values ConfigMap the HelmRelease reads (homelab keeps no inline values).
    let cm = std::fs::read_to_string(case.repo.join("platform/sandbox-opensandbox/values.yaml")).unwrap();
    let doc: Value = serde_saphyr::from_str(&cm).unwrap();
    std::fs::write(&values, doc["data"]["values.yaml"].as_str().unwrap()).unwrap();
    let by_hand: Vec<f64> = (0..rounds)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..2 {
                let out = helm_command(case.scratch())
                    .args(["template", "opensandbox"])
                    .arg(&chart)
                    .args(["--namespace", "opensandbox-system", "--kube-version", "1.36", "--include-crds", "--values"])
                    .arg(&values)
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{:?}", outputs(&out));
            }
            started.elapsed().as_secs_f64()
        })
        .collect();
    let (total, helm, flux) = (median(with_charts), median(by_hand), median(flux_only));
    let own = (total - helm).max(0.0);
    #[allow(clippy::print_stderr)]
    {
        eprintln!(
            "review-bench: homelab with its chart: osbx diff --base {:.0} ms, helm template by hand (base + head) {:.0} ms, osbx's own {:.0} ms = {:.0}% of the total (target < 20%; osbx templates a chart once when both sides pass it the same values)",
            total * 1000.0,
            helm * 1000.0,
            own * 1000.0,
            own / total * 100.0
        );
        eprintln!("review-bench: homelab, Flux objects only (--no-charts): {:.0} ms (target < 50 ms)", flux * 1000.0);
    }
}
