//! Waiting until a set of objects is ready, by watching them: each object is read once, then
//! watched from the version read, so a wait ends as soon as the server reports the condition
//! change (not at the next poll). Stops when every object is Current, early when one is Failed
//! (fail fast), or at the deadline, naming every object still not ready and why. A kind the
//! server does not serve yet (a CRD another layer installs) is read again every `interval`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{WatchEvent, WatchParams};
use serde_json::Value;
use tokio::sync::mpsc;

use super::{Cluster, ClusterError};
use crate::object::ObjectRef;
use crate::progress::Progress;
use crate::readiness::{self, Status, StatusResult};

/// How to wait.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitOptions {
    /// How often a kind that is not served yet is looked up again.
    pub interval: Duration,
    /// Give up at this instant.
    pub deadline: Instant,
    /// Stop at the first Failed object.
    pub fail_fast: bool,
}

/// Why a wait ended without every object ready.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WaitError {
    /// An object failed (fail fast).
    #[error("failed early due to stalled resources:\n{}", list(.0))]
    Failed(Vec<(ObjectRef, StatusResult)>),
    /// The deadline passed.
    #[error("timeout waiting for:\n{}", list(.0))]
    Timeout(Vec<(ObjectRef, StatusResult)>),
    /// Reading or watching an object failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

fn list(items: &[(ObjectRef, StatusResult)]) -> String {
    let mut out = String::new();
    for (r, s) in items {
        let _ = writeln!(out, "  {r} status: '{}': {}", s.status, s.message);
    }
    out.trim_end().to_owned()
}

/// An object's status and, when it exists, the object.
pub(crate) type Observed = (StatusResult, Option<Value>);

/// Read one object and compute its status (404 → NotFound).
///
/// # Errors
/// [`ClusterError`] when the read fails for another reason.
pub(crate) async fn status_of(cluster: &Cluster, r: &ObjectRef) -> Result<Observed, ClusterError> {
    let Some(api) = cluster.resolver.api(r).await? else {
        return Ok((not_served(r), None));
    };
    match api.get_opt(&r.name).await {
        Ok(Some(obj)) => {
            let v = serde_json::to_value(&obj).unwrap_or(Value::Null);
            Ok((readiness::compute(&v), Some(v)))
        }
        Ok(None) => Ok((not_found(), None)),
        Err(e) => Err(ClusterError::Api { subject: r.to_string(), error: e }),
    }
}

fn not_served(r: &ObjectRef) -> StatusResult {
    StatusResult { status: Status::NotFound, message: format!("kind {} is not served", r.gvk.kind) }
}

fn not_found() -> StatusResult {
    StatusResult { status: Status::NotFound, message: "not found".into() }
}

/// What one object's follower reports: a new status, or why it cannot go on.
type Report = (ObjectRef, Result<StatusResult, ClusterError>);

/// How an object's status is judged from the object (by default, [`readiness::compute`]).
pub(crate) type Judge<'a> = dyn Fn(&ObjectRef, &Value) -> StatusResult + Sync + 'a;

/// Wait until every object in `refs` is Current.
///
/// # Errors
/// [`WaitError::Failed`] on a failed object (with `fail_fast`), [`WaitError::Timeout`] at the
/// deadline; both list every object that is not ready. [`WaitError::Cluster`] when an object
/// cannot be read or watched (a refused watch included).
pub(crate) async fn wait_for_set(
    cluster: &Cluster,
    refs: &[ObjectRef],
    opts: &WaitOptions,
    progress: &dyn Progress,
) -> Result<(), WaitError> {
    wait_until(cluster, refs, opts, progress, &|_, v| readiness::compute(v)).await
}

/// [`wait_for_set`], with each object's status judged by `judge` (e.g. "applied this revision").
///
/// # Errors
/// As [`wait_for_set`].
pub(crate) async fn wait_until(
    cluster: &Cluster,
    refs: &[ObjectRef],
    opts: &WaitOptions,
    progress: &dyn Progress,
    judge: &Judge<'_>,
) -> Result<(), WaitError> {
    let mut last: BTreeMap<ObjectRef, StatusResult> = refs
        .iter()
        .map(|r| (r.clone(), StatusResult { status: Status::InProgress, message: "not read yet".into() }))
        .collect();
    if refs.is_empty() {
        return Ok(());
    }
    let (tx, mut rx) = mpsc::unbounded_channel::<Report>();
    let followers =
        futures::future::join_all(refs.iter().map(|r| follow(cluster, r, opts.interval, judge, tx.clone())));
    drop(tx);
    let decide = async {
        while let Some((r, s)) = rx.recv().await {
            let s = s?;
            if last.get(&r) != Some(&s) {
                progress.status(&r, &s);
            }
            last.insert(r, s);
            if last.values().all(|s| s.status == Status::Current) {
                return Ok(());
            }
            let failed: Vec<(ObjectRef, StatusResult)> =
                last.iter().filter(|(_, s)| s.status == Status::Failed).map(|(r, s)| (r.clone(), s.clone())).collect();
            if opts.fail_fast && !failed.is_empty() {
                return Err(WaitError::Failed(failed));
            }
        }
        Ok(())
    };
    // The followers end when their objects are Current or cannot be followed, having said so:
    // the decision is the channel's, and they only have to keep running meanwhile.
    let followers = async {
        followers.await;
        std::future::pending::<()>().await;
    };
    let outcome = tokio::select! {
        decided = tokio::time::timeout_at(opts.deadline.into(), decide) => decided.ok(),
        () = followers => None,
    };
    match outcome {
        Some(result) => result,
        None => {
            Err(WaitError::Timeout(last.into_iter().filter(|(_, s)| s.status != Status::Current).collect::<Vec<_>>()))
        }
    }
}

/// Follow one object until it is Current, sending each status it reaches: read it, then watch
/// it from the version read (a watch that ends, or whose version expired, starts over with a
/// read). A kind that is not served yet is looked up again every `interval`.
async fn follow(
    cluster: &Cluster,
    r: &ObjectRef,
    interval: Duration,
    judge: &Judge<'_>,
    tx: mpsc::UnboundedSender<Report>,
) {
    let send = |s: Result<StatusResult, ClusterError>| tx.send((r.clone(), s)).is_ok();
    loop {
        let api = match cluster.resolver.api(r).await {
            Ok(Some(api)) => api,
            Ok(None) => {
                if !send(Ok(not_served(r))) {
                    return;
                }
                tokio::time::sleep(interval).await;
                let _ = cluster.resolver.refresh().await;
                continue;
            }
            Err(e) => {
                send(Err(e));
                return;
            }
        };
        let (status, version) = match api.get_opt(&r.name).await {
            Ok(Some(obj)) => {
                let version = obj.metadata.resource_version.clone().unwrap_or_default();
                (judge(r, &serde_json::to_value(&obj).unwrap_or(Value::Null)), version)
            }
            // Watched from no version: the server starts with the object if it exists by then.
            Ok(None) => (not_found(), String::new()),
            Err(e) => {
                send(Err(ClusterError::Api { subject: r.to_string(), error: e }));
                return;
            }
        };
        let current = status.status == Status::Current;
        if !send(Ok(status)) || current {
            return;
        }
        let params = WatchParams::default().fields(&format!("metadata.name={}", r.name)).timeout(290);
        let events = match api.watch(&params, &version).await {
            Ok(events) => events,
            Err(kube::Error::Api(s)) if s.code == 403 => {
                let error = kube::Error::Api(s);
                send(Err(ClusterError::Api { subject: format!("{r} (watch)"), error }));
                return;
            }
            // Anything else (a lost connection): read and watch again shortly.
            Err(_) => {
                tokio::time::sleep(interval.min(Duration::from_secs(1))).await;
                continue;
            }
        };
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            let status = match event {
                Ok(WatchEvent::Added(obj) | WatchEvent::Modified(obj)) => {
                    judge(r, &serde_json::to_value(&obj).unwrap_or(Value::Null))
                }
                Ok(WatchEvent::Deleted(_)) => not_found(),
                Ok(WatchEvent::Bookmark(_)) => continue,
                // An expired version (410) or a broken stream: read and watch again.
                Ok(WatchEvent::Error(_)) | Err(_) => break,
            };
            let current = status.status == Status::Current;
            if !send(Ok(status)) || current {
                return;
            }
        }
    }
}
