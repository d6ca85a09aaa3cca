//! Server-side apply of one object and of a staged set (after Flux's `ssa` resource manager).
//!
//! Per object: GET the live object; if it exists (or a preview is asked for), server-side
//! dry-run the apply and compare with the live object after removing server noise. Unchanged
//! objects are **not written**, so a no-op apply makes zero write requests. Writes use the field
//! manager `osbx`; a conflict with another manager fails with the manager and fields unless
//! `force_conflicts` takes ownership.

use futures::stream::{self, StreamExt};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::Value;

use super::{Cluster, ClusterError, describe};
use crate::changeset::{Action, Change};
use crate::object::{NotAnObject, ObjectRef};

/// The field manager of every osbx write.
pub const FIELD_MANAGER: &str = "osbx";

/// Why an object could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Another field manager owns fields osbx sets.
    #[error("{subject}: {message}; rerun with --force-conflicts to take ownership of these fields")]
    Conflict {
        /// `Kind/ns/name`.
        subject: String,
        /// The server's message (names the manager and the fields).
        message: String,
    },
    /// The server refused the object (schema, admission, RBAC).
    #[error("{subject}: {action} failed: {message}")]
    Rejected {
        /// `Kind/ns/name`.
        subject: String,
        /// `dry-run` or `apply`.
        action: &'static str,
        /// Why.
        message: String,
    },
    /// The rendered value is not an object.
    #[error(transparent)]
    NotAnObject(#[from] NotAnObject),
    /// Discovery or transport failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

/// The plan for one object.
#[derive(Debug, Clone)]
pub struct Planned {
    /// Identity.
    pub object: ObjectRef,
    /// The rendered object.
    pub desired: Value,
    /// The live object, when it exists.
    pub live: Option<Value>,
    /// What the server would make of the apply (when a dry-run was made).
    pub merged: Option<Value>,
    /// What applying would do.
    pub action: Action,
    /// Why it is skipped.
    pub reason: Option<String>,
}

impl Planned {
    /// The change for the change set (with a diff when `with_diff`).
    #[must_use]
    pub fn change(&self, with_diff: bool) -> Change {
        let mut c = Change::new(self.object.clone(), self.action);
        c.reason.clone_from(&self.reason);
        if with_diff && matches!(self.action, Action::Created | Action::Configured) {
            let merged = self.merged.as_ref().unwrap_or(&self.desired);
            c.diff = Some(super::diff::unified(&c.subject, self.live.as_ref(), merged));
        }
        c
    }
}

/// How to plan.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlanOptions {
    /// Dry-run objects that do not exist yet too (diff and `--dry-run` previews); apply skips it.
    pub dry_run_new: bool,
    /// Take ownership from other field managers.
    pub force_conflicts: bool,
}

fn params(force: bool, dry_run: bool) -> PatchParams {
    let mut p = PatchParams::apply(FIELD_MANAGER);
    if force {
        p = p.force();
    }
    if dry_run {
        p = p.dry_run();
    }
    p
}

fn api_error(subject: &str, action: &'static str, e: kube::Error) -> ApplyError {
    match &e {
        kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict" => {
            ApplyError::Conflict { subject: subject.to_owned(), message: s.message.clone() }
        }
        kube::Error::Api(s) if matches!(s.code, 400 | 403 | 404 | 422) => {
            ApplyError::Rejected { subject: subject.to_owned(), action, message: describe(&e) }
        }
        _ => ApplyError::Cluster(ClusterError::Api { subject: subject.to_owned(), source: e }),
    }
}

/// Plan one object.
///
/// # Errors
/// [`ApplyError`] when the server refuses the dry-run or a read fails.
pub async fn plan(cluster: &Cluster, desired: &Value, opts: PlanOptions) -> Result<Planned, ApplyError> {
    let object = ObjectRef::of(desired)?;
    let subject = object.to_string();
    let Some(api) = cluster.resolver.api(&object).await? else {
        let reason = format!("kind {} ({}) is not served by the cluster yet", object.kind, object.api_version());
        return Ok(Planned {
            object,
            desired: desired.clone(),
            live: None,
            merged: None,
            action: Action::Skipped,
            reason: Some(reason),
        });
    };
    let live = api.get_opt(&object.name).await.map_err(|e| api_error(&subject, "read", e))?;
    let live = live.map(|l| serde_json::to_value(l).unwrap_or(Value::Null));
    // A new object needs no dry-run to know it will be created (saves a request per object).
    let created = |object| Planned {
        object,
        desired: desired.clone(),
        live: None,
        merged: None,
        action: Action::Created,
        reason: None,
    };
    if live.is_none() && !opts.dry_run_new {
        return Ok(created(object));
    }
    // Without --force-conflicts the dry-run reports conflicts before anything is written.
    let merged = match api.patch(&object.name, &params(opts.force_conflicts, true), &Patch::Apply(desired)).await {
        Ok(m) => m,
        // A new object in a namespace this same plan creates: nothing to compare, shown as rendered.
        Err(kube::Error::Api(s)) if live.is_none() && s.code == 404 && s.message.starts_with("namespaces ") => {
            return Ok(created(object));
        }
        Err(e) => return Err(api_error(&subject, "dry-run", e)),
    };
    let merged = serde_json::to_value(merged).unwrap_or(Value::Null);
    let action = match &live {
        None => Action::Created,
        Some(l) if super::diff::drifted(l, &merged) => Action::Configured,
        Some(_) => Action::Unchanged,
    };
    Ok(Planned { object, desired: desired.clone(), live, merged: Some(merged), action, reason: None })
}

/// Plan many objects concurrently (bounded); results keep the input order.
///
/// # Errors
/// The first [`ApplyError`].
pub async fn plan_all(cluster: &Cluster, objects: &[Value], opts: PlanOptions) -> Result<Vec<Planned>, ApplyError> {
    stream::iter(objects.iter().map(|o| plan(cluster, o, opts)))
        .buffered(cluster.concurrency)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// Write a planned object if it needs writing; returns the object as the server stored it.
///
/// # Errors
/// [`ApplyError`] when the server refuses the apply.
pub async fn write(cluster: &Cluster, p: &Planned, force_conflicts: bool) -> Result<Option<Value>, ApplyError> {
    if !matches!(p.action, Action::Created | Action::Configured) {
        return Ok(None);
    }
    let subject = p.object.to_string();
    let api: Api<DynamicObject> = cluster.resolver.api(&p.object).await?.ok_or_else(|| ApplyError::Rejected {
        subject: subject.clone(),
        action: "apply",
        message: "kind is no longer served".into(),
    })?;
    let stored = api
        .patch(&p.object.name, &params(force_conflicts, false), &Patch::Apply(&p.desired))
        .await
        .map_err(|e| api_error(&subject, "apply", e))?;
    Ok(Some(serde_json::to_value(stored).unwrap_or(Value::Null)))
}

/// Write every planned object that changed, concurrently (bounded).
///
/// # Errors
/// The first [`ApplyError`]; objects written before it stay written.
pub async fn write_all(cluster: &Cluster, planned: &[Planned], force_conflicts: bool) -> Result<(), ApplyError> {
    let results: Vec<Result<Option<Value>, ApplyError>> =
        stream::iter(planned.iter().map(|p| write(cluster, p, force_conflicts)))
            .buffered(cluster.concurrency)
            .collect()
            .await;
    results.into_iter().try_for_each(|r| r.map(|_| ()))
}
