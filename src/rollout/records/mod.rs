//! Each cluster's gate outcome, recorded durably in the repository: a git note on the commit the
//! gate ran at, in the notes ref [`NOTES`], pushed with the branch when the rollout pushes.
//!
//! Git neither clones nor fetches notes by default, so a rollout fetches them itself, from the
//! remote of the branch's upstream, into [`tracking`] (every run, a dry run too: [`fetch`]), and
//! reads its own and the fetched ones together. Before it pushes its own, it fetches again and
//! merges the remote's into them ([`publish`]): a note on a commit both sides annotated keeps
//! every cluster's record, the newer where both have one (`at`), so the records of an earlier
//! run from another clone, or of one running beside it, are never lost, and the push is a
//! fast-forward.
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

/// The ref the remote `remote`'s gate records are fetched into.
pub(crate) fn tracking(remote: &str) -> String {
    format!("refs/notes/remotes/{remote}/osbx-rollout")
}

/// Fetch the gate records of `remote` into [`tracking`] (none there when it has none).
///
/// # Errors
/// [`RolloutError::Fetch`] when git fails.
pub(crate) fn fetch(root: &Path, remote: &str) -> Result<(), RolloutError> {
    repo::fetch_ref(root, remote, NOTES, &tracking(remote)).map_err(|reason| RolloutError::Fetch {
        repo: root.display().to_string(),
        reason: format!("{NOTES}: {reason}"),
    })
}

/// How many times [`publish`] fetches, merges and pushes again when the remote's records moved
/// while it pushed (another run pushed its own in between).
const PUBLISH_ATTEMPTS: usize = 5;

/// Push the gate records to `remote`, after fetching its own and merging them in (so that the
/// push is a fast-forward and keeps them); again when another run pushed in between.
///
/// # Errors
/// [`RolloutError`] when git fails (the push: [`RolloutError::Push`]) or a note on either side
/// is not gate records.
pub(crate) fn publish(root: &Path, remote: &str) -> Result<(), RolloutError> {
    let theirs = tracking(remote);
    let mut attempt = 1;
    loop {
        fetch(root, remote)?;
        let fetched = repo::target(root, &theirs)?;
        repo::merge_notes(root, NOTES, &theirs, |commit, ours, theirs| {
            to_text(commit, &merged(parse(commit, ours)?, parse(commit, theirs)?))
        })?;
        let Err(reason) = repo::push_ref(root, remote, NOTES) else { return Ok(()) };
        // Refused because the remote's records moved since the fetch: merge those too.
        fetch(root, remote)?;
        if attempt == PUBLISH_ATTEMPTS || repo::target(root, &theirs)? == fetched {
            return Err(RolloutError::Push { repo: root.display().to_string(), reason: format!("{NOTES}: {reason}") });
        }
        attempt += 1;
    }
}

/// The records of one commit's two notes together: every fleet and cluster recorded in either,
/// with the newer record (`at`) where both have one, `ours` where they are as new.
fn merged(mut ours: Vec<Gate>, theirs: Vec<Gate>) -> Vec<Gate> {
    for g in theirs {
        match ours.iter_mut().find(|o| o.fleet == g.fleet && o.cluster == g.cluster) {
            Some(o) if g.at > o.at => *o = g,
            Some(_) => {}
            None => ours.push(g),
        }
    }
    ours
}

/// The text of a note holding `gates`.
fn to_text(commit: &str, gates: &[Gate]) -> Result<String, RolloutError> {
    let body = serde_saphyr::to_string(&gates).map_err(|e| unreadable(commit, e))?;
    Ok(format!("# osbx rollout: the gates run at this commit\n{body}"))
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
    repo::set_note(root, NOTES, &gate.commit, &to_text(&gate.commit, &gates)?)?;
    Ok(())
}

/// The newest record of each of `clusters` of `fleet` on HEAD's first-parent line (its
/// `commit` the one the note is on), in the records made here and, when `remote` is given, those
/// fetched from it ([`fetch`]) together.
///
/// # Errors
/// [`RolloutError`] when a note on that line is not gate records, or git fails.
pub(crate) fn newest(
    root: &Path,
    fleet: &str,
    clusters: &BTreeSet<&str>,
    remote: Option<&str>,
) -> Result<BTreeMap<String, Gate>, RolloutError> {
    let fetched = remote.map(tracking);
    let refs: Vec<&str> = std::iter::once(NOTES).chain(fetched.as_deref()).collect();
    let mut found: BTreeMap<String, Gate> = BTreeMap::new();
    let mut error = None;
    repo::notes_on_head_line(root, &refs, |commit, texts| {
        let gates = texts.iter().try_fold(Vec::new(), |all, text| Ok(merged(all, parse(commit, text)?)));
        match gates {
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
mod tests;
