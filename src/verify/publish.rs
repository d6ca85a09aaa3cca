//! What an in-cluster run publishes (`osbx verify --publish NAMESPACE/NAME`), where other tools
//! read it: the report ConfigMap (the JSON report, the revision checked, the time, the JUnit
//! file) and, for each check that failed or erred, a Kubernetes Event (`Warning`,
//! `AcceptanceCheckFailed`) regarding that ConfigMap. `osbx rollout` and `osbx status` read the
//! ConfigMap back ([`read`]).

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{CheckResult, Outcome, all_passed, report};
use crate::cluster::operation::{Objects, Operation};
use crate::cluster::preflight::{self, PreflightError};
use crate::cluster::{Cluster, ClusterError};
use crate::object::{KnownKind, ObjectRef};

/// One run's report, as published.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Published {
    /// The run's id.
    pub run: String,
    /// The revision of the layers it checked (the acceptance layer's `osbx.dev/revision`).
    pub revision: String,
    /// When it finished (RFC 3339).
    pub time: String,
    /// Every check passed (skips allowed).
    pub ready: bool,
    /// The summary line (`Ready`, `Not ready: 1 failed, …`).
    pub summary: String,
    /// Each check's result.
    pub checks: Vec<CheckResult>,
}

impl Published {
    /// The report of a finished run of `revision`, now.
    #[must_use]
    pub(crate) fn of(run: &str, revision: &str, results: &[CheckResult]) -> Self {
        Self {
            run: run.to_owned(),
            revision: revision.to_owned(),
            time: k8s_openapi::jiff::Timestamp::now()
                .round(k8s_openapi::jiff::Unit::Second)
                .unwrap_or_default()
                .to_string(),
            ready: all_passed(results),
            summary: report::summary(results),
            checks: results.to_vec(),
        }
    }

    /// Seconds since it was published (`None` when its time does not parse).
    #[must_use]
    pub(crate) fn age_seconds(&self) -> Option<i64> {
        let t: k8s_openapi::jiff::Timestamp = self.time.parse().ok()?;
        Some(k8s_openapi::jiff::Timestamp::now().as_second() - t.as_second())
    }
}

/// What publishing to `report` does: read it (`--serve` starts from the last report), apply it,
/// and create Events in its namespace.
#[must_use]
pub(crate) fn operations(report: &ObjectRef) -> Vec<Operation> {
    vec![
        Operation::Get(Objects::Named(report.clone())),
        Operation::Apply { object: report.clone(), creates: true },
        Operation::Create(KnownKind::EVENT.gvk(), report.namespace.clone()),
    ]
}

/// Whether this identity may publish to `report`, asked before a run starts (preflight names a
/// missing permission).
///
/// # Errors
/// [`PreflightError`] naming what is missing.
pub(crate) async fn review(cluster: &Cluster, report: &ObjectRef) -> Result<(), PreflightError> {
    preflight::review(cluster, &operations(report), "publishing the report").await
}

/// Publish `published` to the ConfigMap `report`, and an Event for each check that did not pass.
///
/// # Errors
/// [`ClusterError`] when the ConfigMap cannot be written or an Event cannot be created.
pub(crate) async fn publish(cluster: &Cluster, report: &ObjectRef, published: &Published) -> Result<(), ClusterError> {
    let namespace = report.namespace.as_deref().unwrap_or("default");
    let subject = format!("ConfigMap/{namespace}/{}", report.name);
    let api = |e| ClusterError::Api { subject: subject.clone(), error: e };
    let body = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": report.name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/name": crate::mark::OSBX, "app.kubernetes.io/component": "acceptance-report"}},
        "data": {
            "report.json": serde_json::to_string_pretty(published).unwrap_or_default(),
            "revision": published.revision,
            "time": published.time,
            "ready": published.ready.to_string(),
            "summary": published.summary,
            "junit.xml": report::junit(&published.checks),
        },
    });
    let params = PatchParams::apply(crate::mark::FIELD_MANAGER).force();
    let maps = Api::<ConfigMap>::namespaced(cluster.client.clone(), namespace);
    let written = maps.patch(&report.name, &params, &Patch::Apply(&body)).await.map_err(api)?;
    let events = Api::<Event>::namespaced(cluster.client.clone(), namespace);
    for failed in published.checks.iter().filter(|c| matches!(c.verdict.outcome, Outcome::Fail | Outcome::Error)) {
        let message: String = format!("{} {}: {}", failed.id, failed.verdict.outcome, failed.verdict.evidence)
            .chars()
            .take(1024)
            .collect();
        let event: Event = serde_json::from_value(json!({
            "metadata": {"generateName": format!("{}.", report.name), "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": report.name, "namespace": namespace,
                               "uid": written.metadata.uid},
            "type": "Warning",
            "reason": "AcceptanceCheckFailed",
            "message": message,
            "source": {"component": "osbx-verify"},
            "reportingComponent": "osbx.dev/verify",
            "reportingInstance": published.run,
            "firstTimestamp": published.time,
            "lastTimestamp": published.time,
            "count": 1,
        }))
        .map_err(|e| api(kube::Error::SerdeError(e)))?;
        events.create(&PostParams::default(), &event).await.map_err(api)?;
    }
    Ok(())
}

/// The report last published to `report` (`None`: none yet, or not one osbx wrote).
///
/// # Errors
/// [`ClusterError`] when it cannot be read.
pub(crate) async fn read(cluster: &Cluster, report: &ObjectRef) -> Result<Option<Published>, ClusterError> {
    let Some(map) = cluster.get(report).await? else { return Ok(None) };
    Ok(map["data"]["report.json"].as_str().and_then(|text| serde_json::from_str(text).ok()))
}
