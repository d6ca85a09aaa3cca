//! Waiting until a set of objects is ready, by polling (simple, deterministic, and what Flux's
//! own poller does). Stops when every object is Current, early when one is Failed (fail fast),
//! or at the deadline, naming every object still not ready and why.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use serde_json::Value;

use super::{Cluster, ClusterError};
use crate::object::ObjectRef;
use crate::progress::Progress;
use crate::status::{self, Status, StatusResult};

/// How to wait.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitOptions {
    /// Poll interval.
    pub interval: Duration,
    /// Give up at this instant.
    pub deadline: Instant,
    /// Stop at the first Failed object.
    pub fail_fast: bool,
}

/// Why a wait ended without every object ready.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// An object failed (fail fast).
    #[error("failed early due to stalled resources:\n{}", list(.0))]
    Failed(Vec<(ObjectRef, StatusResult)>),
    /// The deadline passed.
    #[error("timeout waiting for:\n{}", list(.0))]
    Timeout(Vec<(ObjectRef, StatusResult)>),
    /// Reading an object failed.
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
        return Ok((
            StatusResult { status: Status::NotFound, message: format!("kind {} is not served", r.gvk.kind) },
            None,
        ));
    };
    match api.get_opt(&r.name).await {
        Ok(Some(obj)) => {
            let v = serde_json::to_value(&obj).unwrap_or(Value::Null);
            Ok((status::compute(&v), Some(v)))
        }
        Ok(None) => Ok((StatusResult { status: Status::NotFound, message: "not found".into() }, None)),
        Err(e) => Err(ClusterError::Api { subject: r.to_string(), error: e }),
    }
}

/// Wait until every object in `refs` is Current.
///
/// # Errors
/// [`WaitError::Failed`] on a failed object (with `fail_fast`), [`WaitError::Timeout`] at the
/// deadline; both list every object that is not ready.
pub(crate) async fn wait_for_set(
    cluster: &Cluster,
    refs: &[ObjectRef],
    opts: &WaitOptions,
    progress: &dyn Progress,
) -> Result<(), WaitError> {
    let mut last: BTreeMap<ObjectRef, StatusResult> = BTreeMap::new();
    loop {
        let pending: Vec<ObjectRef> =
            refs.iter().filter(|r| last.get(*r).is_none_or(|s| s.status != Status::Current)).cloned().collect();
        let results: Vec<(ObjectRef, Result<Observed, ClusterError>)> =
            stream::iter(pending.into_iter().map(|r| async move {
                let s = status_of(cluster, &r).await;
                (r, s)
            }))
            .buffered(cluster.concurrency)
            .collect()
            .await;
        for (r, s) in results {
            let (s, _) = s?;
            if last.get(&r) != Some(&s) {
                progress.status(&r, &s);
            }
            last.insert(r, s);
        }
        let not_ready: Vec<(ObjectRef, StatusResult)> =
            last.iter().filter(|(_, s)| s.status != Status::Current).map(|(r, s)| (r.clone(), s.clone())).collect();
        if not_ready.is_empty() {
            return Ok(());
        }
        if opts.fail_fast && not_ready.iter().any(|(_, s)| s.status == Status::Failed) {
            return Err(WaitError::Failed(not_ready.into_iter().filter(|(_, s)| s.status == Status::Failed).collect()));
        }
        if Instant::now() + opts.interval > opts.deadline {
            return Err(WaitError::Timeout(not_ready));
        }
        tokio::time::sleep(opts.interval).await;
    }
}
