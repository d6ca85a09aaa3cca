//! `osbx verify --serve ADDR`: the acceptance checks every interval from a long-running pod (the
//! acceptance layer's Deployment; a scraper skips finished pods, so a CronJob's metrics would
//! never be read), each run's verdicts served as OpenMetrics ([`super::metrics`]) and published
//! ([`super::publish`]).

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use futures::FutureExt as _;

use super::metrics::{self, Metrics};
use super::publish::{self, Published, Publishing};
use crate::cluster::Cluster;
use crate::object::ObjectRef;
use crate::profile::Profile;
use crate::progress::Progress;
use crate::verify::session::{Session, VerifyError, read_only_ids};
use crate::verify::{CheckResult, Settings};

/// Where and how often.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Serve {
    /// The address the metrics are served on.
    pub addr: SocketAddr,
    /// Time between the end of one run and the start of the next.
    pub interval: Duration,
}

/// Why serving stopped before it was asked to.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServeError {
    /// This identity may not publish the report.
    #[error(transparent)]
    Preflight(#[from] crate::cluster::preflight::PreflightError),
    /// The check loop panicked (`/healthz` answered 503 from then until the stop).
    #[error("the check loop stopped: {0}")]
    Loop(String),
    /// The address cannot be listened on.
    #[error("cannot serve metrics on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// What one run came to: its published report, or why it reached no verdicts.
pub(crate) enum RunEnd<'a> {
    /// The run's report (published to the ConfigMap unless `publish_error` says why not).
    Finished(&'a Published, Option<String>),
    /// The run could not reach verdicts.
    Failed(&'a VerifyError),
}

/// The inputs of every run.
pub(crate) struct Runs<'a> {
    /// The cluster checked, reached in the pod's own identity.
    pub cluster: &'a Cluster,
    /// The profile the checks are derived from (read from the layer's ConfigMap).
    pub profile: &'a Profile,
    /// The Flux objects the checks read (the acceptance layer's own left out).
    pub flux_objects: Vec<ObjectRef>,
    /// Which checks, how, how long.
    pub settings: Settings,
    /// The report ConfigMap, the revision checked, the writer.
    pub publish: Publishing,
}

/// Serve until `stop` resolves: the metrics from the start (the last published report of this
/// revision until the first run ends), a run every `serve.interval`, each reported to `ended`.
/// `/healthz` answers 200 while the run loop is alive; if it panics, 503 until `stop`.
///
/// # Errors
/// [`ServeError`] when the address cannot be listened on, or when the run loop panicked.
pub(crate) async fn serve(
    runs: Runs<'_>,
    serve: Serve,
    progress: &dyn Progress,
    ended: &(dyn Fn(RunEnd<'_>) + Sync),
    stop: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    publish::review(runs.cluster, &runs.publish).await?;
    let listener = tokio::net::TcpListener::bind(serve.addr)
        .await
        .map_err(|source| ServeError::Bind { addr: serve.addr, source })?;
    let (report, revision) = (&runs.publish.report, &runs.publish.revision);
    let criteria = runs.profile.criteria();
    let pools: Vec<String> = runs.profile.sections.pools.items.iter().map(|p| p.name.clone()).collect();
    let state = Arc::new(RwLock::new(Metrics::new()));
    if let Ok(Some(last)) = publish::read(runs.cluster, report).await
        && &last.revision == revision
        && last.criteria == criteria
    {
        // Its verdicts and when it ended (it counts as one run in `runs_total`).
        let took = Duration::from_millis(last.checks.iter().map(|c| c.duration_ms).max().unwrap_or(0));
        let ended = last
            .time
            .parse::<k8s_openapi::jiff::Timestamp>()
            .ok()
            .and_then(|t| u64::try_from(t.as_second()).ok())
            .map_or_else(SystemTime::now, |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        write(&state).record(&last.checks, &pools, ended, took, revision);
    }
    let (stopping, stopped) = tokio::sync::watch::channel(false);
    let halted = move || {
        let mut rx = stopped.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let (loop_, alive) = metrics::Liveness::start();
    let server = tokio::spawn(metrics::serve(listener, state.clone(), loop_, metrics::Limits::default(), halted()));
    // `/healthz` answers 200 while this loop holds `alive`: it fails once the loop ends or panics.
    let runs_loop = async {
        let _alive = alive;
        loop {
            tokio::select! {
                () = tokio::time::sleep(serve.interval) => {}
                () = halted() => return,
            }
            let started = Instant::now();
            let began = SystemTime::now();
            match Box::pin(run(&runs, &criteria, progress, halted())).await {
                Ok((id, results)) => {
                    write(&state).record(&results, &pools, SystemTime::now(), started.elapsed(), revision);
                    let published = Published::of(&id, &runs.publish, &criteria, began, &results);
                    let error = publish::publish(runs.cluster, report, &published).await.err().map(|e| e.to_string());
                    ended(RunEnd::Finished(&published, error));
                }
                Err(e) => {
                    write(&state).record_error(SystemTime::now(), started.elapsed());
                    ended(RunEnd::Failed(&e));
                }
            }
        }
    };
    let mut stop = std::pin::pin!(stop);
    let panicked = tokio::select! {
        ended = std::panic::AssertUnwindSafe(runs_loop).catch_unwind() => ended.err(),
        () = &mut stop => None,
    };
    if panicked.is_some() {
        // The metrics stay served, `/healthz` 503, until the pod is stopped.
        stop.await;
    }
    let _ = stopping.send(true);
    let _ = server.await;
    match panicked {
        Some(payload) => Err(ServeError::Loop(panic_message(payload.as_ref()))),
        None => Ok(()),
    }
}

/// What a panic said.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// One run: its id and results. A `--read-only` run runs the checks that change nothing (none,
/// when the profile selects none of them), and takes the others' verdicts from the newest report
/// of the layer's Job or CronJob at this revision and criteria (their pods run there, not here).
async fn run(
    runs: &Runs<'_>,
    criteria: &str,
    progress: &dyn Progress,
    halted: impl Future<Output = ()>,
) -> Result<(String, Vec<CheckResult>), VerifyError> {
    let s = &runs.settings;
    let (id, mut results) = if s.read_only && read_only_ids(runs.profile, &s.selection, &s.reach()).is_empty() {
        (crate::verify::probe::run_id(), Vec::new())
    } else {
        let session = Session::start(runs.cluster, runs.profile, runs.flux_objects.clone(), s.clone()).await?;
        let id = session.id().to_owned();
        (id, session.run(progress, halted).await?)
    };
    if s.read_only
        && let Some(deep) =
            publish::read_deep(runs.cluster, &runs.publish.report, &runs.publish.revision, criteria).await?
    {
        let deep: Vec<CheckResult> =
            deep.checks.into_iter().filter(|c| !results.iter().any(|r| r.id == c.id)).collect();
        results.extend(deep);
    }
    if results.is_empty() {
        return Err(VerifyError::NoVerdict(runs.publish.revision.clone()));
    }
    Ok((id, results))
}

fn write(state: &RwLock<Metrics>) -> std::sync::RwLockWriteGuard<'_, Metrics> {
    state.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}
