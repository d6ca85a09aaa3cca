//! Verify results as a table, JSON or JUnit XML.

use std::fmt::Write as _;

use serde_json::json;

use super::{CheckResult, Outcome, all_passed};

fn seconds(ms: u64) -> f64 {
    std::time::Duration::from_millis(ms).as_secs_f64()
}

/// The summary line: `Ready` only when every check passed (skips allowed).
#[must_use]
pub(crate) fn summary(results: &[CheckResult]) -> String {
    if all_passed(results) {
        return "Ready".to_owned();
    }
    let count = |o| results.iter().filter(|r| r.verdict.outcome == o).count();
    format!(
        "Not ready: {} failed, {} errors, {} passed",
        count(Outcome::Fail),
        count(Outcome::Error),
        count(Outcome::Pass)
    )
}

/// Table rows: check, result, duration, evidence; then the diagnosis and fix of each failure.
#[must_use]
pub(crate) fn table(results: &[CheckResult]) -> Vec<String> {
    let id_w = results.iter().map(|r| r.id.len()).max().unwrap_or(5).max(5);
    let mut lines = vec![format!("{:<id_w$}  {:<6} {:>8}  EVIDENCE", "CHECK", "RESULT", "TIME")];
    for r in results {
        lines.push(format!(
            "{:<id_w$}  {:<6} {:>7.1}s  {}",
            r.id,
            r.verdict.outcome.to_string(),
            seconds(r.duration_ms),
            r.verdict.evidence
        ));
        if let Some(d) = &r.verdict.diagnosis {
            lines.push(format!("{:<id_w$}    why: {d}", ""));
        }
        if let Some(f) = &r.verdict.fix {
            lines.push(format!("{:<id_w$}    fix: {f}", ""));
        }
    }
    lines
}

/// The requests a run made.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(crate) struct Requests {
    /// To the Kubernetes API (the Lifecycle API through the service proxy included).
    pub api: crate::cluster::RequestCounts,
    /// To the Lifecycle API at `--server-url` (absent through the service proxy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<crate::cluster::RequestCounts>,
}

/// The JSON report.
#[must_use]
pub(crate) fn json(run_id: &str, results: &[CheckResult], requests: &Requests) -> serde_json::Value {
    json!({"run": run_id, "ready": all_passed(results), "summary": summary(results), "checks": results,
           "requests": requests})
}

fn xml(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .map(|c| match c {
            '&' => "&amp;".to_owned(),
            '<' => "&lt;".to_owned(),
            '>' => "&gt;".to_owned(),
            '"' => "&quot;".to_owned(),
            '\'' => "&apos;".to_owned(),
            c => c.to_string(),
        })
        .collect()
}

/// JUnit XML: one testcase per check; the failure message is the diagnosis.
#[must_use]
pub(crate) fn junit(results: &[CheckResult]) -> String {
    let count = |o| results.iter().filter(|r| r.verdict.outcome == o).count();
    let total: f64 = results.iter().map(|r| seconds(r.duration_ms)).sum();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuite name=\"osbx verify\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{total:.3}\">",
        results.len(),
        count(Outcome::Fail),
        count(Outcome::Error),
        count(Outcome::Skip)
    );
    for r in results {
        let _ = write!(
            out,
            "  <testcase classname=\"osbx.verify\" name=\"{}\" time=\"{:.3}\">",
            xml(&r.id),
            seconds(r.duration_ms)
        );
        if !r.verdict.measurements.is_empty() {
            out.push_str("<properties>");
            for (name, value) in &r.verdict.measurements {
                let _ = write!(out, "<property name=\"{}\" value=\"{value}\"/>", xml(name));
            }
            out.push_str("</properties>");
        }
        let detail = format!(
            "{}{}",
            r.verdict.evidence,
            r.verdict.fix.as_ref().map(|f| format!("\nfix: {f}")).unwrap_or_default()
        );
        match r.verdict.outcome {
            Outcome::Pass => {
                let _ = write!(out, "<system-out>{}</system-out>", xml(&r.verdict.evidence));
            }
            Outcome::Skip => {
                let _ = write!(out, "<skipped message=\"{}\"/>", xml(&r.verdict.evidence));
            }
            Outcome::Fail | Outcome::Error => {
                let tag = if r.verdict.outcome == Outcome::Fail { "failure" } else { "error" };
                let msg = r.verdict.diagnosis.clone().unwrap_or_default();
                let _ = write!(out, "<{tag} message=\"{}\">{}</{tag}>", xml(&msg), xml(&detail));
            }
        }
        out.push_str("</testcase>\n");
    }
    out.push_str("</testsuite>\n");
    out
}
