//! Probe pods: one labelled namespace per run (or, in the cluster, the namespace the acceptance
//! layer renders, where a run creates and deletes only its own pods), pods that print one JSON
//! line to their termination message and stdout, verdicts from the terminated state (events only
//! for diagnosis), and cleanup that also removes what an interrupted run left behind.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Event, Namespace, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

use crate::cluster::operation::{Objects, Operation};
use crate::cluster::{Cluster, ClusterError};
use crate::object::KnownKind;

/// Label on everything a verify run creates.
pub(crate) const MANAGED_BY: (&str, &str) = (crate::mark::MANAGED_BY, "osbx-verify");
/// Label with the run id.
pub(crate) const RUN_LABEL: &str = "osbx.io/run-id";
/// Label with the probe kind (for diagnosis, and for the test stand-in).
pub(crate) const PROBE_LABEL: &str = "osbx.io/probe";
/// Annotation: after this Unix time the run is over and anything left of it may be swept.
pub(crate) const EXPIRES: &str = "osbx.io/expires";

/// One verify run.
#[derive(Debug, Clone)]
pub struct Run {
    /// Run id (`<unix seconds>-<pid>`).
    pub id: String,
    /// The probe namespace.
    pub namespace: String,
    /// Probe pod deadline.
    pub deadline_seconds: i64,
    /// When the run's objects may be swept.
    pub expires: u64,
    /// The namespace is the run's own: created and deleted by it (not one it was given).
    pub owns_namespace: bool,
    /// The pull Secrets every probe pod names (`images.pullSecrets`; they must exist in the
    /// probe namespace).
    pub pull_secrets: Vec<String>,
}

/// A new run's id: `<unix seconds>-<pid>`.
pub(crate) fn run_id() -> String {
    format!("{}-{}", now(), std::process::id())
}

pub(super) fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Run {
    /// A new run that must finish within `timeout`, its probes in `namespace` when given (which
    /// exists), else in a namespace of its own.
    #[must_use]
    pub fn new(deadline_seconds: i64, timeout: Duration, namespace: Option<String>) -> Self {
        let id = run_id();
        let owns_namespace = namespace.is_none();
        let namespace = namespace.unwrap_or_else(|| format!("osbx-verify-{id}"));
        Self {
            namespace,
            id,
            deadline_seconds,
            expires: now() + timeout.as_secs() + 5,
            owns_namespace,
            pull_secrets: Vec::new(),
        }
    }

    /// The probe pod deadline (`verify.probeDeadlineSeconds`; 180 s when it is not a count of
    /// seconds).
    #[must_use]
    pub fn deadline(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.deadline_seconds).unwrap_or(180))
    }

    /// How long to wait for a probe pod: its deadline, and 10 s for the kubelet to report its end.
    #[must_use]
    pub(crate) fn wait_limit(&self) -> Duration {
        self.deadline() + Duration::from_secs(10)
    }

    /// Labels for an object of this run.
    #[must_use]
    pub fn labels(&self, probe: &str) -> Value {
        json!({MANAGED_BY.0: MANAGED_BY.1, RUN_LABEL: self.id, PROBE_LABEL: probe})
    }

    /// Create the probe namespace (nothing when it was given).
    ///
    /// # Errors
    /// [`ClusterError`] when it cannot be created.
    pub async fn create_namespace(&self, cluster: &Cluster) -> Result<(), ClusterError> {
        if !self.owns_namespace {
            return Ok(());
        }
        let ns: Namespace = serde_json::from_value(json!({"metadata": {
            "name": self.namespace,
            "labels": {MANAGED_BY.0: MANAGED_BY.1, RUN_LABEL: self.id, "pod-security.kubernetes.io/enforce": "privileged"},
            "annotations": {EXPIRES: self.expires.to_string()},
        }}))
        .unwrap_or_default();
        let api = Api::<Namespace>::all(cluster.client.clone());
        let Err(error) = api.create(&PostParams::default(), &ns).await else { return Ok(()) };
        // This run's own namespace, made by a first attempt whose answer was lost.
        if already_exists(&error) {
            let ours = ListParams::default().labels(&format!("{RUN_LABEL}={}", self.id));
            if api
                .list(&ours)
                .await
                .is_ok_and(|l| l.items.iter().any(|n| n.metadata.name.as_ref() == Some(&self.namespace)))
            {
                return Ok(());
            }
        }
        Err(ClusterError::Api { subject: format!("Namespace/{}", self.namespace), error })
    }

    /// Delete everything this run created (pods first, with no grace, then its own namespace;
    /// in a namespace it was given, its pods alone: it creates nothing else there).
    pub async fn cleanup(&self, cluster: &Cluster, extra_namespaces: &[String]) {
        let selector = format!("{RUN_LABEL}={}", self.id);
        if self.owns_namespace {
            delete_labelled(cluster, &self.namespace, &selector).await;
        } else {
            delete_pods(cluster, &self.namespace, &selector).await;
        }
        for ns in extra_namespaces {
            delete_labelled(cluster, ns, &selector).await;
        }
        if self.owns_namespace {
            let namespaces = Api::<Namespace>::all(cluster.client.clone());
            let _ = namespaces.delete(&self.namespace, &DeleteParams::default()).await;
        }
    }
}

/// Delete the pods and service accounts in `namespace` that `selector` selects, with no grace.
pub(super) async fn delete_labelled(cluster: &Cluster, namespace: &str, selector: &str) {
    delete_pods(cluster, namespace, selector).await;
    let lp = ListParams::default().labels(selector);
    let _ =
        Api::<ServiceAccount>::namespaced(cluster.client.clone(), namespace).delete_collection(&at_once(), &lp).await;
}

/// Delete the pods in `namespace` that `selector` selects, with no grace.
pub(super) async fn delete_pods(cluster: &Cluster, namespace: &str, selector: &str) {
    let lp = ListParams::default().labels(selector);
    let _ = Api::<Pod>::namespaced(cluster.client.clone(), namespace).delete_collection(&at_once(), &lp).await;
}

/// Deleting with no grace: the probes are done.
fn at_once() -> DeleteParams {
    DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() }
}

/// What a run's own namespace, the sweep of earlier runs and the cleanup do
/// ([`Run::create_namespace`], [`super::sweep::sweep`], [`Run::cleanup`]): create, list and delete namespaces
/// (probe namespaces are named per run), delete labelled pods and service accounts in any
/// namespace (the run's, an expired run's) and list them in `extra_namespaces`. With a probe
/// namespace `given`, no namespace is created, listed or deleted: labelled pods are listed and
/// deleted there, and labelled pods and service accounts in `extra_namespaces`.
#[must_use]
pub(crate) fn run_operations(extra_namespaces: &[String], given: Option<&str>) -> Vec<Operation> {
    let mut out = Vec::new();
    let Some(given) = given else {
        let namespace = KnownKind::NAMESPACE.gvk();
        out.extend([
            Operation::Create(namespace.clone(), None),
            Operation::List(namespace, None),
            Operation::Delete(Objects::any(KnownKind::NAMESPACE, None)),
        ]);
        for kind in [KnownKind::POD, KnownKind::SERVICE_ACCOUNT] {
            out.push(Operation::DeleteLabelled(kind.gvk(), None));
            out.extend(extra_namespaces.iter().map(|ns| Operation::List(kind.gvk(), Some(ns.clone()))));
        }
        return out;
    };
    let pod = KnownKind::POD.gvk();
    out.push(Operation::List(pod.clone(), Some(given.to_owned())));
    out.push(Operation::DeleteLabelled(pod, Some(given.to_owned())));
    for kind in [KnownKind::POD, KnownKind::SERVICE_ACCOUNT] {
        for ns in extra_namespaces {
            out.push(Operation::List(kind.gvk(), Some(ns.clone())));
            out.push(Operation::DeleteLabelled(kind.gvk(), Some(ns.clone())));
        }
    }
    out
}

/// How a probe pod ended.
#[derive(Debug, Clone)]
pub(crate) enum ProbeEnd {
    /// Its container terminated.
    Terminated {
        /// The container's exit code.
        exit_code: i32,
        /// Termination message (or the log tail with `FallbackToLogsOnError`).
        message: String,
        /// Node it ran on.
        node: Option<String>,
        /// The pod as last read.
        pod: Box<Pod>,
    },
    /// It did not terminate in time; the diagnosis says what it was waiting for.
    Stuck {
        /// Events, conditions and container states, in words.
        diagnosis: String,
    },
}

/// A pod with the run's labels in `namespace` (default: the run namespace), and when it may be
/// swept (in a namespace the run was given, what says a run is over).
#[must_use]
pub fn pod(run: &Run, name: &str, probe: &str, spec: &Value) -> Value {
    // A namespace the run was given is shared with other runs: its pods carry the run's id.
    let name = if run.owns_namespace { name.to_owned() } else { format!("{name}-{}", run.id) };
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": run.namespace, "labels": run.labels(probe),
           "annotations": {EXPIRES: run.expires.to_string()}}, "spec": spec})
}

/// Create a probe pod and wait until its container terminates (or `timeout`).
///
/// # Errors
/// [`ClusterError`] when the pod cannot be created or read.
pub(crate) async fn run_pod(cluster: &Cluster, pod: &Value, timeout: Duration) -> Result<ProbeEnd, ClusterError> {
    let (ns, name) = create_pod(cluster, pod).await?;
    wait_terminated(cluster, &ns, &name, timeout).await
}

/// Create a probe pod; returns its namespace and name.
///
/// # Errors
/// [`ClusterError`] when the pod is not a valid Pod or cannot be created.
pub async fn create_pod(cluster: &Cluster, pod: &Value) -> Result<(String, String), ClusterError> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default").to_owned();
    let name = pod["metadata"]["name"].as_str().unwrap_or("probe").to_owned();
    let subject = format!("Pod/{ns}/{name}");
    let spec: Pod = serde_json::from_value(pod.clone())
        .map_err(|e| ClusterError::Api { subject: subject.clone(), error: kube::Error::SerdeError(e) })?;
    let api = Api::<Pod>::namespaced(cluster.client.clone(), &ns);
    let Err(error) = api.create(&PostParams::default(), &spec).await else { return Ok((ns, name)) };
    // This run's own pod, made by a first attempt whose answer was lost.
    if already_exists(&error) {
        let run = |p: &Pod| p.metadata.labels.as_ref().and_then(|l| l.get(RUN_LABEL)).cloned();
        if let Ok(existing) = api.get(&name).await
            && run(&existing).is_some()
            && run(&existing) == run(&spec)
        {
            return Ok((ns, name));
        }
    }
    Err(ClusterError::Api { subject, error })
}

/// Whether a create was refused because the object exists. A request whose connection was lost
/// before its answer arrived is sent again (see `cluster::http2`); when the first attempt had
/// created the object, the second one finds it.
fn already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

/// Wait for a pod's first container to terminate.
///
/// # Errors
/// [`ClusterError`] when the pod cannot be read.
pub(crate) async fn wait_terminated(
    cluster: &Cluster,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> Result<ProbeEnd, ClusterError> {
    let api = Api::<Pod>::namespaced(cluster.client.clone(), ns);
    let start = Instant::now();
    loop {
        let pod = get_pod(&api, ns, name).await?;
        let status = pod.status.clone().unwrap_or_default();
        let terminated = status
            .container_statuses
            .as_ref()
            .and_then(|c| c.first())
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.terminated.clone());
        // The kubelet's stand-in status for a container that never ran (the pod ended, e.g. at
        // its deadline, while its sandbox could not be created): not a result, a stuck pod.
        if terminated.as_ref().is_some_and(|t| t.reason.as_deref() == Some("ContainerStatusUnknown")) {
            return Ok(ProbeEnd::Stuck { diagnosis: diagnose(cluster, &pod).await });
        }
        if let Some(t) = terminated {
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            return Ok(ProbeEnd::Terminated {
                exit_code: t.exit_code,
                message: t.message.unwrap_or_default(),
                node,
                pod: Box::new(pod),
            });
        }
        if status.phase.as_deref() == Some("Failed") {
            // The pod's own reason (its deadline, say) and why its container never ran (the
            // image that could not be pulled, the sandbox that could not be made).
            let reason = status.reason.clone().unwrap_or_default();
            let message = status.message.clone().unwrap_or_default();
            let mut parts = vec![format!("pod failed before its container ran: {reason} {message}").trim().to_owned()];
            parts.extend(causes(cluster, &pod).await);
            return Ok(ProbeEnd::Stuck { diagnosis: parts.join("; ") });
        }
        if start.elapsed() >= timeout {
            return Ok(ProbeEnd::Stuck { diagnosis: diagnose(cluster, &pod).await });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Read pod `ns/name` through `api`.
async fn get_pod(api: &Api<Pod>, ns: &str, name: &str) -> Result<Pod, ClusterError> {
    api.get(name).await.map_err(|error| ClusterError::Api { subject: format!("Pod/{ns}/{name}"), error })
}

/// Wait until a pod is Running (for probes that need a live target).
///
/// # Errors
/// [`ClusterError`] when the pod cannot be read.
pub(crate) async fn wait_running(
    cluster: &Cluster,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> Result<Result<Pod, String>, ClusterError> {
    let api = Api::<Pod>::namespaced(cluster.client.clone(), ns);
    let start = Instant::now();
    loop {
        let pod = get_pod(&api, ns, name).await?;
        if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
            return Ok(Ok(pod));
        }
        if start.elapsed() >= timeout {
            return Ok(Err(diagnose(cluster, &pod).await));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Warning events that say why a pod cannot run, most telling first.
const STOPPING_EVENTS: &[&str] = &[
    "FailedCreatePodSandBox",
    "FailedMount",
    "FailedAttachVolume",
    "Failed",
    "ErrImageNeverPull",
    "FailedScheduling",
    "BackOff",
];

/// What a probe pod whose container the kubelet restarts on failure (`restartPolicy:
/// OnFailure`) has done so far: its attempts in the same pod (the same UID, so what the node
/// registered for that pod still holds).
#[derive(Debug, Clone, Default)]
pub struct Attempts {
    /// The termination message of the attempt that exited 0.
    pub succeeded: Option<String>,
    /// How many attempts failed.
    pub failures: i32,
    /// The exit code and termination message of the last failed attempt.
    pub last_failure: Option<(i32, String)>,
    /// The pod failed as a whole (its deadline passed): no more attempts come.
    pub over: bool,
}

/// Read the attempts of pod `ns/name` (see [`Attempts`]).
///
/// # Errors
/// [`ClusterError`] when the pod cannot be read.
pub async fn attempts(cluster: &Cluster, ns: &str, name: &str) -> Result<(Attempts, Pod), ClusterError> {
    let api = Api::<Pod>::namespaced(cluster.client.clone(), ns);
    let pod = get_pod(&api, ns, name).await?;
    let status = pod.status.clone().unwrap_or_default();
    let mut a = Attempts { over: status.phase.as_deref() == Some("Failed"), ..Attempts::default() };
    if let Some(cs) = status.container_statuses.as_ref().and_then(|c| c.first()) {
        a.failures = cs.restart_count;
        let last = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref());
        match cs.state.as_ref().and_then(|s| s.terminated.as_ref()) {
            Some(t) if t.exit_code == 0 => a.succeeded = Some(t.message.clone().unwrap_or_default()),
            Some(t) => {
                a.failures += 1;
                a.last_failure = Some((t.exit_code, t.message.clone().unwrap_or_default()));
            }
            None => a.last_failure = last.map(|t| (t.exit_code, t.message.clone().unwrap_or_default())),
        }
    }
    Ok((a, pod))
}

/// Why a pod is not done: its phase, then [`causes`].
pub(crate) async fn diagnose(cluster: &Cluster, pod: &Pod) -> String {
    let phase = pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_else(|| "Pending".into());
    let mut parts = vec![format!("phase {phase}")];
    parts.extend(causes(cluster, pod).await);
    parts.join("; ")
}

/// What holds a pod back: the scheduling condition, container waiting states, Warning events.
async fn causes(cluster: &Cluster, pod: &Pod) -> Vec<String> {
    let mut parts = Vec::new();
    let status = pod.status.clone().unwrap_or_default();
    for c in status.conditions.unwrap_or_default() {
        if c.type_ == "PodScheduled" && c.status == "False" {
            parts.push(format!("not scheduled: {}", c.message.unwrap_or_default()));
        }
    }
    for cs in status.container_statuses.unwrap_or_default() {
        if let Some(w) = cs.state.and_then(|s| s.waiting) {
            parts.push(
                format!("{} waiting: {} {}", cs.name, w.reason.unwrap_or_default(), w.message.unwrap_or_default())
                    .trim()
                    .to_owned(),
            );
        }
    }
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let lp = ListParams::default().fields(&format!("involvedObject.name={name},type=Warning"));
    if let Ok(events) = Api::<Event>::namespaced(cluster.client.clone(), &ns).list(&lp).await {
        let mut events = events.items;
        // What stops the pod first (its sandbox, its volumes, its image), newest first; notices
        // such as MissingClusterDNS last.
        events.sort_by_key(|e| {
            let reason = e.reason.as_deref().unwrap_or_default();
            let rank = STOPPING_EVENTS.iter().position(|r| *r == reason).unwrap_or(STOPPING_EVENTS.len());
            (rank, std::cmp::Reverse(e.last_timestamp.clone().map(|t| t.0)))
        });
        let mut seen = std::collections::BTreeSet::new();
        for e in events.iter().filter(|e| seen.insert(e.reason.clone())).take(3) {
            parts.push(format!(
                "event {}: {}",
                e.reason.clone().unwrap_or_default(),
                e.message.clone().unwrap_or_default()
            ));
        }
    }
    parts
}

/// The last line of a termination message that parses as a JSON object.
#[must_use]
pub(crate) fn json_line(message: &str) -> Option<Value> {
    message.lines().rev().find_map(|l| serde_json::from_str::<Value>(l.trim()).ok().filter(Value::is_object))
}

/// The node a pod runs on and its first container's id without the runtime prefix
/// (`containerd://<id>` → `<id>`); empty strings where the pod does not say.
pub(crate) fn node_and_container(pod: &Pod) -> (String, String) {
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    let cid = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.container_id.clone())
        .unwrap_or_default();
    let cid = cid.split_once("://").map_or(cid.as_str(), |(_, id)| id).to_owned();
    (node, cid)
}
