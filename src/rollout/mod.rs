//! `osbx rollout`: bring a fleet's change to its clusters wave by wave, each wave gated by the
//! acceptance checks.
//!
//! For each wave in order: the clusters of this and earlier waves are rendered as the fleet file
//! says, every later cluster is kept as the repository holds it ([`crate::fleet::render_wave`]), and
//! the result is committed (one commit per wave, naming it) and pushed when asked. Then every
//! cluster of the wave, at most `maxParallel` at once: Flux reconciles the commit (the root
//! source at it, the Kustomizations having applied it, everything Ready at its generation:
//! [`flux::reconciled`]), then `verify` runs on it. A failed gate stops the rollout before the
//! next wave, naming the cluster, the check and its evidence.
//!
//! Nothing is remembered outside the repository: a wave whose render changes nothing is
//! committed already, and each cluster's gate outcome is recorded as a git note on the commit
//! it gated ([`records`]; pushed with `--push`), so the repository says which waves an earlier run
//! rolled out and verified ([`plan`]). `resume` starts at the first wave not known to have passed
//! at what the repository holds (the one that failed, or the one a killed run was gating,
//! verified again); a rerun without it verifies every wave again and commits only what is not
//! committed, so an interrupted rollout converges either way, with no cluster skipped or changed
//! twice. Before the first commit, the repository is checked (a branch checked out, an upstream
//! to push to), and every cluster of every wave is reached and everything the rollout will do
//! there is reviewed, so that a cluster it cannot reach or a permission it lacks stops it before
//! anything is written.

mod flux;
mod gate;
mod plan;
mod reach;
mod records;
mod report;

use gate::gate;
use plan::{Plan, wave_render};
pub(crate) use reach::operations;
use reach::reach_all;
use records::{Gate, GateOutcome};
pub(crate) use report::{ClusterReport, Failure, Report, WaveReport, WaveState};

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};

use crate::cluster::preflight::PreflightError;
use crate::cluster::{ClusterError, ConnectOptions};
use crate::fleet::Fleet;
use crate::progress::Progress;
use crate::render::{RenderError, Renderer, Source};
use crate::repo::{self, GitError, RepoError};
use crate::verify;
use crate::verify::session::VerifyError;

/// How to roll out.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The Flux repository's work tree.
    pub repo: PathBuf,
    /// Push each wave's commit (`git push` in the repository).
    pub push: bool,
    /// Start at the last committed wave instead of the first.
    pub resume: bool,
    /// Say what would be done; write and reach nothing.
    pub dry_run: bool,
    /// How to reach each cluster, beside its context and kubeconfig from the fleet file.
    pub connect: ConnectOptions,
    /// How long Flux may take to reconcile a wave's commit on one cluster.
    pub timeout: Duration,
    /// The acceptance checks of each cluster.
    pub verify: verify::Settings,
}

/// Why a rollout could not go on (exit 2); a failed gate is not an error but a [`Report`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum RolloutError {
    /// A template failed.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// The repository could not be read or written.
    #[error(transparent)]
    Repo(#[from] RepoError),
    /// git refused.
    #[error(transparent)]
    Git(#[from] GitError),
    /// `git push` failed.
    #[error("git push in {repo}: {reason}")]
    Push {
        /// The repository.
        repo: String,
        /// What git said.
        reason: String,
    },
    /// `git fetch` of the gate records failed.
    #[error("git fetch in {repo}: {reason}")]
    Fetch {
        /// The repository.
        repo: String,
        /// What git said.
        reason: String,
    },
    /// `--repo` is not in a git repository.
    #[error(
        "{path} is not inside a git repository: osbx rollout commits each wave to the branch Flux follows (give --repo the Flux repository's work tree, or `git init` it)"
    )]
    NotARepo {
        /// The directory.
        path: String,
    },
    /// HEAD is not on a branch: a wave's commit would reach no branch Flux follows.
    #[error(
        "{repo}: HEAD is detached at {at}, so a wave's commit would reach no branch Flux follows; check out that branch (`git switch <branch>`) and run again"
    )]
    Detached {
        /// The repository.
        repo: String,
        /// The commit HEAD is at.
        at: String,
    },
    /// `--push` with a branch that has no upstream.
    #[error(
        "--push: branch {branch} of {repo} has no upstream to push to; push it once with `git push -u {remote} {branch}` (after a first commit), or drop --push"
    )]
    NoUpstream {
        /// The repository.
        repo: String,
        /// The branch checked out.
        branch: String,
        /// The remote to name in the advice (`<remote>` unless the repository has exactly one).
        remote: String,
    },
    /// The gate records on a commit cannot be read.
    #[error(
        "{commit}: its note in {} is not gate records osbx can read ({reason}); remove it (`git notes --ref {} remove {commit}`) and the waves it recorded are gated again",
        records::NOTES,
        records::NOTES
    )]
    Gates {
        /// The commit the note is on.
        commit: String,
        /// Why.
        reason: String,
    },
    /// A cluster's kubeconfig or context cannot be used.
    #[error(
        "cluster {cluster}: {source}; set clusters[{index}].context (and .kubeconfig) in the fleet file to the context that reaches it, or give --kubeconfig"
    )]
    Reach {
        /// The fleet's cluster.
        cluster: String,
        /// Its index in the fleet file.
        index: usize,
        /// Why.
        #[source]
        source: ClusterError,
    },
    /// A cluster could not be reached or read.
    #[error("cluster {cluster}: {source}")]
    Cluster {
        /// The fleet's cluster.
        cluster: String,
        /// Why.
        #[source]
        source: ClusterError,
    },
    /// The user may not do everything the rollout needs on a cluster (nothing was written).
    #[error("cluster {cluster}: {source}")]
    Preflight {
        /// The fleet's cluster.
        cluster: String,
        /// What is missing.
        #[source]
        source: PreflightError,
    },
    /// A cluster's verify run could not finish (interrupted, out of time).
    #[error("cluster {cluster}: {source}")]
    Verify {
        /// The fleet's cluster.
        cluster: String,
        /// Why.
        #[source]
        source: VerifyError,
    },
}

/// A future that resolves when the run is interrupted (Ctrl-C, SIGTERM).
pub(crate) type Interrupt = dyn Fn() -> BoxFuture<'static, ()> + Sync;

/// Roll out `fleet` (its file as it is now) into the repository `settings.repo`.
///
/// # Errors
/// [`RolloutError`] when the repository cannot be rendered into or committed, a cluster cannot
/// be reached, or a permission is missing; a failed gate is a [`Report`] whose `completed` is
/// false.
pub(crate) async fn run(
    fleet: &Fleet,
    renderer: &Renderer,
    settings: &Settings,
    progress: &dyn Progress,
    interrupted: &Interrupt,
) -> Result<Report, RolloutError> {
    let source = Source { kind: "fleet", name: fleet.name.clone() };
    let root = settings.repo.as_path();
    let upstream = checked_out(root, settings.push)?;
    // The gate records of earlier runs from other clones (git fetches no notes by itself).
    if let Some(remote) = &upstream {
        records::fetch(root, remote)?;
    }
    let plan = Plan::new(fleet, renderer, root, upstream.as_deref(), &source, &settings.verify.selection)?;
    let remote = upstream.filter(|_| settings.push);
    let start = if settings.resume { plan.done } else { 0 };
    let mut report = Report {
        fleet: fleet.name.clone(),
        waves: fleet
            .waves
            .iter()
            .zip(&plan.files)
            .enumerate()
            .map(|(k, (w, files))| WaveReport {
                name: w.name.clone(),
                clusters: w.clusters.clone(),
                state: if k < start {
                    WaveState::Done
                } else if k < plan.first_pending {
                    WaveState::Committed
                } else {
                    WaveState::Pending
                },
                commit: None,
                gated: None,
                files: *files,
                results: Vec::new(),
            })
            .collect(),
        completed: plan.up_to_date(),
    };
    if settings.dry_run {
        return Ok(report);
    }
    let targets = reach_all(fleet, renderer, settings, start).await?;
    for k in start..fleet.waves.len() {
        let wave = &fleet.waves[k];
        progress.wave(&wave.name, &wave.clusters, None);
        let commit = commit_wave(fleet, renderer, settings, &source, k)?;
        progress.wave(&wave.name, &wave.clusters, Some(commit.as_deref().unwrap_or_default()));
        let sha = match &commit {
            Some(sha) => sha.clone(),
            None => repo::head(root)?,
        };
        report.waves[k].commit = commit;
        report.waves[k].gated = Some(sha.clone());
        let gated = stream::iter(wave.clusters.iter().map(|c| {
            let target = targets.iter().find(|t| t.member.profile.cluster.name == *c);
            let sha = sha.clone();
            async move {
                let result = match target {
                    Some(t) => {
                        let gated = gate(&wave.name, t, &sha, fleet, settings, progress, interrupted).await?;
                        ClusterReport { requests: t.cluster.as_ref().map(crate::cluster::Cluster::requests), ..gated }
                    }
                    None => ClusterReport::failed(c, "flux.reconcile", "not in the fleet".into()),
                };
                records::record(root, &record(fleet, &wave.name, &sha, &result))?;
                Ok::<_, RolloutError>(result)
            }
        }))
        .buffer_unordered(wave.max_parallel.max(1))
        .collect::<Vec<_>>()
        .await;
        // What was recorded is pushed, also when a gate could not finish, with what the remote
        // holds merged in.
        if let Some(remote) = &remote
            && gated.iter().any(Result::is_ok)
        {
            records::publish(root, remote)?;
        }
        let mut results = gated.into_iter().collect::<Result<Vec<_>, _>>()?;
        results.sort_by_key(|r| wave.clusters.iter().position(|c| *c == r.cluster));
        let passed = results.iter().all(|r| r.passed);
        report.waves[k].results = results;
        report.waves[k].state = if passed { WaveState::Passed } else { WaveState::Failed };
        if !passed {
            report.completed = false;
            return Ok(report);
        }
    }
    report.completed = true;
    Ok(report)
}

/// The repository at `root` can take the waves' commits: HEAD is on a branch (maybe one with no
/// commit yet) and, when pushing, the branch has an upstream; returns the upstream's remote,
/// when it has one.
fn checked_out(root: &Path, push: bool) -> Result<Option<String>, RolloutError> {
    let repo = root.display().to_string();
    let checkout = match repo::checkout(root) {
        Ok(c) => c,
        Err(GitError::NotARepo { .. }) => return Err(RolloutError::NotARepo { path: repo }),
        Err(e) => return Err(e.into()),
    };
    match checkout {
        repo::Checkout::Detached(at) => Err(RolloutError::Detached { repo, at: at[..at.len().min(12)].to_owned() }),
        repo::Checkout::Branch { remote: Some(remote), .. } => Ok(Some(remote)),
        repo::Checkout::Branch { name, remote: None } if push => {
            let remote = match repo::remotes(root)?.as_slice() {
                [one] => one.clone(),
                _ => "<remote>".into(),
            };
            Err(RolloutError::NoUpstream { repo, branch: name, remote })
        }
        repo::Checkout::Branch { .. } => Ok(None),
    }
}

/// The record of a cluster's gate at commit `sha`.
fn record(fleet: &Fleet, wave: &str, sha: &str, result: &ClusterReport) -> Gate {
    Gate {
        fleet: fleet.name.clone(),
        wave: wave.to_owned(),
        cluster: result.cluster.clone(),
        outcome: result.outcome,
        commit: sha.to_owned(),
        at: records::now(),
        checks: result.checks.iter().map(|c| (c.id.clone(), c.verdict.outcome.to_string())).collect(),
        failed: result.failure.as_ref().map(|f| f.check.clone()),
    }
}

/// Write and commit wave `k` (and push it); returns the commit, or `None` when the repository
/// holds the wave's render at HEAD already.
fn commit_wave(
    fleet: &Fleet,
    renderer: &Renderer,
    settings: &Settings,
    source: &Source,
    k: usize,
) -> Result<Option<String>, RolloutError> {
    let root = settings.repo.as_path();
    let _lock = repo::lock(root)?;
    repo::recover(root)?;
    // The repository changed with every wave committed before: read what it holds now.
    let current = crate::fleet::Current::new(repo::rendered_before(root, source)?);
    let rendered = wave_render(fleet, renderer, &current, k)?;
    let staged = repo::stage(root, &rendered, renderer, false)?;
    let ours = repo::commit_paths(&staged, &rendered);
    if staged.changed().next().is_some() {
        repo::write(&staged, &crate::progress::Silent)?;
    }
    let commit = repo::commit(root, &ours, &plan::commit_message(fleet, k))?;
    // A commit an interrupted run made and did not push is pushed now.
    let unpushed = repo::repo_state(root).is_some_and(|s| s.unpushed.is_some());
    if settings.push && (commit.is_some() || unpushed) {
        repo::push(root).map_err(|reason| RolloutError::Push { repo: root.display().to_string(), reason })?;
    }
    Ok(commit.map(|(id, _)| id.to_string()))
}
