//! Readiness of one object, by kstatus rules plus Flux's "done" guard (pure; no I/O).
//!
//! Order of the rules (after `fluxcd/cli-utils` kstatus): a deletion timestamp means
//! Terminating; an `observedGeneration` behind `metadata.generation` means InProgress (a stale
//! Ready is not Ready); `Reconciling=True` means InProgress and `Stalled=True` Failed; then rules
//! per kind; then a generic `Ready` condition; an object with no readiness information is Current.
//! Flux objects must also have been reconciled at least once (`observedGeneration ≥ 1`), and a
//! `Ready=False` with a terminal reason (`InstallFailed`, …) is Failed, so waits fail fast, also
//! while helm-controller waits to retry (`Reconciling=True` with `ProgressingWithRetry`).

pub(crate) mod runtime;

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::components::pools::POOL;
use crate::object::Gvk;

/// Readiness of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Status {
    /// Ready for use.
    Current,
    /// Still converging.
    InProgress,
    /// Failed and will not recover without a change.
    Failed,
    /// Being deleted.
    Terminating,
    /// Does not exist.
    NotFound,
    /// Could not be read.
    Unknown,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Current => "Current",
            Status::InProgress => "InProgress",
            Status::Failed => "Failed",
            Status::Terminating => "Terminating",
            Status::NotFound => "NotFound",
            Status::Unknown => "Unknown",
        })
    }
}

/// A status and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusResult {
    /// Where the object is: Current, InProgress, Failed, ….
    pub status: Status,
    /// Why (the object's own message where it has one).
    pub message: String,
}

fn result(status: Status, message: impl Into<String>) -> StatusResult {
    StatusResult { status, message: message.into() }
}

/// `Ready=False` reasons after which Flux will not succeed without a change.
const TERMINAL_REASONS: &[&str] = &[
    "InstallFailed",
    "UpgradeFailed",
    "TestFailed",
    "RollbackSucceeded",
    "UninstallSucceeded",
    "BuildFailed",
    "ReconciliationFailed",
];

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == kind)
}

fn cond_is(obj: &Value, kind: &str, status: &str) -> bool {
    condition(obj, kind).is_some_and(|c| c["status"] == status)
}

fn cond_message(obj: &Value, kind: &str) -> String {
    condition(obj, kind).and_then(|c| c["message"].as_str()).unwrap_or("").to_owned()
}

fn int(v: &Value) -> Option<i64> {
    v.as_i64()
}

/// Compute the status of an object (its JSON as returned by the API server).
#[must_use]
pub(crate) fn compute(obj: &Value) -> StatusResult {
    if !obj["metadata"]["deletionTimestamp"].is_null() {
        return result(Status::Terminating, "being deleted");
    }
    let generation = int(&obj["metadata"]["generation"]);
    let observed = int(&obj["status"]["observedGeneration"]);
    if let (Some(g), Some(o)) = (generation, observed)
        && o != g
    {
        let waiting = format!("generation {g} not yet observed (observed {o})");
        // A controller that records observedGeneration only on success (Flux's) may have
        // reported this generation's failure in its Ready condition already.
        let ready =
            condition(obj, "Ready").filter(|c| int(&c["observedGeneration"]) == Some(g) && c["status"] == "False");
        return match ready {
            Some(_) if let Some(failed) = terminal_ready(obj) => result(Status::Failed, failed),
            Some(c) => result(Status::InProgress, format!("{waiting}: {}", c["message"].as_str().unwrap_or_default())),
            None => result(Status::InProgress, waiting),
        };
    }
    let gvk = Gvk::of(obj).unwrap_or_else(|_| Gvk::new("", "", ""));
    if crate::flux::is_flux(&gvk)
        && let Some(r) = flux_guard(obj, generation, observed)
    {
        return r;
    }
    if cond_is(obj, "Reconciling", "True") {
        // helm-controller keeps a release it will only retry later (`RetryOnFailure`)
        // Reconciling with `ProgressingWithRetry`: the attempt failed, and only time passes
        // until the next one.
        if crate::flux::is_flux(&gvk)
            && condition(obj, "Reconciling").is_some_and(|c| c["reason"] == "ProgressingWithRetry")
            && let Some(failed) = terminal_ready(obj)
        {
            let retry = cond_message(obj, "Reconciling");
            return result(Status::Failed, if retry.is_empty() { failed } else { format!("{failed} ({retry})") });
        }
        return result(Status::InProgress, non_empty(cond_message(obj, "Reconciling"), "reconciling"));
    }
    if cond_is(obj, "Stalled", "True") {
        return result(Status::Failed, non_empty(cond_message(obj, "Stalled"), "stalled"));
    }
    if let Some(r) = by_kind(&gvk.group, &gvk.kind, obj) {
        return r;
    }
    if let Some(ready) = condition(obj, "Ready") {
        let message = ready["message"].as_str().unwrap_or("").to_owned();
        return match ready["status"].as_str() {
            Some("True") => result(Status::Current, non_empty(message, "Ready")),
            Some("False") if let Some(failed) = terminal_ready(obj) => result(Status::Failed, failed),
            _ => result(Status::InProgress, non_empty(message, "not Ready yet")),
        };
    }
    result(Status::Current, "no readiness information")
}

/// `reason: message` of a `Ready=False` condition with a terminal reason.
fn terminal_ready(obj: &Value) -> Option<String> {
    let ready = condition(obj, "Ready").filter(|c| c["status"] == "False")?;
    let reason = ready["reason"].as_str().filter(|r| TERMINAL_REASONS.contains(r))?;
    Some(format!("{reason}: {}", ready["message"].as_str().unwrap_or_default()))
}

fn non_empty(s: String, default: &str) -> String {
    if s.is_empty() { default.to_owned() } else { s }
}

/// Flux's "done" rule: reconciled at least once, and the Ready condition is about this
/// generation (HelmRelease leaves the condition's field at 0; its status field is checked above).
fn flux_guard(obj: &Value, generation: Option<i64>, observed: Option<i64>) -> Option<StatusResult> {
    if observed.is_none_or(|o| o < 1) {
        return Some(result(Status::InProgress, "not yet reconciled by Flux"));
    }
    let ready_gen = condition(obj, "Ready").and_then(|c| int(&c["observedGeneration"])).filter(|g| *g > 0);
    if let (Some(g), Some(rg)) = (generation, ready_gen)
        && rg != g
    {
        return Some(result(Status::InProgress, format!("Ready condition is for generation {rg}, object is at {g}")));
    }
    None
}

fn by_kind(group: &str, kind: &str, obj: &Value) -> Option<StatusResult> {
    let s = &obj["status"];
    match (group, kind) {
        ("", "ConfigMap" | "Secret" | "ServiceAccount") | ("batch", "CronJob") => {
            Some(result(Status::Current, "always ready"))
        }
        ("", "Namespace") => Some(match s["phase"].as_str() {
            Some("Active") | None => result(Status::Current, "Active"),
            Some(p) => result(Status::InProgress, p),
        }),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => Some(if cond_is(obj, "NamesAccepted", "False") {
            result(Status::Failed, cond_message(obj, "NamesAccepted"))
        } else if cond_is(obj, "Established", "True") {
            result(Status::Current, "Established")
        } else {
            result(Status::InProgress, "not Established yet")
        }),
        ("apps", "Deployment") => Some(deployment(obj)),
        ("", "Pod") => Some(pod(obj)),
        ("batch", "Job") => Some(if cond_is(obj, "Failed", "True") {
            result(Status::Failed, cond_message(obj, "Failed"))
        } else if cond_is(obj, "Complete", "True") {
            result(Status::Current, "Complete")
        } else {
            result(Status::InProgress, "running")
        }),
        ("", "PersistentVolumeClaim") => Some(match s["phase"].as_str() {
            Some("Bound") => result(Status::Current, "Bound"),
            p => result(Status::InProgress, p.unwrap_or("Pending")),
        }),
        (group, kind) if (group, kind) == (POOL.group, POOL.kind) => Some(pool(obj)),
        _ => None,
    }
}

fn deployment(obj: &Value) -> StatusResult {
    let s = &obj["status"];
    if condition(obj, "Progressing").is_some_and(|c| c["reason"] == "ProgressDeadlineExceeded") {
        return result(Status::Failed, cond_message(obj, "Progressing"));
    }
    let want = int(&obj["spec"]["replicas"]).unwrap_or(1);
    let field = |k: &str| int(&s[k]).unwrap_or(0);
    for (name, have) in [
        ("updated", field("updatedReplicas")),
        ("ready", field("readyReplicas")),
        ("available", field("availableReplicas")),
    ] {
        if have < want {
            return result(Status::InProgress, format!("{name} replicas: {have}/{want}"));
        }
    }
    if field("replicas") > want {
        return result(
            Status::InProgress,
            format!("old replicas are pending termination: {}/{want}", field("replicas")),
        );
    }
    result(Status::Current, format!("{want} replicas available"))
}

fn pod(obj: &Value) -> StatusResult {
    match obj["status"]["phase"].as_str() {
        Some("Succeeded") => result(Status::Current, "Succeeded"),
        Some("Failed") => result(Status::Failed, obj["status"]["message"].as_str().unwrap_or("pod failed").to_owned()),
        Some("Running") if cond_is(obj, "Ready", "True") => result(Status::Current, "Running and Ready"),
        p => result(Status::InProgress, p.unwrap_or("Pending")),
    }
}

/// A Pool: the pools component's health rule ([`crate::components::pools::HEALTH`]), the one
/// Flux evaluates too.
fn pool(obj: &Value) -> StatusResult {
    match crate::components::pools::HEALTH.evaluate(obj) {
        (true, message) => result(Status::Current, message),
        (false, message) => result(Status::InProgress, message),
    }
}

#[cfg(test)]
mod tests;
