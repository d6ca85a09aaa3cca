//! What a rollout did: each wave's state, commit and changed files, each cluster's gate.

use serde::Serialize;

use super::GateOutcome;
use crate::verify::CheckResult;

/// Where a wave is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WaveState {
    /// Rolled out and verified by an earlier run, and the repository still holds it: `--resume`
    /// does not check it again.
    Done,
    /// The repository holds its render already (nothing to commit); not checked by this run.
    Committed,
    /// Not reached (by a dry run, or after a failed gate).
    Pending,
    /// Every cluster reconciled its commit and passed.
    Passed,
    /// A cluster did not reconcile in time, or failed a check.
    Failed,
}

/// One cluster of a wave, after its gate.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ClusterReport {
    /// The fleet's cluster.
    pub cluster: String,
    /// Whether it passed its gate: reconciled the commit, no check failed, and one passed (or
    /// the fleet file accepts a cluster whose checks all skipped).
    pub passed: bool,
    /// What the gate showed, as recorded: `passed`, `failed`, `no-evidence`.
    pub outcome: GateOutcome,
    /// How long Flux took to reconcile the commit, from when this cluster's wait began.
    pub reconciled_ms: Option<u64>,
    /// How long the checks took.
    pub verify_ms: Option<u64>,
    /// The requests the rollout made to this cluster, through its gate (none: not reached).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<crate::cluster::RequestCounts>,
    /// Why it did not pass: the first failing check and its evidence, or why Flux did not get
    /// there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// Every check's result.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckResult>,
}

/// Why a cluster did not pass its gate.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Failure {
    /// The failing check's id (`kata.guest-kernel`), `flux.reconcile` when Flux did not
    /// reconcile the commit in time, `gate.evidence` when every check skipped, or
    /// `acceptance.report` when no report of this wave's in-cluster run was there to trust.
    pub check: String,
    /// What was observed.
    pub evidence: String,
    /// Why, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<String>,
}

/// One wave of the rollout.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WaveReport {
    /// Its name.
    pub name: String,
    /// Its clusters.
    pub clusters: Vec<String>,
    /// Where it is.
    pub state: WaveState,
    /// The commit this run made for it (`None`: nothing to commit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The commit its clusters were gated at, where their gate records are (this run's commit
    /// for it, else the branch's HEAD then); `None` until gated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gated: Option<String>,
    /// The files it changes (in a dry run: would change).
    pub files: usize,
    /// Its clusters' gates.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<ClusterReport>,
}

/// What a rollout did.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    /// The fleet's name (`metadata.name`).
    pub fleet: String,
    /// Every wave, in order.
    pub waves: Vec<WaveReport>,
    /// Whether every wave passed (a dry run: whether there is nothing to roll out).
    pub completed: bool,
}

impl Report {
    /// The first failing cluster: wave, cluster and why.
    #[must_use]
    pub(crate) fn stopped_at(&self) -> Option<(&str, &str, &Failure)> {
        self.waves.iter().find_map(|w| {
            w.results.iter().find_map(|c| c.failure.as_ref().map(|f| (w.name.as_str(), c.cluster.as_str(), f)))
        })
    }
}

impl ClusterReport {
    /// A gate that failed before any check ran: `check` names the step.
    pub(super) fn failed(cluster: &str, check: &str, evidence: String) -> Self {
        Self {
            cluster: cluster.to_owned(),
            passed: false,
            outcome: GateOutcome::Failed,
            reconciled_ms: None,
            verify_ms: None,
            requests: None,
            failure: Some(Failure { check: check.to_owned(), evidence, diagnosis: None }),
            checks: Vec::new(),
        }
    }
}
