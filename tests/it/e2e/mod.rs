//! End to end: `osbx render --commit`, `osbx apply`, `osbx diff` and `osbx verify` against a
//! plane with the real controllers (`tests/cluster/up --with-controllers`): the Flux source,
//! kustomize and helm controllers reconcile the pushed render from a git server on loopback,
//! helm-controller installs the real upstream OpenSandbox chart (from `../shared/charts/`, served
//! as a git repository), kube-controller-manager, kube-scheduler and kwok run its Deployments
//! and the Pools' pods on a fake Node, the OpenSandbox controller fills the Pools and allocates
//! sandboxes, and the real OpenSandbox server answers the Lifecycle API. One part is played: the
//! OpenSandbox controller, which no package registry serves (`tests/played/opensandbox.rs`, run
//! as a process by `up --with-controllers`, bound to what the real one was measured to do).
//! Otherwise the test only stands in for what is outside the platform (`flux bootstrap`,
//! kata-deploy's RuntimeClass, a Node) and reads what the controllers wrote.
//!
//! Each scenario runs on a plane of its own and prints its timings on stderr as
//! `e2e-bench: <scenario> <metric> <seconds>` lines (read by a later benchmark). Each scenario
//! takes its turn (`crate::turns`): a plane with its controllers takes about 1 GB and, measured,
//! half a core, so several scenarios run at once; the rollout scenarios share their three planes
//! and take turns among themselves.

mod acceptance;
mod chart_failure;
mod flux;
mod full_loop;
pub(crate) mod git;
mod git_changes;
mod health;
mod quota;
mod renamed;
mod rollout;
mod secrets;
mod status;
mod world;

use std::time::SystemTime;

use serde_json::Value;

/// The API key of every scenario (given to `osbx` as `OSBX_API_KEY` and to the real server);
/// no output may contain it.
const KEY: &str = "e2e-4b1c9f0e7d2a-api-key";

/// Print one timing for the benchmark.
#[allow(clippy::print_stderr)]
fn bench(scenario: &str, metric: &str, seconds: f64) {
    eprintln!("e2e-bench: {scenario} {metric} {seconds:.3}");
}

/// Seconds since the epoch of a Kubernetes timestamp (RFC 3339).
fn secs_of(ts: &Value) -> f64 {
    let t: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time =
        serde_json::from_value(ts.clone()).unwrap_or_else(|e| panic!("timestamp {ts}: {e}"));
    #[allow(clippy::cast_precision_loss)]
    let ms = t.0.as_millisecond() as f64;
    ms / 1000.0
}

fn secs_since_epoch(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs_f64()
}

/// The checks of an `osbx verify -o json` report.
fn checks(stdout: &str, stderr: &str) -> Vec<Value> {
    let report: Value = serde_json::from_str(stdout).unwrap_or_else(|e| panic!("verify JSON: {e}: {stdout}{stderr}"));
    report["checks"].as_array().unwrap_or_else(|| panic!("no checks: {report}")).clone()
}

/// The check `id` of a report.
fn check<'a>(checks: &'a [Value], id: &str) -> &'a Value {
    checks.iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("no check {id} in {checks:#?}"))
}

/// Assert the outcome of check `id`.
#[track_caller]
fn assert_outcome(checks: &[Value], id: &str, outcome: &str) {
    let c = check(checks, id);
    assert_eq!(c["outcome"], outcome, "{id}: {c:#}");
}

/// What osbx says wrongly or unhelpfully although the platform behaved: collected while a
/// scenario runs and asserted empty at its end, so one run shows all of them and every
/// functional assertion (and timing) comes first.
#[derive(Default)]
struct Findings(Vec<String>);

impl Findings {
    fn expect(&mut self, ok: bool, finding: impl FnOnce() -> String) {
        if !ok {
            self.0.push(finding());
        }
    }

    #[track_caller]
    fn assert_none(&self) {
        assert!(self.0.is_empty(), "osbx misbehaved against the real controllers:\n- {}", self.0.join("\n- "));
    }
}
