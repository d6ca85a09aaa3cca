//! What a change means for the sandboxes, as notes on the objects it changes: what the
//! OpenSandbox controller does with a Pool whose template changes or that goes, what a CRD's
//! removal deletes, what a RuntimeClass change does to pool pods, what a namespace move recreates,
//! what a chart bump changes (images) and leaves dead (values the new chart does not read), and
//! that the acceptance checks run again in the cluster (docs/render.md: the acceptance layer's
//! Job carries the revision it checks, and Flux re-creates it when that changes). That note is
//! the acceptance layer's Job's own: the Job its Flux Kustomization applies (not a chart's) with
//! the namespace and name the head's profile gives it ([`AcceptanceJob`]); a Job the change
//! annotates the same way anywhere else is an ordinary Job.
//!
//! The facts (`../shared/reference/opensandbox.md` §4, `real-controllers.md`, docs/verify.md):
//! the controller labels each pool pod with the revision of the template it was made from and
//! replaces idle pods of an older revision (rolling, `updateStrategy.maxUnavailable`), skipping
//! allocated ones; a Pool's pods are owned by it (deleted with it), and a BatchSandbox can only
//! use a Pool of its own namespace; a CRD's deletion deletes every object of its kind; kubelet
//! reads a pod's RuntimeClass when the pod starts; Flux prunes what a Kustomization no longer
//! applies (`prune: true`).

use std::collections::BTreeSet;

use serde_json::Value;

use super::charts::Expansion;
use crate::changeset::{Action, Change};
use crate::components::pools::POOL;
use crate::object::{Object, ObjectRef};

/// The Job osbx's acceptance layer renders, as the head's profile names it: the layer (its Flux
/// Kustomization) and the Job's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AcceptanceJob {
    /// The acceptance layer's name.
    pub layer: String,
    /// `Job/<acceptance.namespace>/<acceptance.name>`.
    pub job: ObjectRef,
}

impl AcceptanceJob {
    /// The acceptance layer's Job of `profile` (`None`: it renders no acceptance layer).
    pub(crate) fn of(profile: &crate::profile::Profile) -> Option<Self> {
        let (acceptance, layer) = profile.acceptance()?;
        Some(Self { layer: layer.name.clone(), job: acceptance.job() })
    }

    /// Whether the change in `own`'s layer is this Job.
    fn is(&self, id: &ObjectRef, own: &Own<'_>) -> bool {
        !own.from_chart
            && own.layer == self.layer
            && crate::components::acceptance::JOB.is(&id.gvk)
            && id.namespace == self.job.namespace
            && id.name == self.job.name
    }
}

/// The changed object as its own layer holds it on each side (another layer may hold an object
/// of the same identity).
pub(crate) struct Own<'a> {
    /// The layer (its Flux Kustomization).
    pub layer: &'a str,
    /// The object before, in that layer.
    pub before: Option<&'a Object>,
    /// The object after, in that layer.
    pub after: Option<&'a Object>,
    /// Whether a chart renders it (a HelmRelease of the layer), not the layer's Flux objects.
    pub from_chart: bool,
}

/// Both sides of one cluster, as the notes need them.
pub(crate) struct Sides<'a> {
    /// Every object before (Flux's and the charts').
    pub before: Vec<&'a Object>,
    /// Every object after.
    pub after: Vec<&'a Object>,
    /// The charts the base expands, by HelmRelease.
    pub charts_before: &'a [(ObjectRef, Expansion)],
    /// The charts the head expands, by HelmRelease.
    pub charts_after: &'a [(ObjectRef, Expansion)],
    /// The acceptance layer's Job, as the head's profile renders it (`None`: no such layer).
    pub acceptance: Option<&'a AcceptanceJob>,
}

/// The notes on `change`, an object of `own`'s layer (empty when it means nothing particular
/// for sandboxes).
pub(crate) fn notes(change: &Change, own: &Own<'_>, sides: &Sides<'_>) -> Vec<String> {
    let id = &change.id;
    let (before, after) = (own.before, own.after);
    let mut out = Vec::new();
    match id.kind() {
        "Pool" if POOL.is(&id.gvk) => pool(change, before, after, sides, &mut out),
        "CustomResourceDefinition" => crd(change, before, after, sides, &mut out),
        "RuntimeClass" => runtime_class(change, before, after, sides, &mut out),
        "Namespace" => namespace(change, sides, &mut out),
        "Job" if sides.acceptance.is_some_and(|a| a.is(id, own)) => acceptance_run(before, after, &mut out),
        _ if crate::flux::HELM_RELEASE.is(&id.gvk) => release(id, sides, &mut out),
        _ => {}
    }
    out
}

/// The acceptance layer's Job at a new revision: the checks run again. The revision is said
/// only when it is one osbx renders (16 hex digits): the objects may come from a pull request.
fn acceptance_run(before: Option<&Object>, after: Option<&Object>, out: &mut Vec<String>) {
    use crate::components::acceptance::{is_revision, job_revision};
    let Some(new) = after.and_then(job_revision) else { return };
    if before.and_then(job_revision) == Some(new) {
        return;
    }
    let at = if is_revision(new) { format!(" at revision {new}") } else { String::new() };
    out.push(format!(
        "the acceptance checks run again in the cluster{at}: Flux re-creates this Job (its spec is immutable), and this layer, with every layer that dependsOn it, is Ready only once they pass"
    ));
}

fn pool_max(pool: Option<&Object>) -> String {
    pool.and_then(|p| p.value["spec"]["capacitySpec"]["poolMax"].as_i64()).map_or_else(|| "?".into(), |n| n.to_string())
}

/// The Pool of the same name on the other side, in another namespace.
fn moved<'a>(id: &ObjectRef, objects: &[&'a Object]) -> Option<&'a Object> {
    objects.iter().copied().find(|o| POOL.is(&o.id.gvk) && o.id.name == id.name && o.id.namespace != id.namespace)
}

fn pool(change: &Change, before: Option<&Object>, after: Option<&Object>, sides: &Sides<'_>, out: &mut Vec<String>) {
    let ns = change.id.namespace.as_deref().unwrap_or_default();
    match change.action {
        Action::Configured => {
            let (b, a) = (before.map(|o| &o.value["spec"]), after.map(|o| &o.value["spec"]));
            if b.map(|s| &s["template"]) != a.map(|s| &s["template"]) {
                out.push(format!(
                    "template changed: the OpenSandbox controller replaces this pool's idle pods with pods of the new template (a new revision; at most poolMax = {} pods, rolling by updateStrategy.maxUnavailable); allocated sandboxes keep running on their old pods until released",
                    pool_max(after)
                ));
            }
            if b.map(|s| &s["capacitySpec"]) != a.map(|s| &s["capacitySpec"]) {
                let cap = |s: Option<&Value>| {
                    let c = s.map(|s| &s["capacitySpec"]).cloned().unwrap_or(Value::Null);
                    format!("buffer {}–{}, pool {}–{}", c["bufferMin"], c["bufferMax"], c["poolMin"], c["poolMax"])
                };
                out.push(format!("capacity {} → {}: the controller scales the pool's idle pods to it", cap(b), cap(a)));
            }
        }
        Action::Deleted => match moved(&change.id, &sides.after) {
            Some(to) => out.push(format!(
                "moved from namespace {ns} to {}: this Pool is deleted with its pods and every sandbox allocated from it (a BatchSandbox uses a Pool of its own namespace); the new one fills from nothing",
                to.id.namespace.as_deref().unwrap_or_default()
            )),
            None => out.push(
                "the Pool is deleted: its pods go with it, and so does every sandbox allocated from it".to_owned(),
            ),
        },
        Action::Created => {
            if let Some(from) = moved(&change.id, &sides.before) {
                out.push(format!(
                    "moved here from namespace {}: a new Pool, filled from nothing (up to poolMax = {}); sandboxes are created here from now on",
                    from.id.namespace.as_deref().unwrap_or_default(),
                    pool_max(after)
                ));
            }
        }
        Action::Unchanged | Action::Skipped => {}
    }
}

/// Whether `crd` comes from a chart's `crds/` directory on that side.
fn from_crds_dir(id: &ObjectRef, charts: &[(ObjectRef, Expansion)]) -> Option<(String, String)> {
    charts.iter().find_map(|(release, e)| {
        e.objects.iter().any(|(o, crds)| *crds && o.id == *id).then(|| (release.to_string(), e.upgrade_crds.clone()))
    })
}

fn crd(change: &Change, before: Option<&Object>, after: Option<&Object>, sides: &Sides<'_>, out: &mut Vec<String>) {
    let spec = |o: Option<&Object>| o.map_or(Value::Null, |o| o.value["spec"].clone());
    let kind = spec(before.or(after))["names"]["kind"].as_str().unwrap_or("object").to_owned();
    let what = if kind == "Pool" || kind == "BatchSandbox" {
        format!("every {kind} in the cluster (with their pods and sandboxes)")
    } else {
        format!("every {kind} in the cluster")
    };
    match change.action {
        Action::Deleted => match from_crds_dir(&change.id, sides.charts_before) {
            Some((release, _)) => out.push(format!(
                "dropped from the crds/ directory of {release}'s chart: Helm never deletes those, so the CRD and {what} stay"
            )),
            None => out.push(format!("the CRD is deleted, and with it {what}")),
        },
        Action::Configured => {
            if let Some((release, policy)) = from_crds_dir(&change.id, sides.charts_after)
                && policy == "Skip"
            {
                out.push(format!(
                    "from the crds/ directory of {release}'s chart: helm-controller's upgrade skips those (upgrade.crds: Skip), so this change does not reach the cluster"
                ));
                return;
            }
            let versions = |s: &Value| -> Vec<String> {
                s["versions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|v| v["served"] == true)
                    .filter_map(|v| v["name"].as_str().map(str::to_owned))
                    .collect()
            };
            let (b, a) = (versions(&spec(before)), versions(&spec(after)));
            if b == a {
                out.push(format!("the {kind} schema changes: objects that no longer validate fail at their next write"));
            } else {
                out.push(format!(
                    "served versions {} → {}: {kind} objects stored at a version no longer served cannot be read",
                    b.join(", "),
                    a.join(", ")
                ));
            }
        }
        _ => {}
    }
}

/// The pools (by their class) that run under `class`, on a side.
fn pools_of(class: &str, objects: &[&Object]) -> Vec<String> {
    objects
        .iter()
        .filter(|o| POOL.is(&o.id.gvk) && o.value["spec"]["template"]["spec"]["runtimeClassName"] == class)
        .map(|o| o.id.to_string())
        .collect()
}

fn runtime_class(
    change: &Change,
    before: Option<&Object>,
    after: Option<&Object>,
    sides: &Sides<'_>,
    out: &mut Vec<String>,
) {
    let class = &change.id.name;
    let pools = pools_of(class, if change.action == Action::Deleted { &sides.before } else { &sides.after });
    let on = if pools.is_empty() { String::new() } else { format!(" ({})", pools.join(", ")) };
    match change.action {
        Action::Configured => {
            let field = |o: Option<&Object>, f: &str| o.map_or(Value::Null, |o| o.value[f].clone());
            let handler = (field(before, "handler"), field(after, "handler"));
            let what = if handler.0 == handler.1 {
                "its overhead or scheduling".to_owned()
            } else {
                format!("its handler {} → {}", handler.0, handler.1)
            };
            out.push(format!(
                "RuntimeClass {class} changes {what}: pods of the pools that use it{on} take it when they start; running pods and their sandboxes keep what they started with"
            ));
        }
        Action::Deleted => out.push(format!(
            "RuntimeClass {class} is deleted: pools that use it{on} can start no new pod (the API server refuses pods naming a missing RuntimeClass)"
        )),
        Action::Created if !pools.is_empty() => out.push(format!("RuntimeClass {class} for{on}")),
        _ => {}
    }
}

fn namespace(change: &Change, sides: &Sides<'_>, out: &mut Vec<String>) {
    let ns = &change.id.name;
    let in_ns = |objects: &[&Object]| -> BTreeSet<(String, String)> {
        objects
            .iter()
            .filter(|o| o.id.namespace.as_deref() == Some(ns.as_str()))
            .map(|o| (o.id.kind().to_owned(), o.id.name.clone()))
            .collect()
    };
    match change.action {
        Action::Deleted => {
            let gone = in_ns(&sides.before);
            // Where the same objects reappear: new there (an object of that kind and name each
            // namespace has, a Role of osbx's acceptance layer say, moves nowhere).
            let before: BTreeSet<&crate::object::ObjectRef> = sides.before.iter().map(|o| &o.id).collect();
            let to: BTreeSet<&str> = sides
                .after
                .iter()
                .filter(|o| gone.contains(&(o.id.kind().to_owned(), o.id.name.clone())) && !before.contains(&o.id))
                .filter_map(|o| o.id.namespace.as_deref())
                .collect();
            if to.is_empty() {
                out.push(format!("Flux prunes namespace {ns}: everything in it is deleted"));
            } else {
                out.push(format!(
                    "namespace {ns} moves to {}: its objects are created there and the old ones pruned with the namespace (pods, and sandboxes on them, are not moved but recreated)",
                    to.into_iter().collect::<Vec<_>>().join(", ")
                ));
            }
        }
        Action::Created if in_ns(&sides.before).is_empty() && !in_ns(&sides.after).is_empty() => {
            out.push(format!("namespace {ns} is new: everything in it is created"));
        }
        _ => {}
    }
}

/// The images a chart's objects pull ([`Object::images`]): `object container` → image.
fn images(e: &Expansion) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = e
        .objects
        .iter()
        .flat_map(|(o, _)| o.images().into_iter().map(|(c, image)| (format!("{}/{c}", o.id.name), image)))
        .collect();
    out.sort();
    out
}

fn release(id: &ObjectRef, sides: &Sides<'_>, out: &mut Vec<String>) {
    let find = |charts: &[(ObjectRef, Expansion)]| charts.iter().find(|(r, _)| r == id).map(|(_, e)| e).cloned();
    let (before, after) = (find(sides.charts_before), find(sides.charts_after));
    if let Some(a) = &after {
        let base_unread: Vec<Vec<String>> = before.as_ref().map(|b| b.unread.clone()).unwrap_or_default();
        let new_unread: Vec<String> =
            a.unread.iter().filter(|p| !base_unread.contains(p)).map(|p| p.join(".")).collect();
        if !new_unread.is_empty() {
            out.push(format!(
                "values chart {} {} does not read (dead configuration: a key the chart renamed or dropped?): {}",
                a.chart.name,
                a.chart.version,
                new_unread.join(", ")
            ));
        }
    }
    let (Some(b), Some(a)) = (before, after) else { return };
    if b.chart.name != a.chart.name || b.chart.version != a.chart.version {
        let app = match (&b.chart.app_version, &a.chart.app_version) {
            (Some(x), Some(y)) if x != y => format!(" (app {x} → {y})"),
            _ => String::new(),
        };
        out.push(format!("chart {} {} → {} {}{app}", b.chart.name, b.chart.version, a.chart.name, a.chart.version));
    }
    let (old, new) = (images(&b), images(&a));
    let mut changed = Vec::new();
    for (who, image) in &new {
        match old.iter().find(|(w, _)| w == who) {
            Some((_, was)) if was != image => changed.push(format!("{who}: {was} → {image}")),
            None => changed.push(format!("{who}: new, {image}")),
            _ => {}
        }
    }
    for (who, was) in old.iter().filter(|(w, _)| !new.iter().any(|(n, _)| n == w)) {
        changed.push(format!("{who}: gone ({was})"));
    }
    if !changed.is_empty() {
        out.push(format!("images: {}", changed.join("; ")));
    }
}

#[cfg(test)]
mod tests;
