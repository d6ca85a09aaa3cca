//! One cluster's gate: Flux reconciles the wave's commit, what it applied settles, and the
//! selected checks run there.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::reach::Target;
use super::records;
use super::{ClusterReport, Interrupt, RolloutError, Settings, flux};
use crate::cluster::ClusterError;
use crate::cluster::wait::{self, WaitError, WaitOptions};
use crate::components::acceptance::{Expected, REVISION_ANNOTATION};
use crate::fleet::Fleet;
use crate::object::ObjectRef;
use crate::progress::{ClusterState, Progress};
use crate::verify::in_cluster::publish::{self, Writer};
use crate::verify::session::{Session, VerifyError};

/// Progress of one cluster's gate, as its own line.
struct Line<'a> {
    wave: &'a str,
    cluster: &'a str,
    inner: &'a dyn Progress,
}

impl Progress for Line<'_> {
    fn status(&self, object: &ObjectRef, status: &crate::readiness::StatusResult) {
        let what = format!("{object} {}: {}", status.status, status.message);
        self.inner.cluster(self.wave, self.cluster, &ClusterState::Reconciling(what));
    }

    fn check(&self, check: &str, state: &crate::progress::CheckState) {
        if let crate::progress::CheckState::Finished { outcome, .. } = state {
            self.inner.cluster(self.wave, self.cluster, &ClusterState::Verifying(format!("{check}: {outcome}")));
        }
    }

    fn warn(&self, message: &str) {
        self.inner.warn(&format!("{}: {message}", self.cluster));
    }
}

/// One cluster's gate: Flux reconciles `sha`, then every selected check passes (and one passes,
/// unless the fleet accepts a cluster whose checks all skip). The report counts the requests the
/// rollout made to the cluster (its client's, which only this cluster's work uses).
pub(super) async fn gate(
    wave: &str,
    target: &Target<'_>,
    sha: &str,
    fleet: &Fleet,
    settings: &Settings,
    progress: &dyn Progress,
    interrupted: &Interrupt,
) -> Result<ClusterReport, RolloutError> {
    let name = target.member.profile.cluster.name.clone();
    let Some(cluster) = target.cluster.as_ref() else {
        return Ok(ClusterReport::failed(&name, "flux.reconcile", "not reached".into()));
    };
    let line = Line { wave, cluster: &name, inner: progress };
    progress.cluster(wave, &name, &ClusterState::Reconciling(format!("commit {}", &sha[..sha.len().min(12)])));
    let started = Instant::now();
    let profile = &target.member.profile;
    let reconciled = flux::reconciled(cluster, profile, &target.flux, sha, settings.timeout, &line);
    if let Some(acceptance) = &target.acceptance {
        // The cluster's own run publishes its verdict before its Job ends: a failed run is the
        // gate's answer at once, while Flux waits out its health check on the failed Job.
        let reading = Reading { cluster, expected: acceptance, job: Mutex::new(None), trusted: Mutex::new(None) };
        let waited = tokio::select! {
            r = reconciled => Waited::Flux(r),
            p = failed_run(&reading, fleet, settings) => Waited::RunFailed(p),
        };
        let reconciled_ms = millis(started.elapsed());
        let read_at = Instant::now();
        let report = in_cluster(&name, &reading, sha, waited, fleet, settings).await?;
        let state = match &report.failure {
            None => ClusterState::Passed,
            Some(f) => ClusterState::Failed(format!("{}: {}", f.check, f.evidence)),
        };
        progress.cluster(wave, &name, &state);
        let (reconciled_ms, verify_ms) = (Some(reconciled_ms), Some(millis(read_at.elapsed())));
        return Ok(ClusterReport { reconciled_ms, verify_ms, ..report });
    }
    match reconciled.await {
        Ok(()) => {}
        Err(WaitError::Cluster(source)) => return Err(RolloutError::Cluster { cluster: name, source }),
        Err(e) => {
            let report = ClusterReport::failed(&name, "flux.reconcile", e.to_string());
            progress.cluster(wave, &name, &ClusterState::Failed(format!("Flux did not reconcile {sha}: {e}")));
            return Ok(report);
        }
    }
    let reconciled_ms = millis(started.elapsed());
    // What Flux applied settles (a controller fills the Pools), up to the same time limit; the
    // checks then run whatever the state, and say what is not right.
    let settle =
        WaitOptions { interval: Duration::from_secs(2), deadline: Instant::now() + settings.timeout, fail_fast: false };
    match wait::wait_for_set(cluster, &target.objects, &settle, &line).await {
        Ok(()) | Err(WaitError::Timeout(_) | WaitError::Failed(_)) => {}
        Err(WaitError::Cluster(source)) => return Err(RolloutError::Cluster { cluster: name, source }),
    }
    progress.cluster(wave, &name, &ClusterState::Verifying(String::new()));
    let checking = Instant::now();
    let session = Session::start(cluster, profile, target.flux.clone(), settings.verify.clone())
        .await
        .map_err(|e| verify_error(&name, e))?;
    let results = session.run(&line, interrupted()).await.map_err(|e| verify_error(&name, e))?;
    let (outcome, failure) = records::judge(&results, fleet.accept_no_evidence);
    let state = match &failure {
        None => ClusterState::Passed,
        Some(f) => ClusterState::Failed(format!("{}: {}", f.check, f.evidence)),
    };
    progress.cluster(wave, &name, &state);
    Ok(ClusterReport {
        cluster: name,
        passed: failure.is_none(),
        outcome,
        reconciled_ms: Some(reconciled_ms),
        verify_ms: Some(millis(checking.elapsed())),
        requests: None,
        failure,
        checks: results,
    })
}

/// What an in-cluster gate waited for: Flux to reconcile (its result), or this wave's run to
/// fail first (its report, as read).
enum Waited {
    Flux(Result<(), WaitError>),
    RunFailed(publish::Published),
}

/// A gate's reading of one cluster's reports: the run it may trust ([`Expected`]), what it learnt
/// of the cluster's Job (the uid a report named, and whether that is the Job at the wave's
/// revision: read once per uid), and the passing report of this wave's run once seen (the Job
/// runs once: nothing later replaces it).
struct Reading<'a> {
    cluster: &'a crate::cluster::Cluster,
    expected: &'a Expected,
    job: Mutex<Option<(String, Result<(), String>)>>,
    trusted: Mutex<Option<publish::Published>>,
}

impl Reading<'_> {
    /// The report of this wave's run, or what the ConfigMap holds instead: a report of a Job's
    /// run, of the wave's revision and criteria, whose Job is the one the cluster holds at that
    /// revision (its uid). Anything else (the serving pod's report, an earlier Job's, a report
    /// for other criteria) neither passes nor fails the gate.
    async fn this_wave(&self) -> Result<Result<publish::Published, String>, ClusterError> {
        let e = self.expected;
        let Some(p) = publish::read_of_job(self.cluster, &e.report).await? else {
            return Ok(Err("no report of a Job's run".to_owned()));
        };
        if p.revision != e.revision {
            return Ok(Err(format!("the report of revision {:?} (by {})", p.revision, p.writer)));
        }
        if p.criteria != e.criteria {
            return Ok(Err(format!("a report of this revision for criteria {:?}, not {}", p.criteria, e.criteria)));
        }
        let Writer::Job { uid, .. } = &p.writer else {
            return Ok(Err(format!("a report by {}", p.writer)));
        };
        let known = lock(&self.job).as_ref().filter(|(u, _)| u == uid).map(|(_, v)| v.clone());
        let verdict = if let Some(v) = known {
            v
        } else {
            let job = self.cluster.get(&e.job).await?;
            let at =
                job.filter(|j| j["spec"]["template"]["metadata"]["annotations"][REVISION_ANNOTATION] == *e.revision);
            let v = match at.as_ref().and_then(|j| j["metadata"]["uid"].as_str()) {
                Some(current) if current == uid => Ok(()),
                Some(current) => {
                    Err(format!("a report by {}, not by the Job at this revision (uid {current})", p.writer))
                }
                None => Err(format!("a report by {}, while the cluster holds no Job at this revision", p.writer)),
            };
            *lock(&self.job) = Some((uid.clone(), v.clone()));
            v
        };
        Ok(verdict.map(|()| p))
    }

    /// What the gate waited for, for a verdict that never came.
    fn awaited(&self) -> String {
        let e = self.expected;
        format!("the report of the Job {} at revision {} for criteria {}", e.job, e.revision, e.criteria)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The gate of a cluster that checks itself (an acceptance layer): Flux reconciled `sha` (so the
/// acceptance layer is Ready: its Job passed, as it publishes before it ends), and the report of
/// this wave's run ([`Reading::this_wave`]) has its selected checks passing. The rollout reads;
/// it creates nothing.
async fn in_cluster(
    name: &str,
    reading: &Reading<'_>,
    sha: &str,
    waited: Waited,
    fleet: &Fleet,
    settings: &Settings,
) -> Result<ClusterReport, RolloutError> {
    let cluster_error = |source| RolloutError::Cluster { cluster: name.to_owned(), source };
    let (not_reconciled, published) = match waited {
        Waited::RunFailed(published) => (None, Ok(published)),
        Waited::Flux(reconciled) => {
            let not_reconciled = match reconciled {
                Ok(()) => None,
                Err(WaitError::Cluster(source)) => return Err(cluster_error(source)),
                Err(e) => Some(format!("Flux did not reconcile {sha}: {e}")),
            };
            let seen = lock(&reading.trusted).take();
            let published = match seen {
                Some(p) => Ok(p),
                None => reading.this_wave().await.map_err(cluster_error)?,
            };
            (not_reconciled, published)
        }
    };
    let published = match published {
        Ok(p) => p,
        Err(held) => {
            let evidence = format!("waited for {}; {} holds {held}", reading.awaited(), reading.expected.report);
            let evidence = not_reconciled.map_or(evidence.clone(), |f| format!("{f}; {evidence}"));
            return Ok(ClusterReport::failed(name, REPORT_CHECK, evidence));
        }
    };
    let checks = selected(published, settings);
    let (outcome, failure) = records::judge(&checks, fleet.accept_no_evidence);
    if failure.is_none()
        && let Some(f) = not_reconciled
    {
        return Ok(ClusterReport { checks, ..ClusterReport::failed(name, "flux.reconcile", f) });
    }
    Ok(ClusterReport {
        cluster: name.to_owned(),
        passed: failure.is_none(),
        outcome,
        reconciled_ms: None,
        verify_ms: None,
        requests: None,
        failure,
        checks,
    })
}

/// This wave's report once its selected checks fail (the run is over: it publishes before it
/// exits); reads it every few seconds until then, and no more once it has passed (kept for the
/// gate, which then waits for Flux alone).
async fn failed_run(reading: &Reading<'_>, fleet: &Fleet, settings: &Settings) -> publish::Published {
    loop {
        if let Ok(Ok(published)) = reading.this_wave().await {
            if records::judge(&selected(published.clone(), settings), fleet.accept_no_evidence).1.is_some() {
                return published;
            }
            *lock(&reading.trusted) = Some(published);
            return std::future::pending().await;
        }
        tokio::time::sleep(REPORT_INTERVAL).await;
    }
}

/// The checks of a published run the rollout selects.
fn selected(published: publish::Published, settings: &Settings) -> Vec<crate::verify::CheckResult> {
    published.checks.into_iter().filter(|c| settings.verify.selection.selects(&c.id)).collect()
}

/// How often a gate reads the report while Flux reconciles.
const REPORT_INTERVAL: Duration = Duration::from_secs(3);

/// The check a gate names when no report of this wave's run is there to trust.
const REPORT_CHECK: &str = "acceptance.report";

fn verify_error(cluster: &str, e: VerifyError) -> RolloutError {
    match e {
        VerifyError::Cluster(source) => RolloutError::Cluster { cluster: cluster.to_owned(), source },
        VerifyError::Preflight(source) => RolloutError::Preflight { cluster: cluster.to_owned(), source },
        source => RolloutError::Verify { cluster: cluster.to_owned(), source },
    }
}

pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
