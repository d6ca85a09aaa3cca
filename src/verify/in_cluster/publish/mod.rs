//! What an in-cluster run publishes (`osbx verify --publish NAMESPACE/NAME`), where other tools
//! read it: the report ConfigMap (the JSON report, the revision checked, the time, the JUnit
//! file) and, for each check that failed or erred, a Kubernetes Event (`Warning`,
//! `AcceptanceCheckFailed`) regarding that ConfigMap. `osbx rollout` and `osbx status` read the
//! ConfigMap back ([`read`]).

use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::cluster::operation::{Objects, Operation};
use crate::cluster::preflight::{self, PreflightError};
use crate::cluster::{Cluster, ClusterError};
use crate::object::{KnownKind, ObjectRef};
use crate::verify::{CheckResult, Outcome, all_passed, report};

/// Who wrote a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub(crate) enum Writer {
    /// A pod of the acceptance layer's Job (the run of one revision; `osbx rollout` trusts only
    /// this writer, with the uid of the Job Flux applied).
    Job {
        /// The Job's name.
        name: String,
        /// The Job's uid.
        uid: String,
        /// The pod's name.
        pod: String,
    },
    /// A pod of a Job the layer's CronJob made (every check between revisions; never what the
    /// gate trusts).
    Scheduled {
        /// The CronJob's name.
        cron_job: String,
        /// The Job's name.
        job: String,
        /// The pod's name.
        pod: String,
    },
    /// Another pod (the serving Deployment's).
    Pod {
        /// The pod's name.
        name: String,
    },
    /// A run outside any pod (`osbx verify --publish` from a workstation), or a report written
    /// before reports named their writer.
    Unnamed,
}

impl Writer {
    /// The writer of a run in a pod named `pod`, of the Job `job` (name and uid) when it is one
    /// of a Job's, which the CronJob `cron_job` made when it names one (each `None` or empty
    /// when not known: the downward API gives a label that is not there as empty).
    #[must_use]
    pub(crate) fn of(pod: Option<&str>, job: Option<(&str, &str)>, cron_job: Option<&str>) -> Self {
        let given = |s: Option<&str>| s.filter(|s| !s.trim().is_empty()).map(str::to_owned);
        match (given(pod), job.and_then(|(name, uid)| Some((given(Some(name))?, given(Some(uid))?)))) {
            (pod, Some((job, _))) if let Some(cron_job) = given(cron_job) => {
                Self::Scheduled { cron_job, job, pod: pod.unwrap_or_default() }
            }
            (pod, Some((name, uid))) => Self::Job { name, uid, pod: pod.unwrap_or_default() },
            (Some(name), None) => Self::Pod { name },
            (None, None) => Self::Unnamed,
        }
    }

    /// The key of the [`verdicts`] ConfigMap a run of every selected check writes, and the kind
    /// of run its field manager names (`None`: another run, which writes none).
    fn deep_key(&self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::Job { .. } => Some((OF_JOB, "job")),
            Self::Scheduled { .. } => Some((SCHEDULED, "scheduled")),
            Self::Pod { .. } | Self::Unnamed => None,
        }
    }

    /// Whether it runs every selected check (the Job, the CronJob), so publishes to the
    /// [`verdicts`] ConfigMap.
    #[must_use]
    pub(crate) fn is_deep(&self) -> bool {
        self.deep_key().is_some()
    }
}

/// As the gate and the run say it: the names quoted and escaped (a report is read back from the
/// cluster, where whoever may patch the ConfigMap may write anything).
impl std::fmt::Display for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Job { name, uid, .. } => write!(f, "Job {name:?} (uid {uid:?})"),
            Self::Scheduled { cron_job, job, .. } => write!(f, "Job {job:?} of the CronJob {cron_job:?}"),
            Self::Pod { name } => write!(f, "pod {name:?}"),
            Self::Unnamed => f.write_str("a run that did not name itself"),
        }
    }
}

/// Where a run publishes, and what it says of itself.
#[derive(Debug, Clone)]
pub(crate) struct Publishing {
    /// The report ConfigMap.
    pub report: ObjectRef,
    /// The revision the run checks (the acceptance layer's `osbx.dev/revision`).
    pub revision: String,
    /// Who runs it.
    pub writer: Writer,
}

/// One run's report, as published.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Published {
    /// The run's id.
    pub run: String,
    /// Who ran it.
    #[serde(default = "unnamed")]
    pub writer: Writer,
    /// The revision of the layers it checked (the acceptance layer's `osbx.dev/revision`).
    pub revision: String,
    /// The digest of the criteria it checked by ([`crate::profile::Profile::criteria`]).
    #[serde(default)]
    pub criteria: String,
    /// When it started (RFC 3339).
    #[serde(default)]
    pub started: String,
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
    /// The report of a run published as `publishing`, checking by `criteria`, started at
    /// `started` and finished now.
    #[must_use]
    pub(crate) fn of(
        run: &str,
        publishing: &Publishing,
        criteria: &str,
        started: std::time::SystemTime,
        results: &[CheckResult],
    ) -> Self {
        let stamp =
            |t: k8s_openapi::jiff::Timestamp| t.round(k8s_openapi::jiff::Unit::Second).unwrap_or_default().to_string();
        let started =
            k8s_openapi::jiff::Timestamp::try_from(started).unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now());
        Self {
            run: run.to_owned(),
            writer: publishing.writer.clone(),
            revision: publishing.revision.clone(),
            criteria: criteria.to_owned(),
            started: stamp(started),
            time: stamp(k8s_openapi::jiff::Timestamp::now()),
            // A run of no check is no verdict: never Ready.
            ready: !results.is_empty() && all_passed(results),
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

fn unnamed() -> Writer {
    Writer::Unnamed
}

/// The key of the report ConfigMap holding the last run's report, whoever wrote it.
const LATEST: &str = "report.json";

/// The key of the [`verdicts`] ConfigMap holding the last report of a Job's run.
const OF_JOB: &str = "job.json";

/// The key of the [`verdicts`] ConfigMap holding the last report of a run of the layer's
/// CronJob (beside [`OF_JOB`], under a field manager of its own).
const SCHEDULED: &str = "scheduled.json";

/// The ConfigMap beside `report` that holds the reports of the runs of every selected check (the
/// Job's and the CronJob's): `<report>-verdicts`. Only their identity may write it; the serving
/// pod, which publishes its own runs to `report`, may only read it. The verdict `osbx rollout`
/// gates on is then never in a ConfigMap that a long-running pod listening on the network may
/// patch.
#[must_use]
pub(crate) fn verdicts(report: &ObjectRef) -> ObjectRef {
    ObjectRef {
        gvk: report.gvk.clone(),
        namespace: report.namespace.clone(),
        name: format!("{}-verdicts", report.name),
    }
}

/// What publishing to `report` does: read it (`--serve` starts from the last report), apply it,
/// and create Events in its namespace; a run of every selected check (`deep`: the Job's, the
/// CronJob's) also applies its report to the [`verdicts`] ConfigMap, which any other run only
/// reads (the serving pod takes the other checks' verdicts from it).
#[must_use]
pub(crate) fn operations(report: &ObjectRef, deep: bool) -> Vec<Operation> {
    let verdicts = verdicts(report);
    vec![
        Operation::Get(Objects::Named(report.clone())),
        Operation::Apply { object: report.clone(), creates: true },
        Operation::Create(KnownKind::EVENT.gvk(), report.namespace.clone()),
        if deep {
            Operation::Apply { object: verdicts, creates: true }
        } else {
            Operation::Get(Objects::Named(verdicts))
        },
    ]
}

/// Whether this identity may publish as `publishing` says, asked before a run starts (preflight
/// names a missing permission).
///
/// # Errors
/// [`PreflightError`] naming what is missing.
pub(crate) async fn review(cluster: &Cluster, publishing: &Publishing) -> Result<(), PreflightError> {
    let ops = operations(&publishing.report, publishing.writer.is_deep());
    preflight::review(cluster, &ops, "publishing the report").await
}

/// Publish `published` to the ConfigMap `report`, and an Event for each check that did not pass.
///
/// # Errors
/// [`ClusterError`] when the ConfigMap cannot be written or an Event cannot be created.
pub(crate) async fn publish(cluster: &Cluster, report: &ObjectRef, published: &Published) -> Result<(), ClusterError> {
    let namespace = report.namespace.as_deref().unwrap_or("default");
    let text = serde_json::to_string_pretty(published).unwrap_or_default();
    let data = json!({
        LATEST: text,
        "revision": published.revision,
        "time": published.time,
        "ready": published.ready.to_string(),
        "summary": published.summary,
        "junit.xml": report::junit(&published.checks),
    });
    let written = apply_map(cluster, report, "acceptance-report", data, crate::mark::FIELD_MANAGER).await?;
    // A run of every selected check also writes its key of the verdicts ConfigMap, as a field
    // manager of its own: the other kind's apply (without that key) then does not remove it.
    if let Some((key, kind)) = published.writer.deep_key() {
        let manager = format!("{}-{kind}", crate::mark::FIELD_MANAGER);
        apply_map(cluster, &verdicts(report), "acceptance-verdicts", json!({key: text}), &manager).await?;
    }
    let subject = format!("ConfigMap/{namespace}/{}", report.name);
    let api = |e| ClusterError::Api { subject: subject.clone(), error: e };
    let events = Api::<Event>::namespaced(cluster.client.clone(), namespace);
    for failed in published.checks.iter().filter(|c| matches!(c.verdict.outcome, Outcome::Fail | Outcome::Error)) {
        let message = event_message(failed);
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

/// Apply `data` to the ConfigMap `map` (labelled as osbx's `component`) as `manager`.
async fn apply_map(
    cluster: &Cluster,
    map: &ObjectRef,
    component: &str,
    data: serde_json::Value,
    manager: &str,
) -> Result<ConfigMap, ClusterError> {
    let namespace = map.namespace.as_deref().unwrap_or("default");
    let body = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": map.name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/name": crate::mark::OSBX, "app.kubernetes.io/component": component}},
        "data": data,
    });
    Api::<ConfigMap>::namespaced(cluster.client.clone(), namespace)
        .patch(&map.name, &PatchParams::apply(manager).force(), &Patch::Apply(&body))
        .await
        .map_err(|error| ClusterError::Api { subject: format!("ConfigMap/{namespace}/{}", map.name), error })
}

/// What the Event of a check that did not pass says (at most 1,024 characters, an Event's
/// bound): `<id> <OUTCOME>: <evidence>`, then why and the fix when the check knows them (the
/// evidence alone, "1 node(s)", would not say what is wrong).
fn event_message(failed: &CheckResult) -> String {
    use std::fmt::Write as _;
    let v = &failed.verdict;
    let mut message = format!("{} {}: {}", failed.id, v.outcome, v.evidence);
    for (label, text) in [("why", &v.diagnosis), ("fix", &v.fix)] {
        if let Some(text) = text {
            let _ = write!(message, "; {label}: {text}");
        }
    }
    message.chars().take(1024).collect()
}

/// The report last published to `report` (`None`: none yet, or not one osbx wrote).
///
/// # Errors
/// [`ClusterError`] when it cannot be read.
pub(crate) async fn read(cluster: &Cluster, report: &ObjectRef) -> Result<Option<Published>, ClusterError> {
    read_key(cluster, report, LATEST).await
}

/// The report a Job's run last published beside `report` (in its [`verdicts`]; `None`: none
/// yet).
///
/// # Errors
/// [`ClusterError`] when it cannot be read.
pub(crate) async fn read_of_job(cluster: &Cluster, report: &ObjectRef) -> Result<Option<Published>, ClusterError> {
    read_key(cluster, &verdicts(report), OF_JOB).await
}

/// The newest report of a run that ran every selected check (the Job's, or a run of the
/// CronJob's) at `revision` by `criteria` (`None`: neither has one).
///
/// # Errors
/// [`ClusterError`] when it cannot be read.
pub(crate) async fn read_deep(
    cluster: &Cluster,
    report: &ObjectRef,
    revision: &str,
    criteria: &str,
) -> Result<Option<Published>, ClusterError> {
    let Some(map) = cluster.get(&verdicts(report)).await? else { return Ok(None) };
    Ok(newest_of(&map, revision, criteria))
}

/// Of the Job's and the CronJob's reports in the ConfigMap `map`, the newer at `revision` by
/// `criteria`.
fn newest_of(map: &serde_json::Value, revision: &str, criteria: &str) -> Option<Published> {
    [OF_JOB, SCHEDULED]
        .into_iter()
        .filter_map(|key| key_of(map, key))
        .filter(|p| p.revision == revision && p.criteria == criteria)
        .max_by_key(|p| {
            p.time.parse::<k8s_openapi::jiff::Timestamp>().map_or(i64::MIN, k8s_openapi::jiff::Timestamp::as_second)
        })
}

fn key_of(map: &serde_json::Value, key: &str) -> Option<Published> {
    map["data"][key].as_str().and_then(|text| serde_json::from_str(text).ok())
}

async fn read_key(cluster: &Cluster, report: &ObjectRef, key: &str) -> Result<Option<Published>, ClusterError> {
    let Some(map) = cluster.get(report).await? else { return Ok(None) };
    Ok(key_of(&map, key))
}

#[cfg(test)]
mod tests;
