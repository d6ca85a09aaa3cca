//! docs/verify.md's alert rules, evaluated by Prometheus' own `promtool test rules` (Debian's
//! `prometheus` package, unpacked by `tests/cluster/debs`) against the exposition [`Metrics`]
//! serves, run after run: a healthy checker, one whose runs error, one that stopped running, one
//! whose checks fail, one that never reached a verdict. The rules are read from the doc as they
//! are written there.
//!
//! Each scenario is a timeline of runs (the minute each ends, in promtool's clock, which starts
//! at the unix epoch); the metrics osbx serves after each run are what a scraper reads until the
//! next, turned into promtool's input series one sample a minute (a label with an empty value is
//! left out, as Prometheus drops it when it scrapes).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};

use super::Metrics;
use super::tests::result;
use crate::verify::Verdict;

/// A run of a scenario: the minute it ends and whether it reached verdicts (`Some(passed)`).
type Run = (u64, Option<bool>);

/// An alert promtool is to see: its name, and its labels and annotations.
type Alert = (String, Value);

/// The rules block of docs/verify.md (the YAML after "alert rules"), as written.
fn doc_rules() -> String {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/verify.md")).unwrap();
    let start = doc.find("```yaml\ngroups:\n").expect("docs/verify.md has the alert rules") + "```yaml\n".len();
    let end = doc[start..].find("```").expect("the end of the rules") + start;
    doc[start..end].to_owned()
}

/// The metrics served after each run of `runs`: `(minute, exposition)`.
fn served(runs: &[Run]) -> Vec<(u64, String)> {
    let mut metrics = Metrics::new();
    let pools = ["gpu".to_owned()];
    runs.iter()
        .map(|&(minute, verdict)| {
            let end = UNIX_EPOCH + Duration::from_secs(minute * 60);
            match verdict {
                Some(passed) => {
                    let lifecycle = if passed { Verdict::pass("created") } else { Verdict::fail("no pod", "quota") };
                    let results = [
                        result("nodes.ready", Verdict::pass("1 node"), 10),
                        result("opensandbox.lifecycle.gpu", lifecycle, 900),
                    ];
                    metrics.record(&results, &pools, end, Duration::from_secs(5), "rev-1");
                }
                None => metrics.record_error(end, Duration::from_secs(5)),
            }
            (minute, metrics.encode())
        })
        .collect()
}

/// `name{label="value",…}` and its value, for each sample of an exposition.
fn samples(text: &str) -> Vec<(String, String)> {
    let label = regex::Regex::new(r#"(\w+)="([^"]*)""#).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            let kept: Vec<String> = label
                .captures_iter(labels)
                .filter(|c| !c[2].is_empty())
                .map(|c| format!("{}=\"{}\"", &c[1], &c[2]))
                .collect();
            (format!("{name}{{{}}}", kept.join(",")), value.to_owned())
        })
        .collect()
}

/// promtool's input series for `runs` over `minutes` minutes: each series' value at each minute
/// from the last run ended by then (`_`: not served).
fn input_series(runs: &[Run], minutes: u64) -> Vec<Value> {
    let snapshots: Vec<(u64, BTreeMap<String, String>)> =
        served(runs).into_iter().map(|(m, text)| (m, samples(&text).into_iter().collect())).collect();
    let names: std::collections::BTreeSet<&String> = snapshots.iter().flat_map(|(_, s)| s.keys()).collect();
    names
        .into_iter()
        .map(|name| {
            let values: Vec<&str> = (0..=minutes)
                .map(|minute| {
                    let now = snapshots.iter().rev().find(|(m, _)| *m <= minute);
                    now.and_then(|(_, s)| s.get(name)).map_or("_", String::as_str)
                })
                .collect();
            json!({"series": name, "values": values.join(" ")})
        })
        .collect()
}

/// An alert rule of the doc: its name, expression, labels and annotations.
struct Rule {
    alert: String,
    expr: String,
    labels: Value,
    annotations: Value,
}

fn rules(yaml: &str) -> Vec<Rule> {
    let doc: Value = serde_saphyr::from_str(yaml).unwrap();
    doc["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .map(|r| Rule {
            alert: r["alert"].as_str().unwrap().to_owned(),
            expr: r["expr"].as_str().unwrap().to_owned(),
            labels: r.get("labels").cloned().unwrap_or_else(|| json!({})),
            annotations: r.get("annotations").cloned().unwrap_or_else(|| json!({})),
        })
        .collect()
}

/// The alert `rule` raises for a series with `labels`: its name, and its labels and annotations
/// as promtool expects them (`{{ $labels.x }}` expanded, "" for a label the series lacks).
fn alert(rule: &Rule, labels: &[(&str, &str)]) -> Alert {
    let mut exp = rule.labels.clone();
    for (k, v) in labels {
        exp[*k] = json!(v);
    }
    let template = regex::Regex::new(r"\{\{ \$labels\.(\w+) \}\}").unwrap();
    let annotations: serde_json::Map<String, Value> = rule
        .annotations
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let text = template.replace_all(v.as_str().unwrap(), |c: &regex::Captures<'_>| {
                labels.iter().find(|(k, _)| *k == &c[1]).map_or("", |(_, v)| v).to_owned()
            });
            (k.clone(), json!(text))
        })
        .collect();
    (rule.alert.clone(), json!({"exp_labels": exp, "exp_annotations": annotations}))
}

/// Prometheus' `promtool` (Debian's package, through `tests/cluster/debs`).
fn promtool() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(root.join("tests/cluster/debs")).arg("prometheus").output().unwrap();
    assert!(out.status.success(), "tests/cluster/debs prometheus: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()).join("prometheus/usr/bin/promtool")
}

#[test]
fn the_alert_rules_in_docs_verify_md_fire_on_errors_and_old_verdicts_and_stay_silent_when_healthy() {
    let yaml = doc_rules();
    let rules = rules(&yaml);
    let rule = |name: &str| rules.iter().find(|r| r.alert == name).unwrap_or_else(|| panic!("no rule {name}"));
    // Every metric a rule reads is one osbx serves.
    let everything = served(&[(10, Some(false)), (25, None)]).into_iter().map(|(_, t)| t).collect::<String>();
    let name = regex::Regex::new(r"osbx_[a-z_]+").unwrap();
    for r in &rules {
        for m in name.find_iter(&r.expr) {
            assert!(everything.contains(&format!("\n{}", m.as_str())), "{}: {} is not served", r.alert, m.as_str());
        }
    }
    let (failing, erroring, stale, no_verdict) = (
        rule("SandboxAcceptanceFailing"),
        rule("SandboxAcceptanceErroring"),
        rule("SandboxAcceptanceStale"),
        rule("SandboxAcceptanceNoVerdict"),
    );
    let failed = [("check", "opensandbox.lifecycle"), ("pool", "gpu"), ("state", "fail")];
    // (scenario, its runs, the minute evaluated, the alerts firing then; every other rule silent)
    let scenarios: [(&str, &[Run], u64, Vec<Alert>); 7] = [
        ("healthy", &[(10, Some(true)), (25, Some(true)), (40, Some(true)), (55, Some(true))], 60, vec![]),
        ("a run errors", &[(10, Some(true)), (25, None)], 30, vec![alert(erroring, &[])]),
        ("runs go on erroring", &[(10, Some(true)), (25, None), (40, None), (55, None)], 60, {
            vec![alert(erroring, &[]), alert(stale, &[])]
        }),
        ("the runs stopped, the verdict young", &[(10, Some(true))], 50, vec![]),
        ("the runs stopped, the verdict old", &[(10, Some(true))], 60, vec![alert(stale, &[])]),
        ("a check fails", &[(10, Some(false)), (25, Some(false)), (40, Some(false))], 41, {
            vec![alert(failing, &failed)]
        }),
        ("never a verdict", &[(10, None), (25, None), (40, None), (55, None)], 56, {
            vec![alert(erroring, &[]), alert(no_verdict, &[])]
        }),
    ];
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.yaml"), &yaml).unwrap();
    let tests: Vec<Value> = scenarios
        .iter()
        .map(|(scenario, runs, minute, firing)| {
            let expected = rules.iter().map(|r| {
                let exp: Vec<&Value> = firing.iter().filter(|(name, _)| *name == r.alert).map(|(_, a)| a).collect();
                json!({"eval_time": format!("{minute}m"), "alertname": r.alert, "exp_alerts": exp})
            });
            json!({"name": scenario, "interval": "1m", "input_series": input_series(runs, minute + 1),
                   "alert_rule_test": expected.collect::<Vec<_>>()})
        })
        .collect();
    let test = json!({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests});
    std::fs::write(dir.path().join("test.yaml"), serde_json::to_string_pretty(&test).unwrap()).unwrap();
    let out =
        std::process::Command::new(promtool()).args(["test", "rules", "test.yaml"]).current_dir(&dir).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.contains("SUCCESS"), "promtool test rules:\n{said}\n{test:#}");
}
