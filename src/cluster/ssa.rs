//! Server-side apply and delete of objects (after Flux's `ssa` resource manager).
//!
//! Planning an object reads its live state (one LIST per kind and namespace where that saves
//! requests); when it exists (or a preview is asked for), a server-side dry-run of the apply is
//! compared with it after removing server noise. Unchanged objects are **not written**, so a
//! no-op apply makes zero write requests. Writes use the field manager `osbx`; a conflict with
//! another manager fails with the manager and fields unless forced (`--force-conflicts`), or
//! unless the manager is Flux's applier alone and the render is the one Flux applies
//! (`flux_applier`).
//! A prune deletes only what osbx still manages.

use std::collections::{BTreeMap, HashMap};

use futures::stream::{self, StreamExt};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PropagationPolicy};
use serde_json::Value;

use super::flux_applier::{FLUX_APPLIER, OnConflict, Refusal, over_flux};
use super::operation::{Objects, Operation};
use super::{Cluster, ClusterError, describe};
use crate::changeset::{Action, Change};
use crate::mark::{APPLIED_HASH, FIELD_MANAGER};
use crate::object::{Gvk, Object, ObjectRef};

/// FNV-1a over the object's JSON text: stable across runs and builds (not a security hash).
#[must_use]
pub(crate) fn applied_hash(desired: &Value) -> String {
    let text = serde_json::to_string(desired).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The object osbx sends: the render plus its applied-hash annotation `hash`.
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
pub(crate) fn subset(want: &Value, have: &Value) -> bool {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w.iter().all(|(k, v)| h.get(k).is_some_and(|hv| subset(v, hv))),
        (Value::Array(w), Value::Array(h)) => w.len() == h.len() && w.iter().zip(h).all(|(a, b)| subset(a, b)),
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => want == have,
    }
}

/// Whether the field manager `osbx` owns fields of a live object.
#[must_use]
pub(crate) fn managed_by_osbx(live: &Value) -> bool {
    live["metadata"]["managedFields"].as_array().is_some_and(|m| m.iter().any(|f| f["manager"] == FIELD_MANAGER))
}

/// Why an object could not be applied or deleted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApplyError {
    /// Another field manager owns fields osbx sets.
    #[error("{subject}: {message}; rerun with --force-conflicts to take ownership of these fields")]
    Conflict {
        /// The object.
        subject: ObjectRef,
        /// The server's message (names the manager and the fields).
        message: String,
    },
    /// Fields osbx sets are owned by Flux's applier alone, and the render osbx applies is not
    /// shown to be the one Flux applies (see `flux_applier`): Flux would put them back.
    #[error(
        "{subject}: {} owned by Flux's {owner}, and this apply would change {}: osbx takes fields from Flux only \
         when it applies what the Flux repository's pushed HEAD holds, and {why}, so Flux would put them back. \
         Commit and push the render (`osbx render --commit`, then `git push`) and apply with --repo at that \
         repository, or rerun with --force-conflicts to take them anyway",
        fields_named(.fields),
        if .fields.len() == 1 { "it" } else { "them" }
    )]
    FluxOwned {
        /// The object.
        subject: ObjectRef,
        /// The fields, as the server names them.
        fields: Vec<String>,
        /// Their owner, Flux's applier.
        owner: &'static str,
        /// Why the render is not shown to be Flux's.
        why: String,
    },
    /// The server refused the object (schema, admission, RBAC).
    #[error("{subject}: {action} failed: {message}")]
    Rejected {
        /// The object.
        subject: ObjectRef,
        /// `dry-run`, `apply` or `delete`.
        action: &'static str,
        /// Why.
        message: String,
    },
    /// The caller may not read or write the object (403).
    #[error("{subject}: {action} failed: {message}")]
    Forbidden {
        /// The object.
        subject: ObjectRef,
        /// `read`, `list`, `dry-run`, `apply` or `delete`.
        action: &'static str,
        /// The server's message.
        message: String,
    },
    /// Discovery or transport failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

/// `.spec.a is` / `.spec.a and .spec.b are`.
fn fields_named(fields: &[String]) -> String {
    match fields {
        [] => "fields are".to_owned(),
        [one] => format!("{one} is"),
        [rest @ .., last] => format!("{} and {last} are", rest.join(", ")),
    }
}

/// The error of a server-side apply that was not made.
fn refused(subject: &ObjectRef, action: &'static str, refusal: Refusal) -> ApplyError {
    match refusal {
        Refusal::Api(e) => api_error(subject, action, e),
        Refusal::FluxOwns { fields, why } => {
            ApplyError::FluxOwned { subject: subject.clone(), fields, owner: FLUX_APPLIER, why }
        }
    }
}

fn api_error(subject: &ObjectRef, action: &'static str, e: kube::Error) -> ApplyError {
    let subject = subject.clone();
    match &e {
        kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict" => {
            ApplyError::Conflict { subject, message: s.message.clone() }
        }
        kube::Error::Api(s) if s.code == 403 => ApplyError::Forbidden { subject, action, message: describe(&e) },
        kube::Error::Api(s) if matches!(s.code, 400 | 404 | 422) => {
            ApplyError::Rejected { subject, action, message: describe(&e) }
        }
        _ => ApplyError::Cluster(ClusterError::Api { subject: subject.to_string(), error: e }),
    }
}

/// The plan for one object.
#[derive(Debug, Clone)]
pub(crate) struct Planned {
    /// Identity.
    pub id: ObjectRef,
    /// The rendered object, as osbx sends it (with its applied hash).
    pub desired: Value,
    /// The live object, when it exists.
    pub live: Option<Value>,
    /// What the server would make of the apply (when a dry-run was made).
    pub merged: Option<Value>,
    /// What applying would do.
    pub action: Action,
    /// Why it is skipped.
    pub reason: Option<String>,
    /// The fields it changes are owned only by Flux's applier, applying this same render from
    /// the pushed repository: the write takes them over (see `flux_applier`).
    pub takes_over_flux: bool,
}

impl Planned {
    fn new(id: ObjectRef, desired: Value, action: Action) -> Self {
        Self { id, desired, live: None, merged: None, action, reason: None, takes_over_flux: false }
    }

    /// Whether applying it writes anything.
    #[must_use]
    pub(crate) fn writes(&self) -> bool {
        matches!(self.action, Action::Created | Action::Configured)
    }

    /// The change for the change set (with a diff when `with_diff`).
    #[must_use]
    pub(crate) fn change(&self, with_diff: bool) -> Change {
        let mut c = Change::new(self.id.clone(), self.action);
        c.reason.clone_from(&self.reason);
        if with_diff && self.writes() {
            let merged = self.merged.as_ref().unwrap_or(&self.desired);
            c.diff = Some(super::diff::unified(&c.id.to_string(), self.live.as_ref(), merged));
        }
        c
    }
}

/// How to plan.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlanOptions<'a> {
    /// Dry-run objects that do not exist yet too (diff and `--dry-run` previews); apply skips it.
    pub dry_run_new: bool,
    /// What to do about fields other field managers own.
    pub on_conflict: OnConflict<'a>,
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

/// Plan one object; `prefetched` is its live state when a LIST already read it (`Some(None)`:
/// read, and absent), as the prefetch map's lookup gives it.
///
/// # Errors
/// [`ApplyError`] when the server refuses the dry-run or a read fails.
#[allow(clippy::option_option)]
pub(crate) async fn plan(
    cluster: &Cluster,
    object: &Object,
    opts: PlanOptions<'_>,
    prefetched: Option<Option<Value>>,
) -> Result<Planned, ApplyError> {
    let hash = applied_hash(&object.value);
    let desired = with_hash(&object.value, &hash);
    let id = object.id.clone();
    let Some(api) = cluster.resolver.api(&id).await? else {
        let reason = format!("kind {} is not served by the cluster yet", id.gvk);
        return Ok(Planned { reason: Some(reason), ..Planned::new(id, desired, Action::Skipped) });
    };
    let live = match prefetched {
        Some(live) => live,
        None => api
            .get_opt(&id.name)
            .await
            .map_err(|e| api_error(&id, "read", e))?
            .map(|l| serde_json::to_value(l).unwrap_or(Value::Null)),
    };
    // Applied by osbx from this very render, and nobody changed what osbx set: unchanged.
    if let Some(l) = &live
        && l["metadata"]["annotations"][APPLIED_HASH] == hash.as_str()
        && subset(&desired, l)
    {
        return Ok(Planned { live, ..Planned::new(id, desired, Action::Unchanged) });
    }
    // A new object needs no dry-run to know it will be created (saves a request per object).
    if live.is_none() && !opts.dry_run_new {
        return Ok(Planned::new(id, desired, Action::Created));
    }
    // Without --force-conflicts the dry-run reports conflicts before anything is written.
    let (api, name, patch) = (&api, &id.name, &Patch::Apply(&desired));
    let answer =
        over_flux(opts.on_conflict, |force| async move { api.patch(name, &params(force, true), patch).await }).await;
    let (merged, takes_over_flux) = match answer {
        Ok((m, took)) => (serde_json::to_value(m).unwrap_or(Value::Null), took),
        // A new object in a namespace this same plan creates: nothing to compare, shown as rendered.
        Err(Refusal::Api(kube::Error::Api(s)))
            if live.is_none() && s.code == 404 && s.message.starts_with("namespaces ") =>
        {
            return Ok(Planned::new(id, desired, Action::Created));
        }
        Err(refusal) => return Err(refused(&id, "dry-run", refusal)),
    };
    let action = match &live {
        None => Action::Created,
        Some(l) if super::diff::drifted(l, &merged) => Action::Configured,
        Some(_) => Action::Unchanged,
    };
    Ok(Planned { live, merged: Some(merged), takes_over_flux, ..Planned::new(id, desired, action) })
}

/// Plan many objects concurrently (bounded); results keep the input order. Every live object is
/// read first, in one wave ([`prefetch`]), so planning waits on the server only for dry-runs.
///
/// # Errors
/// The first [`ApplyError`].
pub(crate) async fn plan_all<'o>(
    cluster: &Cluster,
    objects: impl IntoIterator<Item = &'o Object>,
    opts: PlanOptions<'_>,
) -> Result<Vec<Planned>, ApplyError> {
    let objects: Vec<&Object> = objects.into_iter().collect();
    let live = prefetch(cluster, objects.iter().map(|o| &o.id)).await?;
    plan_read(cluster, objects, opts, live).await
}

/// Plan objects whose live state [`prefetch`] has read (concurrently, bounded; results keep
/// the input order).
///
/// # Errors
/// The first [`ApplyError`].
pub(crate) async fn plan_read(
    cluster: &Cluster,
    objects: Vec<&Object>,
    opts: PlanOptions<'_>,
    live: Live,
) -> Result<Vec<Planned>, ApplyError> {
    let planned = stream::iter(objects.into_iter().map(|o| plan(cluster, o, opts, live.get(&o.id).cloned())))
        .buffered(cluster.concurrency)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect();
    crate::timing::mark("planned");
    planned
}

/// What [`prefetch`] read: each object's live state (`None`: absent).
pub(crate) type Live = HashMap<ObjectRef, Option<Value>>;

/// How many objects of one kind in one namespace make one LIST cheaper than a GET each.
const MIN_LIST: usize = 4;

/// How [`plan_all`] reads `ids`: the groups read with one LIST per (kind, namespace) (at least
/// `MIN_LIST` objects), and the objects read with a GET each.
fn partition<'a>(ids: impl Iterator<Item = &'a ObjectRef>) -> (Vec<Vec<&'a ObjectRef>>, Vec<&'a ObjectRef>) {
    let mut groups: BTreeMap<(&Gvk, Option<&str>), Vec<&ObjectRef>> = BTreeMap::new();
    for id in ids {
        groups.entry((&id.gvk, id.namespace.as_deref())).or_default().push(id);
    }
    let (lists, singles): (Vec<Vec<&ObjectRef>>, Vec<Vec<&ObjectRef>>) =
        groups.into_values().partition(|g| g.len() >= MIN_LIST);
    (lists, singles.into_iter().flatten().collect())
}

/// The reads of planning `ids` ([`plan_all`]): one LIST per kind and namespace with enough
/// objects, a GET of each other object.
#[must_use]
pub(crate) fn reading<'a>(ids: impl Iterator<Item = &'a ObjectRef>) -> Vec<Operation> {
    let (lists, gets) = partition(ids);
    let lists = lists.into_iter().map(|g| Operation::List(g[0].gvk.clone(), g[0].namespace.clone()));
    lists.chain(gets.into_iter().map(|id| Operation::Get(Objects::Named(id.clone())))).collect()
}

/// The write (or dry-run) of an object planned as `action`: a server-side apply that creates
/// it, or one that changes it; nothing for the other actions.
#[must_use]
pub(crate) fn writing(id: &ObjectRef, action: Action) -> Option<Operation> {
    match action {
        Action::Created => Some(Operation::Apply { object: id.clone(), creates: true }),
        Action::Configured => Some(Operation::Apply { object: id.clone(), creates: false }),
        _ => None,
    }
}

/// Pruning an object ([`prune`]): reading it, then deleting it.
#[must_use]
pub(crate) fn pruning(id: &ObjectRef) -> [Operation; 2] {
    [Operation::Get(Objects::Named(id.clone())), Operation::Delete(Objects::Named(id.clone()))]
}

/// Read the live state of objects in one concurrent wave: one LIST per (kind, namespace) with
/// at least `MIN_LIST` objects, a GET for each of the others (see `partition`). Returns each
/// object's live state (`None`: absent). Kinds that are not served are left to `plan`.
///
/// # Errors
/// The first [`ApplyError`] of a read.
pub(crate) async fn prefetch(cluster: &Cluster, ids: impl Iterator<Item = &ObjectRef>) -> Result<Live, ApplyError> {
    let (lists, singles) = partition(ids);
    let lists = lists.into_iter().map(|ids| async move {
        let first = ids[0];
        let Some(api) = cluster.resolver.api(first).await? else { return Ok(Vec::new()) };
        let list = api.list(&ListParams::default()).await.map_err(|e| api_error(first, "list", e))?;
        let mut by_name: HashMap<String, Value> = list
            .items
            .into_iter()
            .filter_map(|o| {
                let name = o.metadata.name.clone()?;
                let mut v = serde_json::to_value(o).ok()?;
                // LIST items carry no type meta; add it so the object compares like a GET.
                v["apiVersion"] = Value::String(first.gvk.api_version());
                v["kind"] = Value::String(first.gvk.kind.clone());
                Some((name, v))
            })
            .collect();
        Ok::<_, ApplyError>(ids.into_iter().map(|id| (id.clone(), by_name.remove(&id.name))).collect::<Vec<_>>())
    });
    let gets = singles.into_iter().map(|id| async move {
        let Some(api) = cluster.resolver.api(id).await? else { return Ok(Vec::new()) };
        let live = api.get_opt(&id.name).await.map_err(|e| api_error(id, "read", e))?;
        Ok::<_, ApplyError>(vec![(id.clone(), live.map(|l| serde_json::to_value(l).unwrap_or(Value::Null)))])
    });
    let (lists, gets) = futures::join!(futures::future::join_all(lists), futures::future::join_all(gets));
    crate::timing::mark("reads");
    let mut out = HashMap::new();
    for found in lists.into_iter().chain(gets) {
        out.extend(found?);
    }
    Ok(out)
}

/// Write a planned object if it needs writing, doing about conflicts what `on_conflict` says
/// (planning's decision to take Flux's fields stands); returns the server's answer (the object
/// as stored, as JSON text: parsed only by callers that look at it).
///
/// # Errors
/// [`ApplyError`] when the server refuses the apply, or the fields are Flux's and stay so.
pub(crate) async fn write(
    cluster: &Cluster,
    p: &Planned,
    on_conflict: OnConflict<'_>,
) -> Result<Option<String>, ApplyError> {
    if !p.writes() {
        return Ok(None);
    }
    let api: Api<DynamicObject> = cluster.resolver.api(&p.id).await?.ok_or_else(|| ApplyError::Rejected {
        subject: p.id.clone(),
        action: "apply",
        message: "kind is no longer served".into(),
    })?;
    // Planned while absent (no dry-run saw a conflict), Flux's applier may have written it since.
    let api = &api;
    let on_conflict = if p.takes_over_flux { OnConflict::Force } else { on_conflict };
    let stored = over_flux(on_conflict, |force| async move {
        let request = kube::core::Request::new(api.resource_url())
            .patch(&p.id.name, &params(force, false), &Patch::Apply(&p.desired))
            .map_err(kube::Error::BuildRequest)?;
        cluster.client.request_text(request).await
    })
    .await;
    Ok(Some(stored.map_err(|refusal| refused(&p.id, "apply", refusal))?.0))
}

/// Write every planned object that changed, concurrently (bounded); returns the server's answer
/// for each planned object (`None` for those not written).
///
/// # Errors
/// The first [`ApplyError`]; objects written before it stay written.
pub(crate) async fn write_all(
    cluster: &Cluster,
    planned: &[Planned],
    on_conflict: OnConflict<'_>,
) -> Result<Vec<Option<String>>, ApplyError> {
    stream::iter(planned.iter().map(|p| write(cluster, p, on_conflict)))
        .buffered(cluster.concurrency)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// Prune one object osbx created and no longer renders: deleted (background propagation) when
/// osbx still manages fields of it, skipped when it does not, nothing when it is gone. With
/// `dry_run`, only what would happen.
///
/// # Errors
/// [`ApplyError`] when the read or the delete fails.
pub(crate) async fn prune(cluster: &Cluster, id: &ObjectRef, dry_run: bool) -> Result<Option<Change>, ApplyError> {
    let Some(live) = cluster.get(id).await? else { return Ok(None) };
    if !managed_by_osbx(&live) {
        let mut c = Change::new(id.clone(), Action::Skipped);
        c.reason = Some("not pruned: osbx no longer manages any of its fields".into());
        return Ok(Some(c));
    }
    if !dry_run && let Some(api) = cluster.resolver.api(id).await? {
        let params =
            DeleteParams { propagation_policy: Some(PropagationPolicy::Background), ..DeleteParams::default() };
        match api.delete(&id.name, &params).await {
            // Gone meanwhile (or a repeated request found it deleted): what pruning wanted.
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(api_error(id, "delete", e)),
        }
    }
    Ok(Some(Change::new(id.clone(), Action::Deleted)))
}
