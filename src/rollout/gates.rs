//! Each cluster's gate outcome, recorded durably in the repository: a git note on the commit the
//! gate ran at, in the notes ref [`NOTES`], pushed with the branch when the rollout pushes.
//!
//! A note holds a YAML list of gate records, one per fleet and cluster gated at that commit (a
//! later gate of the same cluster at the same commit replaces its record): the fleet, wave and
//! cluster, the outcome (`passed`, `failed`, `no-evidence`), the commit, the time, every check
//! run with its outcome, and the check that failed. `git notes --ref osbx-rollout show <commit>`
//! prints it.
//!
//! A cluster's newest record is the first found walking HEAD's first-parent line back from HEAD.
//! It shows the cluster passed for a run when its outcome is `passed` (or `no-evidence` and the
//! fleet file accepts that), it ran every check the run selects ([`Gate::holds`]), and the
//! cluster's files are at HEAD what they were at the commit gated (the planner asks git).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::ops::ControlFlow;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Failure, RolloutError};
use crate::repo;
use crate::verify::{CheckResult, Outcome};

/// The notes ref the gate records live in.
pub(crate) const NOTES: &str = "refs/notes/osbx-rollout";

/// The pseudo-check that fails a cluster whose every check skipped.
pub(crate) const NO_EVIDENCE: &str = "gate.evidence";

/// What a cluster's gate showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum GateOutcome {
    /// Flux reconciled the commit, no check failed and at least one passed.
    Passed,
    /// Flux did not reconcile the commit in time, or a check failed or erred.
    Failed,
    /// Flux reconciled the commit and every check skipped (or none ran): nothing shows the
    /// change works there.
    NoEvidence,
}

impl GateOutcome {
    /// Whether it passes the gate (`accept_no_evidence`: the fleet file's
    /// `rollout.acceptNoEvidence`).
    pub(crate) fn passes(self, accept_no_evidence: bool) -> bool {
        match self {
            GateOutcome::Passed => true,
            GateOutcome::NoEvidence => accept_no_evidence,
            GateOutcome::Failed => false,
        }
    }
}

/// One cluster's gate, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Gate {
    /// The fleet (`metadata.name`).
    pub fleet: String,
    /// The wave the cluster was gated in.
    pub wave: String,
    /// The fleet's cluster whose gate it was.
    pub cluster: String,
    /// What the gate showed.
    pub outcome: GateOutcome,
    /// The commit gated (the one the note is on).
    pub commit: String,
    /// When the gate finished (RFC 3339, UTC).
    pub at: String,
    /// Every check run, with its outcome (`PASS`, `FAIL`, `ERROR`, `SKIP`).
    #[serde(default)]
    pub checks: BTreeMap<String, String>,
    /// The check that failed (`flux.reconcile` when Flux did not reconcile the commit in time,
    /// `gate.evidence` when every check skipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

impl Gate {
    /// Whether this record shows its cluster passed for a run selecting the checks `selected`
    /// (its files being what they were at the commit gated).
    pub(crate) fn holds(&self, selected: &[String], accept_no_evidence: bool) -> bool {
        self.outcome.passes(accept_no_evidence) && selected.iter().all(|id| self.checks.contains_key(id))
    }
}

/// The outcome of a gate whose checks returned `results` (Flux having reconciled the commit),
/// and why it does not pass: the first check that failed or erred; else, when none passed,
/// [`NO_EVIDENCE`] unless `accept_no_evidence`.
pub(crate) fn judge(results: &[CheckResult], accept_no_evidence: bool) -> (GateOutcome, Option<Failure>) {
    if let Some(r) = results.iter().find(|r| !matches!(r.verdict.outcome, Outcome::Pass | Outcome::Skip)) {
        let failure = Failure {
            check: r.id.clone(),
            evidence: r.verdict.evidence.clone(),
            diagnosis: r.verdict.diagnosis.clone(),
        };
        return (GateOutcome::Failed, Some(failure));
    }
    if results.iter().any(|r| r.verdict.outcome == Outcome::Pass) {
        return (GateOutcome::Passed, None);
    }
    if accept_no_evidence {
        return (GateOutcome::NoEvidence, None);
    }
    let mut evidence = String::from("every check skipped");
    if results.is_empty() {
        evidence = "no check ran".into();
    }
    for (i, r) in results.iter().enumerate() {
        let _ = write!(evidence, "{} {} ({})", if i == 0 { ":" } else { ";" }, r.id, r.verdict.evidence);
    }
    let failure = Failure {
        check: NO_EVIDENCE.into(),
        evidence,
        diagnosis: Some(
            "nothing shows the change works on this cluster; select checks that apply to it, or set \
             rollout.acceptNoEvidence: true in the fleet file to let such a cluster pass"
                .into(),
        ),
    };
    (GateOutcome::NoEvidence, Some(failure))
}

/// The time now, RFC 3339 in UTC to the second.
pub(crate) fn now() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    now.round(k8s_openapi::jiff::Unit::Second).unwrap_or(now).to_string()
}

fn unreadable(commit: &str, reason: impl std::fmt::Display) -> RolloutError {
    RolloutError::Gates { commit: commit.to_owned(), reason: reason.to_string() }
}

fn parse(commit: &str, text: &str) -> Result<Vec<Gate>, RolloutError> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    // The parser's message has a snippet of the text under its first line.
    serde_saphyr::from_str(text).map_err(|e| unreadable(commit, e.to_string().lines().next().unwrap_or_default()))
}

/// Record `gate` on its commit, replacing an earlier record of the same fleet and cluster
/// there; records of other fleets and clusters are kept.
///
/// # Errors
/// [`RolloutError`] when the note there is not gate records, or git fails.
pub(crate) fn record(root: &Path, gate: &Gate) -> Result<(), RolloutError> {
    let mut gates = match repo::note(root, NOTES, &gate.commit)? {
        Some(text) => parse(&gate.commit, &text)?,
        None => Vec::new(),
    };
    gates.retain(|g| !(g.fleet == gate.fleet && g.cluster == gate.cluster));
    gates.push(gate.clone());
    let body = serde_saphyr::to_string(&gates).map_err(|e| unreadable(&gate.commit, e))?;
    let text = format!("# osbx rollout: the gates run at this commit\n{body}");
    repo::set_note(root, NOTES, &gate.commit, &text)?;
    Ok(())
}

/// The newest record of each of `clusters` of `fleet` on HEAD's first-parent line (its
/// `commit` the one the note is on).
///
/// # Errors
/// [`RolloutError`] when a note on that line is not gate records, or git fails.
pub(crate) fn newest(
    root: &Path,
    fleet: &str,
    clusters: &BTreeSet<&str>,
) -> Result<BTreeMap<String, Gate>, RolloutError> {
    let mut found: BTreeMap<String, Gate> = BTreeMap::new();
    let mut error = None;
    repo::notes_on_head_line(root, NOTES, |commit, text| {
        match parse(commit, text) {
            Ok(gates) => {
                for mut g in gates {
                    commit.clone_into(&mut g.commit);
                    if g.fleet == fleet && clusters.contains(g.cluster.as_str()) && !found.contains_key(&g.cluster) {
                        found.insert(g.cluster.clone(), g);
                    }
                }
            }
            Err(e) => {
                error = Some(e);
                return ControlFlow::Break(());
            }
        }
        if found.len() == clusters.len() { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
    })?;
    match error {
        Some(e) => Err(e),
        None => Ok(found),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::Verdict;

    fn result(id: &str, verdict: Verdict) -> CheckResult {
        CheckResult { id: id.into(), started_ms: 0, duration_ms: 0, verdict }
    }

    #[test]
    fn a_cluster_whose_checks_all_skip_has_no_evidence() {
        let skipped = [
            result("kata.guest-kernel", Verdict::skip("no Kata pool")),
            result("spiffe.issued", Verdict::skip("no spire")),
        ];
        let (outcome, failure) = judge(&skipped, false);
        assert_eq!(outcome, GateOutcome::NoEvidence);
        let failure = failure.unwrap();
        assert_eq!(failure.check, NO_EVIDENCE);
        assert_eq!(failure.evidence, "every check skipped: kata.guest-kernel (no Kata pool); spiffe.issued (no spire)");
        assert!(!outcome.passes(false));
        // Accepted by the fleet file: no failure, and the outcome still says so.
        let (outcome, failure) = judge(&skipped, true);
        assert_eq!((outcome, failure.is_none()), (GateOutcome::NoEvidence, true));
        assert!(outcome.passes(true));
        assert_eq!(judge(&[], false).1.unwrap().evidence, "no check ran");
        // One pass among the skips is evidence; one failure fails, whatever passed.
        let mut some = skipped.to_vec();
        some.push(result("nodes.ready", Verdict::pass("1 node")));
        assert_eq!(judge(&some, false).0, GateOutcome::Passed);
        some.push(result("opensandbox.pools", Verdict::error("no answer", "down")));
        let (outcome, failure) = judge(&some, true);
        assert_eq!((outcome, failure.unwrap().check.as_str()), (GateOutcome::Failed, "opensandbox.pools"));
    }

    #[test]
    fn a_record_holds_only_for_a_pass_with_every_selected_check() {
        let gate = Gate {
            fleet: "labs".into(),
            wave: "canary".into(),
            cluster: "lab-a".into(),
            outcome: GateOutcome::Passed,
            commit: "0".repeat(40),
            at: "2026-01-01T00:00:00Z".into(),
            checks: [("flux.layers".into(), "PASS".into()), ("nodes.ready".into(), "SKIP".into())].into(),
            failed: None,
        };
        let selected = ["flux.layers".to_owned(), "nodes.ready".to_owned()];
        assert!(gate.holds(&selected, false));
        assert!(!gate.holds(&["opensandbox.pools".to_owned()], false), "a check it did not run");
        let failed = Gate { outcome: GateOutcome::Failed, ..gate.clone() };
        assert!(!failed.holds(&selected, true));
        let none = Gate { outcome: GateOutcome::NoEvidence, ..gate.clone() };
        assert!(!none.holds(&selected, false) && none.holds(&selected, true));
        // The note's text reads back.
        let text = serde_saphyr::to_string(&vec![gate.clone()]).unwrap();
        assert_eq!(parse("c", &text).unwrap(), [gate]);
    }
}
