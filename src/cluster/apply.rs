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

/// Annotation with a hash of the object osbx last applied: when the live object still carries
/// it and still holds every value osbx sets, nothing can have changed and no dry-run is needed.
pub const APPLIED_HASH: &str = "osbx.io/applied-hash";

/// FNV-1a over the object's JSON text: stable across runs and builds (not a security hash).
#[must_use]
pub fn applied_hash(desired: &Value) -> String {
    let text = serde_json::to_string(desired).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The object osbx sends: the render plus its applied-hash annotation `hash`.
#[must_use]
fn with_hash(desired: &Value, hash: &str) -> Value {
    let mut v = desired.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = meta.entry("annotations").or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Some(a) = annotations.as_object_mut() {
            a.insert(APPLIED_HASH.to_owned(), Value::String(hash.to_owned()));
        }
    }
    v
}

/// Whether every value in `want` is present and equal in `have` (extra fields in `have`, such as
/// server defaults or other managers' fields, are fine).
#[must_use]
pub fn subset(want: &Value, have: &Value) -> bool {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w.iter().all(|(k, v)| h.get(k).is_some_and(|hv| subset(v, hv))),
        (Value::Array(w), Value::Array(h)) => w.len() == h.len() && w.iter().zip(h).all(|(a, b)| subset(a, b)),
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => want == have,
    }
}

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
    /// The caller may not read or write the object (403).
    #[error("{subject}: {action} failed: {message}")]
    Forbidden {
        /// `Kind/ns/name`.
        subject: String,
        /// `read`, `list`, `dry-run` or `apply`.
        action: &'static str,
        /// The server's message.
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
        kube::Error::Api(s) if s.code == 403 => {
            ApplyError::Forbidden { subject: subject.to_owned(), action, message: describe(&e) }
        }
        kube::Error::Api(s) if matches!(s.code, 400 | 404 | 422) => {
            ApplyError::Rejected { subject: subject.to_owned(), action, message: describe(&e) }
        }
        _ => ApplyError::Cluster(ClusterError::Api { subject: subject.to_owned(), source: e }),
    }
}

/// Plan one object; `prefetched` is its live state when a LIST already read it.
///
/// # Errors
/// [`ApplyError`] when the server refuses the dry-run or a read fails.
pub async fn plan(
    cluster: &Cluster,
    desired: &Value,
    opts: PlanOptions,
    prefetched: Option<Option<Value>>,
) -> Result<Planned, ApplyError> {
    let hash = applied_hash(desired);
    let desired = &with_hash(desired, &hash);
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
    let live = match prefetched {
        Some(live) => live,
        None => api
            .get_opt(&object.name)
            .await
            .map_err(|e| api_error(&subject, "read", e))?
            .map(|l| serde_json::to_value(l).unwrap_or(Value::Null)),
    };
    // Applied by osbx from this very render, and nobody changed what osbx set: unchanged.
    if let Some(l) = &live
        && l["metadata"]["annotations"][APPLIED_HASH] == hash.as_str()
        && subset(desired, l)
    {
        return Ok(Planned {
            object,
            desired: desired.clone(),
            live,
            merged: None,
            action: Action::Unchanged,
            reason: None,
        });
    }
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

/// Plan many objects concurrently (bounded); results keep the input order. Every live object is
/// read first, in one wave (see `prefetch`), so planning waits on the server only for dry-runs.
///
/// # Errors
/// The first [`ApplyError`].
pub async fn plan_all(cluster: &Cluster, objects: &[Value], opts: PlanOptions) -> Result<Vec<Planned>, ApplyError> {
    let live = prefetch(cluster, objects).await?;
    stream::iter(objects.iter().map(|o| {
        let key = ObjectRef::of(o).map(|r| r.to_string()).unwrap_or_default();
        let prefetched = live.get(&key).cloned();
        plan(cluster, o, opts, prefetched)
    }))
    .buffered(cluster.concurrency)
    .collect::<Vec<_>>()
    .await
    .into_iter()
    .collect()
}

/// Group key for one LIST: group, version, kind, namespace.
type ListKey = (String, String, String, Option<String>);

/// Read the live state of `objects` in one concurrent wave: one LIST per (kind, namespace) with
/// at least `MIN_LIST` objects, a GET for each of the others. Returns subject → live state
/// (`None`: absent). Kinds that are not served are left to `plan`.
async fn prefetch(
    cluster: &Cluster,
    objects: &[Value],
) -> Result<std::collections::HashMap<String, Option<Value>>, ApplyError> {
    const MIN_LIST: usize = 4;
    let mut groups: std::collections::BTreeMap<ListKey, Vec<ObjectRef>> = std::collections::BTreeMap::new();
    for o in objects {
        let r = ObjectRef::of(o)?;
        groups.entry((r.group.clone(), r.version.clone(), r.kind.clone(), r.namespace.clone())).or_default().push(r);
    }
    let (lists, singles): (Vec<Vec<ObjectRef>>, Vec<Vec<ObjectRef>>) =
        groups.into_values().partition(|g| g.len() >= MIN_LIST);
    let lists = lists.into_iter().map(|refs| async move {
        let Some(api) = cluster.resolver.api(&refs[0]).await? else { return Ok(Vec::new()) };
        let list = api
            .list(&kube::api::ListParams::default())
            .await
            .map_err(|e| api_error(&refs[0].to_string(), "list", e))?;
        let mut by_name: std::collections::HashMap<String, Value> = list
            .items
            .into_iter()
            .filter_map(|o| {
                let name = o.metadata.name.clone()?;
                let mut v = serde_json::to_value(o).ok()?;
                // LIST items carry no type meta; add it so the object compares like a GET.
                v["apiVersion"] = Value::String(refs[0].api_version());
                v["kind"] = Value::String(refs[0].kind.clone());
                Some((name, v))
            })
            .collect();
        Ok::<_, ApplyError>(refs.into_iter().map(|r| (r.to_string(), by_name.remove(&r.name))).collect::<Vec<_>>())
    });
    let gets = singles.into_iter().flatten().map(|r| async move {
        let Some(api) = cluster.resolver.api(&r).await? else { return Ok(Vec::new()) };
        let subject = r.to_string();
        let live = api.get_opt(&r.name).await.map_err(|e| api_error(&subject, "read", e))?;
        Ok::<_, ApplyError>(vec![(subject, live.map(|l| serde_json::to_value(l).unwrap_or(Value::Null)))])
    });
    let (lists, gets) = futures::join!(futures::future::join_all(lists), futures::future::join_all(gets));
    let mut out = std::collections::HashMap::new();
    for found in lists.into_iter().chain(gets) {
        out.extend(found?);
    }
    Ok(out)
}

/// Write a planned object if it needs writing; returns the server's answer (the object as
/// stored, as JSON text: parsed only by callers that look at it).
///
/// # Errors
/// [`ApplyError`] when the server refuses the apply.
pub async fn write(cluster: &Cluster, p: &Planned, force_conflicts: bool) -> Result<Option<String>, ApplyError> {
    if !matches!(p.action, Action::Created | Action::Configured) {
        return Ok(None);
    }
    let subject = p.object.to_string();
    let api: Api<DynamicObject> = cluster.resolver.api(&p.object).await?.ok_or_else(|| ApplyError::Rejected {
        subject: subject.clone(),
        action: "apply",
        message: "kind is no longer served".into(),
    })?;
    let request = kube::core::Request::new(api.resource_url())
        .patch(&p.object.name, &params(force_conflicts, false), &Patch::Apply(&p.desired))
        .map_err(|e| api_error(&subject, "apply", kube::Error::BuildRequest(e)))?;
    let stored = cluster.client.request_text(request).await.map_err(|e| api_error(&subject, "apply", e))?;
    Ok(Some(stored))
}

/// Write every planned object that changed, concurrently (bounded); returns the server's answer
/// for each planned object (`None` for those not written).
///
/// # Errors
/// The first [`ApplyError`]; objects written before it stay written.
pub async fn write_all(
    cluster: &Cluster,
    planned: &[Planned],
    force_conflicts: bool,
) -> Result<Vec<Option<String>>, ApplyError> {
    stream::iter(planned.iter().map(|p| write(cluster, p, force_conflicts)))
        .buffered(cluster.concurrency)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}
