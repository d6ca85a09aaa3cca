//! `osbx verify --serve`'s side of Prometheus: the last acceptance run as OpenMetrics text, served
//! over HTTP/1.1 for a scraper inside the cluster.
//!
//! The verdicts' families are built anew at each run, so a check that a later run no longer has
//! disappears with it; only the run counters live for the whole process.

mod http;

use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::{EncodeLabelSet, text};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

pub(crate) use self::http::{Limits, Liveness, serve};
use crate::verify::{CheckResult, Outcome};

/// The content type of the OpenMetrics text exposition.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Each outcome with the `state` label it is exposed under.
const STATES: [(Outcome, &str); 4] =
    [(Outcome::Pass, "pass"), (Outcome::Fail, "fail"), (Outcome::Error, "error"), (Outcome::Skip, "skip")];

/// One label of a fixed set of values (`result="ready"`, `state="fail"`).
type Label = [(&'static str, &'static str); 1];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckLabels {
    check: String,
    pool: String,
}

/// The state of the last acceptance run, as metrics. The last attempt (any run) and the last
/// verdict (a run that reached verdicts) are kept apart: a run that errors refreshes the first,
/// never the second, so an erroring checker never looks fresh.
pub(crate) struct Metrics {
    /// Runs by result, since the process started.
    runs: Family<Label, Counter>,
    /// The last attempt, verdicts or not.
    attempt: Option<Attempt>,
    /// The end (unix seconds) of the last run that reached verdicts, and whether it was ready.
    verdict: Option<(f64, bool)>,
    /// The families of the last run that reached verdicts, built once per run.
    verdicts: Option<Registry>,
    /// `accept` errors the listener backed off from, since the process started.
    accept_errors: Counter,
}

/// One run, verdicts or not.
#[derive(Clone, Copy)]
struct Attempt {
    /// Its end, unix seconds.
    at: f64,
    /// Its duration, seconds.
    took: f64,
    /// It reached no verdicts.
    errored: bool,
}

impl Metrics {
    /// No run yet: the run counters at 0 and nothing else.
    pub(crate) fn new() -> Self {
        let runs = Family::default();
        for result in ["ready", "not_ready", "error"] {
            let _ = runs.get_or_create(&[("result", result)]);
        }
        Self { runs, attempt: None, verdict: None, verdicts: None, accept_errors: Counter::default() }
    }

    /// A finished run: `results` are its verdicts, `pools` the profile's pool names (a check id
    /// `<check>.<pool>` is exposed as that check and pool; other ids under pool ""), `finished`
    /// its wall-clock end, `took` its duration and `revision` the rendered revision it checked.
    pub(crate) fn record(
        &mut self,
        results: &[CheckResult],
        pools: &[String],
        finished: SystemTime,
        took: Duration,
        revision: &str,
    ) {
        let states = Family::<(CheckLabels, Label), Gauge>::default();
        let durations = Family::<CheckLabels, Gauge<f64, AtomicU64>>::default();
        for r in results {
            let check = split(&r.id, pools);
            for (outcome, state) in STATES {
                states.get_or_create(&(check.clone(), [("state", state)])).set(i64::from(r.verdict.outcome == outcome));
            }
            durations.get_or_create(&check).set(Duration::from_millis(r.duration_ms).as_secs_f64());
        }
        let ready = !results.is_empty() && crate::verify::all_passed(results);
        let mut registry = Registry::default();
        registry.register("osbx_acceptance_check", "1 for the state of a check in the last run", states);
        let help = "Wall time of a check in the last run";
        registry.register_with_unit("osbx_acceptance_check_duration", help, Unit::Seconds, durations);
        let info = Info::new(vec![("revision".to_owned(), revision.to_owned())]);
        registry.register("osbx_acceptance", "The revision the last run checked", info);
        self.verdicts = Some(registry);
        let at = self.count(if ready { "ready" } else { "not_ready" }, finished, took, false);
        self.verdict = Some((at, ready));
    }

    /// A run that could not reach verdicts at all (the cluster unreachable, preflight refused,
    /// the overall timeout): counts it and marks the last attempt errored (`ready` 0); the last
    /// verdicts and their time stay as they were.
    pub(crate) fn record_error(&mut self, finished: SystemTime, took: Duration) {
        self.count("error", finished, took, true);
    }

    /// An `accept` error of the listener that was not the client's (`EMFILE`, `ENOBUFS`, …).
    pub(crate) fn accept_error(&mut self) {
        self.accept_errors.inc();
    }

    /// Counts a run as `result` and makes it the last attempt; returns its end in unix seconds.
    fn count(&mut self, result: &'static str, finished: SystemTime, took: Duration, errored: bool) -> f64 {
        self.runs.get_or_create(&[("result", result)]).inc();
        let at = finished.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        self.attempt = Some(Attempt { at, took: took.as_secs_f64(), errored });
        at
    }

    /// The OpenMetrics text exposition (ends with `# EOF`).
    pub(crate) fn encode(&self) -> String {
        let mut registry = Registry::default();
        registry.register("osbx_acceptance_runs", "Acceptance runs by result", self.runs.clone());
        let help = "Accept errors the metrics listener backed off from (EMFILE, ENOBUFS, ...)";
        registry.register("osbx_acceptance_accept_errors", help, self.accept_errors.clone());
        if let Some(Attempt { at, took, errored }) = self.attempt {
            let help = "Unix time the last run ended, verdicts or not";
            let gauge = ConstGauge::new(at);
            registry.register_with_unit("osbx_acceptance_last_attempt_timestamp", help, Unit::Seconds, gauge);
            let help = "Duration of the last run";
            registry.register_with_unit("osbx_acceptance_run_duration", help, Unit::Seconds, ConstGauge::new(took));
            let help = "1 when the last run reached no verdicts (its checks are those of the last run that did)";
            registry.register("osbx_acceptance_last_run_error", help, ConstGauge::new(i64::from(errored)));
            let ready = !errored && self.verdict.is_some_and(|(_, ready)| ready);
            let help = "1 when the last run reached verdicts and every check passed or skipped";
            registry.register("osbx_acceptance_ready", help, ConstGauge::new(i64::from(ready)));
        }
        if let Some((at, _)) = self.verdict {
            let help = "Unix time the last run that reached verdicts ended";
            let gauge = ConstGauge::new(at);
            registry.register_with_unit("osbx_acceptance_last_verdict_timestamp", help, Unit::Seconds, gauge);
        }
        let mut text = String::new();
        text::encode_registry(&mut text, &registry)
            .and_then(|()| self.verdicts.as_ref().map_or(Ok(()), |verdicts| text::encode_registry(&mut text, verdicts)))
            .and_then(|()| text::encode_eof(&mut text))
            .expect("writing to a String cannot fail");
        text
    }
}

/// A check id as its check and pool: the longest pool name it ends with after a dot, else "".
fn split(id: &str, pools: &[String]) -> CheckLabels {
    let pooled = pools.iter().filter_map(|pool| Some((id.strip_suffix(pool.as_str())?.strip_suffix('.')?, &**pool)));
    let (check, pool) =
        pooled.filter(|(check, _)| !check.is_empty()).max_by_key(|(_, pool)| pool.len()).unwrap_or((id, ""));
    CheckLabels { check: check.to_owned(), pool: pool.to_owned() }
}

#[cfg(test)]
mod rules;
#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::Verdict;

    pub(super) fn result(id: &str, verdict: Verdict, duration_ms: u64) -> CheckResult {
        CheckResult { id: id.into(), started_ms: 0, duration_ms, verdict }
    }

    pub(super) fn first_run() -> Metrics {
        let mut metrics = Metrics::new();
        let results = [
            result("kata.guest-kernel", Verdict::pass("6.12"), 250),
            result("opensandbox.lifecycle.gpu", Verdict::fail("no pod", "quota"), 1500),
            result("opensandbox.lifecycle.default", Verdict::skip("not this profile"), 0),
        ];
        let (pools, end) = (["default".to_owned(), "gpu".to_owned()], UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        metrics.record(&results, &pools, end, Duration::from_secs(3), "rev-1");
        metrics
    }

    /// Asserts that `text` is a whole exposition with each of `lines` and no line starting with `absent`.
    fn has(text: &str, lines: &[&str], absent: &str) {
        assert!(text.ends_with("\n# EOF\n") && !text.contains(&format!("\n{absent}")), "{text}");
        for line in lines {
            assert!(text.contains(&format!("\n{line}\n")), "missing {line}: {text}");
        }
    }

    #[test]
    fn before_any_run_only_the_counters_are_exposed() {
        let text = Metrics::new().encode();
        has(&text, &[r#"osbx_acceptance_runs_total{result="ready"} 0"#], "osbx_acceptance_ready");
        has(&text, &[r#"osbx_acceptance_runs_total{result="error"} 0"#], "osbx_acceptance_check");
        has(&text, &["osbx_acceptance_accept_errors_total 0"], "osbx_acceptance_info");
        assert_eq!(text.lines().filter(|line| !line.starts_with('#')).count(), 4, "{text}");
    }

    #[test]
    fn a_run_exposes_each_check_state_its_pool_and_readiness() {
        let lines = [
            r#"osbx_acceptance_check{check="opensandbox.lifecycle",pool="gpu",state="pass"} 0"#,
            r#"osbx_acceptance_check{check="opensandbox.lifecycle",pool="gpu",state="fail"} 1"#,
            r#"osbx_acceptance_check{check="opensandbox.lifecycle",pool="gpu",state="error"} 0"#,
            r#"osbx_acceptance_check{check="opensandbox.lifecycle",pool="gpu",state="skip"} 0"#,
            r#"osbx_acceptance_check{check="opensandbox.lifecycle",pool="default",state="skip"} 1"#,
            r#"osbx_acceptance_check{check="kata.guest-kernel",pool="",state="pass"} 1"#,
            r#"osbx_acceptance_check_duration_seconds{check="opensandbox.lifecycle",pool="gpu"} 1.5"#,
            "# TYPE osbx_acceptance_check gauge",
            "osbx_acceptance_ready 0",
            "osbx_acceptance_last_attempt_timestamp_seconds 1700000000.0",
            "osbx_acceptance_last_verdict_timestamp_seconds 1700000000.0",
            "osbx_acceptance_last_run_error 0",
            "osbx_acceptance_run_duration_seconds 3.0",
            r#"osbx_acceptance_runs_total{result="not_ready"} 1"#,
            r#"osbx_acceptance_info{revision="rev-1"} 1"#,
        ];
        let text = first_run().encode();
        has(&text, &lines, "osbx_acceptance_check{check=\"opensandbox.lifecycle.");
        assert_eq!(text.matches("\nosbx_acceptance_check{").count(), 12, "{text}");
    }

    #[test]
    fn a_later_run_replaces_the_checks_and_an_error_keeps_them_but_is_never_fresh_or_ready() {
        let mut metrics = first_run();
        let end = UNIX_EPOCH + Duration::from_secs(1_700_000_060);
        let results = [result("kata.guest-kernel", Verdict::pass("6.12"), 100)];
        metrics.record(&results, &["default".to_owned()], end, Duration::from_secs(1), "rev-2");
        let ready = [
            "osbx_acceptance_ready 1",
            "osbx_acceptance_last_run_error 0",
            "osbx_acceptance_last_verdict_timestamp_seconds 1700000060.0",
        ];
        has(&metrics.encode(), &ready, "osbx_acceptance_check{check=\"opensandbox");
        metrics.record_error(end + Duration::from_secs(60), Duration::from_millis(500));
        let lines = [
            r#"osbx_acceptance_check{check="kata.guest-kernel",pool="",state="pass"} 1"#,
            "osbx_acceptance_ready 0",
            "osbx_acceptance_last_run_error 1",
            "osbx_acceptance_last_attempt_timestamp_seconds 1700000120.0",
            "osbx_acceptance_last_verdict_timestamp_seconds 1700000060.0",
            "osbx_acceptance_run_duration_seconds 0.5",
            r#"osbx_acceptance_runs_total{result="error"} 1"#,
            r#"osbx_acceptance_info{revision="rev-2"} 1"#,
        ];
        has(&metrics.encode(), &lines, "osbx_acceptance_check{check=\"opensandbox");
        // The next run that reaches verdicts clears the error and is the verdict again.
        metrics.record(&results, &["default".to_owned()], end + Duration::from_secs(180), Duration::ZERO, "rev-2");
        let lines = [
            "osbx_acceptance_ready 1",
            "osbx_acceptance_last_run_error 0",
            "osbx_acceptance_last_verdict_timestamp_seconds 1700000240.0",
        ];
        has(&metrics.encode(), &lines, "osbx_acceptance_check{check=\"opensandbox");
    }

    #[test]
    fn an_error_before_any_verdict_has_no_verdict_time() {
        let mut metrics = Metrics::new();
        metrics.record_error(UNIX_EPOCH + Duration::from_secs(1_700_000_000), Duration::from_secs(2));
        let lines = [
            "osbx_acceptance_ready 0",
            "osbx_acceptance_last_run_error 1",
            "osbx_acceptance_last_attempt_timestamp_seconds 1700000000.0",
        ];
        has(&metrics.encode(), &lines, "osbx_acceptance_last_verdict_timestamp_seconds");
    }
}
