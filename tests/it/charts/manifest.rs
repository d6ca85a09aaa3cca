//! The objects of a `helm template` output, and what the checks look up in them.

use serde_json::Value;

use super::Finding;
use super::cases::Release;
use super::helm::{self, Run};

/// The objects of a render (YAML 1.1 octals like `0644` read as helm's Go YAML reads them).
pub fn objects(run: &Run) -> Result<Vec<Value>, String> {
    let options = serde_saphyr::options! { legacy_octal_numbers: true };
    let docs: Vec<Value> = serde_saphyr::from_str_multiple_with_options(&run.stdout, options)
        .map_err(|e| format!("helm's output is not YAML: {e}"))?;
    Ok(docs.into_iter().filter(Value::is_object).collect())
}

/// A release's unmodified render and its objects, or why there is none (unmapped chart,
/// unresolvable values, helm failure).
pub struct Baseline {
    /// The release.
    pub release: &'static Release,
    /// The shared chart.
    pub chart: &'static str,
    /// helm's output.
    pub run: std::sync::Arc<Run>,
    /// The parsed objects.
    pub objects: Vec<Value>,
}

/// The baselines of every release (rendered in parallel, cached), and a finding per release that
/// has none.
pub fn baselines() -> (Vec<Baseline>, Vec<(&'static Release, Finding)>) {
    let releases = super::cases::releases();
    let mut problems = Vec::new();
    let mut wanted = Vec::new();
    for r in releases {
        match r.job() {
            Ok(job) => wanted.push((r, job)),
            Err(why) => problems.push((r, r.finding(&format!("not checked: {why}")))),
        }
    }
    let jobs: Vec<_> = wanted.iter().map(|(_, j)| j.clone()).collect();
    let runs = helm::template_all(&jobs);
    let mut out = Vec::new();
    for ((release, job), run) in wanted.into_iter().zip(runs) {
        if !run.ok {
            let why = format!("chart {}: not checked: helm template failed: {}", job.chart, run.stderr.trim());
            problems.push((release, release.finding(&why)));
            continue;
        }
        match objects(&run) {
            Ok(objects) => out.push(Baseline { release, chart: job.chart, run, objects }),
            Err(why) => problems.push((release, release.finding(&format!("chart {}: not checked: {why}", job.chart)))),
        }
    }
    (out, problems)
}

impl Baseline {
    /// The rendered objects of `kind`.
    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects.iter().filter(move |o| o["kind"] == kind)
    }

    /// The rendered object `kind`/`name`.
    pub fn find(&self, kind: &str, name: &str) -> Option<&Value> {
        self.objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
    }

    /// The namespace an object of this render lands in (helm puts namespaced objects without
    /// one into the release namespace).
    pub fn namespace_of<'a>(&'a self, object: &'a Value) -> &'a str {
        object["metadata"]["namespace"].as_str().unwrap_or(&self.release.namespace)
    }
}

/// `kind/name` (with the namespace when it has one) for messages.
pub fn describe(object: &Value, namespace: Option<&str>) -> String {
    let kind = object["kind"].as_str().unwrap_or("?");
    let name = object["metadata"]["name"].as_str().unwrap_or("?");
    match namespace {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}
