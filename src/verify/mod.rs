//! `osbx verify`: the acceptance checks, with evidence, before anyone calls the platform Ready.
//!
//! Every check has a stable id and returns a verdict: PASS, FAIL (the platform is wrong; the
//! diagnosis says why and the fix when known), ERROR (the check could not reach a verdict, e.g.
//! the Workload API is unreachable: never a pass) or SKIP (not applicable to this profile).
//! Checks run concurrently, each under its own timeout. Probe pods live in one labelled namespace
//! per run; everything a run creates is deleted at the end (also on Ctrl-C), and a run first
//! sweeps what an interrupted run left.

pub(crate) mod checks;
pub(crate) mod endpoint;
pub(crate) mod in_cluster;
pub mod probe;
pub(crate) mod report;
mod scripts;
pub(crate) mod session;
pub(crate) mod settings;
pub(crate) mod sweep;

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::cluster::operation::Operation;
use crate::profile::Profile;
use crate::progress::{CheckState, Progress};

pub use endpoint::Endpoint;
pub use settings::{ApiKeyValue, Reach, Selection, Settings};

/// The verdict of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Outcome {
    /// The platform is as it must be.
    Pass,
    /// The platform is wrong.
    Fail,
    /// The check could not reach a verdict.
    Error,
    /// Not applicable to this profile.
    Skip,
}

impl Outcome {
    /// How bad it is, for the one outcome of several: a failure over an error over a pass over
    /// a skip.
    #[must_use]
    pub fn severity(self) -> u8 {
        match self {
            Outcome::Skip => 0,
            Outcome::Pass => 1,
            Outcome::Error => 2,
            Outcome::Fail => 3,
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Outcome::Pass => "PASS",
            Outcome::Fail => "FAIL",
            Outcome::Error => "ERROR",
            Outcome::Skip => "SKIP",
        })
    }
}

/// What a check found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    /// The verdict.
    pub outcome: Outcome,
    /// One line of evidence (what was observed).
    pub evidence: String,
    /// Why it failed, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<String>,
    /// The fix, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// Figures measured on the way, by name (`kata_build_seconds`): in the JSON report and as
    /// JUnit properties.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub measurements: std::collections::BTreeMap<String, f64>,
}

impl Verdict {
    /// A pass with evidence.
    #[must_use]
    pub fn pass(evidence: impl Into<String>) -> Self {
        Self {
            outcome: Outcome::Pass,
            evidence: evidence.into(),
            diagnosis: None,
            fix: None,
            measurements: std::collections::BTreeMap::new(),
        }
    }

    /// A failure with evidence and a diagnosis.
    #[must_use]
    pub fn fail(evidence: impl Into<String>, diagnosis: impl Into<String>) -> Self {
        Self {
            outcome: Outcome::Fail,
            evidence: evidence.into(),
            diagnosis: Some(diagnosis.into()),
            fix: None,
            measurements: std::collections::BTreeMap::new(),
        }
    }

    /// No verdict: the check itself could not run.
    #[must_use]
    pub fn error(evidence: impl Into<String>, diagnosis: impl Into<String>) -> Self {
        Self {
            outcome: Outcome::Error,
            evidence: evidence.into(),
            diagnosis: Some(diagnosis.into()),
            fix: None,
            measurements: std::collections::BTreeMap::new(),
        }
    }

    /// Not applicable.
    #[must_use]
    pub fn skip(why: impl Into<String>) -> Self {
        Self {
            outcome: Outcome::Skip,
            evidence: why.into(),
            diagnosis: None,
            fix: None,
            measurements: std::collections::BTreeMap::new(),
        }
    }

    /// Add the fix.
    #[must_use]
    pub fn with_fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }

    /// Add a measured figure.
    #[must_use]
    pub fn with_measurement(mut self, name: &str, value: f64) -> Self {
        self.measurements.insert(name.to_owned(), value);
        self
    }
}

/// A check's verdict with its id and duration.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckResult {
    /// Stable id (`kata.guest-kernel`).
    pub id: String,
    /// When it started, from the start of the run (checks run concurrently: all near 0).
    pub started_ms: u64,
    /// Wall time.
    pub duration_ms: u64,
    /// Its outcome, evidence, diagnosis and fix.
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// Everything a check may use.
pub struct Ctx {
    /// The cluster under test (the run's one client).
    pub cluster: Cluster,
    /// The profile the platform was rendered from.
    pub profile: Profile,
    /// This run.
    pub run: probe::Run,
    /// How to reach the Lifecycle API.
    pub endpoint: Endpoint,
    /// The checks the run reports on (a check with several ids does only the work of the
    /// selected ones).
    pub selection: Selection,
}

/// One or more checks that run together (e.g. the SPIFFE denial runs after the issuance).
pub trait Check: Send + Sync {
    /// The ids of the verdicts it returns, in order.
    fn ids(&self) -> Vec<String>;
    /// Longest time the check may take.
    fn timeout(&self) -> Duration {
        Duration::from_secs(300)
    }
    /// Checks (ids) whose verdicts must be in before this one starts, when they run at all: a
    /// check that changes what another one reads waits for it (a Lifecycle check's sandbox takes
    /// a pod its pool's `available` counted).
    fn after(&self) -> Vec<String> {
        Vec::new()
    }
    /// Run it; one verdict per id.
    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Vec<Verdict>>;
    /// What `run` does to the cluster for this profile and reach (nothing when it would skip):
    /// reviewed before the run starts, and granted by `osbx rbac`.
    fn operations(&self, profile: &Profile, reach: &Reach) -> Vec<Operation>;
    /// Whether its probe pods in the run's namespace use the node they run on (privileged,
    /// `hostPath` or `hostPID`: node access, which Pod Security admits only at `privileged`),
    /// for this profile.
    fn uses_the_node(&self, _profile: &Profile) -> bool {
        false
    }
    /// The images its probe pods (or what runs in them) pull, for this profile: what `osbx
    /// images` lists for the check, asked only of a check that does something
    /// ([`Check::operations`] not empty).
    fn images(&self, _profile: &Profile) -> Vec<String> {
        Vec::new()
    }
}

/// Run the selected checks concurrently, each under its own timeout, each after the checks it
/// names in [`Check::after`].
pub async fn run(
    ctx: &Ctx,
    checks: &[Box<dyn Check>],
    selection: &Selection,
    progress: &dyn Progress,
) -> Vec<CheckResult> {
    let run_start = Instant::now();
    let selected: Vec<&dyn Check> =
        checks.iter().map(AsRef::as_ref).filter(|c| c.ids().iter().any(|id| selection.selects(id))).collect();
    // One "finished" flag per selected check, raised when its verdicts are in.
    let done: Vec<(Vec<String>, tokio::sync::watch::Sender<bool>)> =
        selected.iter().map(|c| (c.ids(), tokio::sync::watch::channel(false).0)).collect();
    let runs = selected.iter().zip(&done).map(|(check, (_, finished))| async {
        let ids = check.ids();
        let label = ids.join(", ");
        for first in check.after() {
            for (_, flag) in done.iter().filter(|(other, _)| other.contains(&first)) {
                let _ = flag.subscribe().wait_for(|finished| *finished).await;
            }
        }
        progress.check(&label, &CheckState::Running);
        let start = Instant::now();
        let started_ms = millis(start.duration_since(run_start));
        let verdicts = match tokio::time::timeout(check.timeout(), check.run(ctx)).await {
            Ok(v) => v,
            Err(_) => ids
                .iter()
                .map(|_| {
                    Verdict::error(format!("no verdict after {}s", check.timeout().as_secs()), "the check timed out")
                })
                .collect(),
        };
        let elapsed = millis(start.elapsed());
        let results: Vec<CheckResult> = ids
            .into_iter()
            .zip(verdicts)
            .filter(|(id, _)| selection.selects(id))
            .map(|(id, verdict)| CheckResult { id, started_ms, duration_ms: elapsed, verdict })
            .collect();
        let worst = results.iter().map(|r| r.verdict.outcome).max_by_key(|o| o.severity()).unwrap_or(Outcome::Skip);
        progress.check(
            &label,
            &CheckState::Finished { outcome: worst.to_string(), good: matches!(worst, Outcome::Pass | Outcome::Skip) },
        );
        finished.send_replace(true);
        results
    });
    let mut results: Vec<CheckResult> = futures::future::join_all(runs).await.into_iter().flatten().collect();
    let order: Vec<String> = checks.iter().flat_map(|c| c.ids()).collect();
    results.sort_by_key(|r| order.iter().position(|id| *id == r.id));
    results
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Whether every result passed (skips allowed).
#[must_use]
pub(crate) fn all_passed(results: &[CheckResult]) -> bool {
    results.iter().all(|r| matches!(r.verdict.outcome, Outcome::Pass | Outcome::Skip))
}
