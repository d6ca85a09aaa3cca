//! Apply and diff a rendered profile against a cluster, layer by layer.
//!
//! Layers go in `dependsOn` order (see [`layers`]). An apply is planned before anything is
//! written ([`plan`]: the inventory and every object's live state, read in one wave) and then
//! carried out ([`execute`]): before a layer is applied, the Flux Kustomizations of the external
//! layers it depends on must be Ready (Flux would wait for them too); inside a layer the apply is
//! staged: CRDs, Namespaces and ClusterRoles first, then `*Class` kinds, each waited for
//! (Established/Active), then everything else. After a layer, its objects (including its Flux
//! Kustomization) are waited for, so the next layer finds what it needs, e.g. the Pool CRD the
//! chart of the previous layer installs. An inventory of what osbx created is kept in the
//! cluster for `--prune`.
//!
//! This module owns the sequences the commands run: [`apply`] (plan, preflight, execute) and
//! [`compare`], one comparison of the render with what it replaces, whose "before" is a live
//! cluster (`osbx diff`: a server-side dry-run of every object) or another render (`osbx diff
//! --base`: the layers as a git ref holds them, `crate::review`).

mod execute;
mod plan;
mod supply;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;

pub(crate) use self::execute::ApplyReport;
use self::execute::execute;
use self::plan::plan;
pub(crate) use self::plan::{ApplyOptions, Scope, operations};
pub(crate) use self::supply::{Decryption, Given, decryption_secret, supply};
use crate::changeset::{Action, ChangeSet};
use crate::cluster::flux_applier::FluxRender;
use crate::cluster::flux_applier::OnConflict;
use crate::cluster::inventory::Inventory;
use crate::cluster::operation::{Objects, Operation};
use crate::cluster::preflight::{self, PreflightError};
use crate::cluster::ssa::{self, ApplyError, PlanOptions};
use crate::cluster::wait::WaitError;
use crate::cluster::{Cluster, ClusterError};
use crate::components::Supplied;
use crate::object::{Object, ObjectRef};
use crate::profile::Profile;
use crate::progress::Progress;
use crate::render::Rendered;

/// One layer to apply.
#[derive(Debug, Clone)]
pub struct Layer {
    /// Name (also its Flux Kustomization's name).
    pub name: String,
    /// External layers it depends on (their Kustomizations must be Ready first).
    pub external_deps: Vec<String>,
    /// Its objects, its Flux Kustomization included, in apply order.
    pub objects: Vec<Object>,
}

/// Every object of `layers`, in apply order.
#[must_use]
pub fn ids(layers: &[Layer]) -> Vec<ObjectRef> {
    objects(layers).map(|o| o.id.clone()).collect()
}

/// The Flux objects of `layers` (what `verify`'s `flux.layers` check reads).
#[must_use]
pub(crate) fn flux_objects(layers: &[Layer]) -> Vec<ObjectRef> {
    ids(layers).into_iter().filter(|id| crate::flux::is_flux(&id.gvk)).collect()
}

fn objects(layers: &[Layer]) -> impl Iterator<Item = &Object> {
    layers.iter().flat_map(|l| &l.objects)
}

/// Why a deploy could not be planned or applied.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeployError {
    /// An object could not be applied.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// The cluster failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// Definitions (CRDs, Namespaces) did not become ready.
    #[error("{0}")]
    Definitions(WaitError),
    /// A check before the first write failed (Flux missing, a permission lacking).
    #[error(transparent)]
    Preflight(#[from] PreflightError),
}

impl DeployError {
    /// Whether the server refused a read or write for lack of permission (403).
    #[must_use]
    pub(crate) fn forbidden(&self) -> bool {
        let api_403 =
            |e: &ClusterError| matches!(e, ClusterError::Api { error: kube::Error::Api(s), .. } if s.code == 403);
        match self {
            DeployError::Apply(ApplyError::Forbidden { .. }) => true,
            DeployError::Apply(ApplyError::Cluster(e)) | DeployError::Cluster(e) => api_403(e),
            DeployError::Apply(_) | DeployError::Definitions(_) | DeployError::Preflight(_) => false,
        }
    }
}

/// The layers of a render in `dependsOn` order (Kahn's algorithm; ties in profile order).
#[must_use]
pub fn layers(profile: &Profile, rendered: &Rendered) -> Vec<Layer> {
    let rendered_names: Vec<&str> = profile.rendered_layers().map(|l| l.name.as_str()).collect();
    let mut by_layer: BTreeMap<String, Vec<Object>> = BTreeMap::new();
    for o in rendered.objects() {
        by_layer.entry(o.layer).or_default().push(o.object);
    }
    let mut done: BTreeSet<&str> = BTreeSet::new();
    let mut out = Vec::new();
    while out.len() < rendered_names.len() {
        let next = profile
            .rendered_layers()
            .filter(|l| !done.contains(l.name.as_str()))
            .find(|l| l.depends_on.iter().all(|d| done.contains(d.as_str()) || !rendered_names.contains(&d.as_str())));
        // Validation rejects cycles; stop rather than loop if one slipped through.
        let Some(layer) = next else { break };
        done.insert(&layer.name);
        let mut objects = by_layer.remove(&layer.name).unwrap_or_default();
        objects.sort_by(|a, b| a.id.cmp(&b.id));
        out.push(Layer {
            name: layer.name.clone(),
            external_deps: layer.depends_on.iter().filter(|d| !rendered_names.contains(&d.as_str())).cloned().collect(),
            objects,
        });
    }
    out
}

/// The Secrets the rendered components read whose values the user supplies to apply (the
/// OpenSandbox API key Secret, [`crate::components::Component::supplied`]), each with the layer
/// that renders its component.
fn supplied(profile: &Profile) -> Vec<(String, Supplied)> {
    profile
        .site()
        .layers
        .iter()
        .filter_map(|(_, layer, c)| (c.supplied)(&profile.sections).map(|s| ((*layer).to_owned(), s)))
        .collect()
}

/// Add the Secrets the components read, holding `value` (the API key given to this run), to the
/// layers that render those components, so that apply creates or rotates them like any other
/// object (and diff masks them). The value is never part of the render, so it never reaches git.
pub(crate) fn add_supplied_secrets(profile: &Profile, layers: &mut [Layer], value: &str) {
    let mut objects = Vec::new();
    for (layer_name, supplied) in supplied(profile) {
        let mut data = BTreeMap::new();
        data.insert(supplied.key.clone(), k8s_openapi::ByteString(value.as_bytes().to_vec()));
        let secret = k8s_openapi::api::core::v1::Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(supplied.secret.name.clone()),
                namespace: supplied.secret.namespace.clone(),
                labels: Some(crate::mark::owned_labels()),
                ..Default::default()
            },
            data: Some(data),
            type_: Some("Opaque".into()),
            ..Default::default()
        };
        let mut value = serde_json::to_value(&secret).unwrap_or_default();
        value["apiVersion"] = supplied.secret.gvk.api_version().into();
        value["kind"] = supplied.secret.gvk.kind.clone().into();
        if let Ok(object) = Object::new(value) {
            objects.push((layer_name, object));
        }
    }
    add_objects(layers, objects);
}

/// Add objects that are not part of the render to the layers named (the Secrets a run supplies
/// or decrypts, the decryption key): apply creates or changes them like any other object, in
/// their layer's stage, and diff masks Secrets. An object for a layer not rendered is dropped.
pub(crate) fn add_objects(layers: &mut [Layer], objects: Vec<(String, Object)>) {
    for (layer_name, object) in objects {
        let Some(layer) = layers.iter_mut().find(|l| l.name == layer_name) else { continue };
        layer.objects.retain(|o| o.id != object.id);
        layer.objects.push(object);
        layer.objects.sort_by(|a, b| a.id.cmp(&b.id));
    }
}

/// What osbx keeps on the cluster for this profile: every rendered object, the supplied Secrets
/// of its components even when this run was given no value (they are written only when one is,
/// and must never be pruned because a later run was not), and with `secrets.sops` the
/// decryption Secret (created once, by the first run given the key).
#[must_use]
pub fn kept(profile: &Profile, layers: &[Layer]) -> Vec<ObjectRef> {
    let mut ids = ids(layers);
    let decryption = crate::secrets::decryption_secret(profile);
    for id in supplied(profile).into_iter().map(|(_, s)| s.secret).chain(decryption) {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids
}

/// Of `kept`, what an apply or diff may write: all of it but the decryption Secret, which only
/// an apply asked to create it writes (`--create-decryption-secret`: the layers then hold it).
/// It is still read, and kept out of prune.
fn writable<'a>(profile: &Profile, layers: &'a [Layer], kept: &'a [ObjectRef]) -> impl Iterator<Item = &'a ObjectRef> {
    let decryption = crate::secrets::decryption_secret(profile);
    kept.iter().filter(move |id| {
        decryption.as_ref() != Some(*id) || layers.iter().flat_map(|l| &l.objects).any(|o| o.id == **id)
    })
}

/// Creating the cluster's decryption Secret, which only `apply --create-decryption-secret`
/// does (none without `secrets.sops`).
#[must_use]
pub(crate) fn creating_decryption_secret(profile: &Profile) -> Vec<Operation> {
    crate::secrets::decryption_secret(profile).and_then(|id| ssa::writing(&id, Action::Created)).into_iter().collect()
}

/// The inventory ConfigMap of a profile on its cluster.
#[must_use]
pub fn inventory(profile: &Profile) -> ObjectRef {
    Inventory::config_map(&profile.cluster.flux_namespace, profile.name(), &profile.cluster.name)
}

/// Apply `layers` to `cluster`: plan everything (one read wave), review before the first write
/// that Flux is there and the caller may do what the plan needs (and `also`: what a verify run
/// after the apply will do), then apply layer by layer, prune and wait. `flux` (whether the
/// render is the one Flux applies) is awaited only after the plan's reads. When a read of the plan
/// is refused, every permission the apply could need is reviewed, so the error names all that is
/// missing, not only the read.
///
/// # Errors
/// [`DeployError`]: a preflight failure, a refused or failed apply, the cluster failing.
pub(crate) async fn apply(
    cluster: &Cluster,
    profile: &Profile,
    layers: &[Layer],
    opts: &ApplyOptions,
    flux: impl Future<Output = FluxRender>,
    also: Vec<Operation>,
    progress: &dyn Progress,
) -> Result<ApplyReport, DeployError> {
    // The Flux namespace, which preflight needs, is read in the plan's burst.
    let flux_ns = &profile.cluster.flux_namespace;
    let (planned, flux_ns_found) =
        futures::join!(plan(cluster, profile, layers, opts, flux), preflight::flux_namespace(cluster, flux_ns));
    let planned = match planned {
        Ok(planned) => planned,
        Err(e) if e.forbidden() => {
            let mut operations = operations(profile, layers, opts.scope());
            operations.extend(also);
            preflight::review(cluster, &operations, "this apply").await?;
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    let mut operations = planned.operations(profile, layers, opts.scope());
    operations.extend(also);
    preflight::check(cluster, &ids(layers), &operations, flux_ns, flux_ns_found).await?;
    crate::timing::mark("checked");
    let report = execute(cluster, profile, layers, planned, opts, progress).await;
    crate::timing::mark("applied");
    report
}

/// What the render is compared with.
pub(crate) enum Before<'a> {
    /// A live cluster: what a server-side apply would make of each object, and what osbx
    /// created there before for this profile and no longer renders (its inventory).
    Cluster(&'a Cluster, &'a Profile),
    /// Another render of the same layers (the objects as a git ref holds them): objects are
    /// matched by identity within their layer (an object that moves to another layer is pruned
    /// by one Flux Kustomization and created by the other).
    Render(&'a [Layer]),
}

/// Compare `layers` with what they replace: created, configured (with a unified diff, Secret
/// values masked), unchanged, deleted.
///
/// # Errors
/// [`DeployError`] when a dry-run is refused (every permission the diff needs is then reviewed
/// and named) or the cluster fails; comparing two renders cannot fail.
pub(crate) async fn compare(before: Before<'_>, layers: &[Layer]) -> Result<ChangeSet, DeployError> {
    match before {
        Before::Render(old) => Ok(between(old, layers)),
        Before::Cluster(cluster, profile) => match diff(cluster, profile, layers).await {
            Err(e) if e.forbidden() => {
                preflight::review(cluster, &diff_operations(profile, layers, false), "this diff").await?;
                Err(e)
            }
            other => other,
        },
    }
}

/// Two renders compared layer by layer (pure): each object of `after` created or configured
/// (or unchanged) against the same object in the same layer of `before`, then each object of
/// `before` no longer in its layer, deleted. Layers in `after`'s order, then those only `before`
/// has.
#[must_use]
fn between(before: &[Layer], after: &[Layer]) -> ChangeSet {
    let mut changes = ChangeSet::default();
    let old_layer = |name: &str| before.iter().find(|l| l.name == name).map_or(&[][..], |l| &l.objects[..]);
    for layer in after {
        let old = old_layer(&layer.name);
        for o in &layer.objects {
            let was = old.iter().find(|b| b.id == o.id);
            changes.push(crate::cluster::diff::between(&o.id, was.map(|b| &b.value), Some(&o.value)));
        }
        for b in old.iter().filter(|b| !layer.objects.iter().any(|o| o.id == b.id)) {
            changes.push(crate::cluster::diff::between(&b.id, Some(&b.value), None));
        }
    }
    for layer in before.iter().filter(|b| !after.iter().any(|a| a.name == b.name)) {
        for b in &layer.objects {
            changes.push(crate::cluster::diff::between(&b.id, Some(&b.value), None));
        }
    }
    changes
}

/// Everything [`diff`] can do: the plan's reads, a server-side dry-run of creating or changing
/// every object (the Secrets the components read included), reading the inventory and, with
/// `stale`, reading any object of the rendered kinds in the rendered namespaces (what the
/// inventory lists and the render no longer has, shown as to be pruned).
#[must_use]
pub(crate) fn diff_operations(profile: &Profile, layers: &[Layer], stale: bool) -> Vec<Operation> {
    let ids = kept(profile, layers);
    let mut out = ssa::reading(ids.iter());
    out.extend(writable(profile, layers, &ids).filter_map(|id| ssa::writing(id, Action::Created)));
    out.push(Inventory::reading(&inventory(profile)));
    if stale {
        out.extend(ids.iter().map(|id| Operation::Get(Objects::Any(id.gvk.clone(), id.namespace.clone()))));
    }
    out
}

/// Diff every rendered object against the cluster (server-side dry-run), plus the objects osbx
/// created before and no longer renders (as `deleted`).
///
/// # Errors
/// [`DeployError`] when a dry-run is refused or the cluster fails.
async fn diff(cluster: &Cluster, profile: &Profile, layers: &[Layer]) -> Result<ChangeSet, DeployError> {
    let (planned, inventory) = futures::try_join!(
        async {
            // What the objects would become, whoever owns their fields now.
            ssa::plan_all(cluster, objects(layers), PlanOptions { dry_run_new: true, on_conflict: OnConflict::Force })
                .await
                .map_err(DeployError::from)
        },
        async { Inventory::load(cluster, inventory(profile)).await.map_err(DeployError::from) },
    )?;
    let mut changes = ChangeSet::default();
    for p in &planned {
        let mut change = p.change(true);
        if p.action == Action::Skipped {
            // Its CRD comes from another layer: show it as it would be created.
            change.action = Action::Created;
            change.diff = Some(crate::cluster::diff::unified(&change.id.to_string(), None, &p.desired));
        }
        changes.push(change);
    }
    for stale in inventory.stale(&kept(profile, layers)) {
        if let Some(mut change) = ssa::prune(cluster, &stale, true).await?
            && change.action == Action::Deleted
        {
            change.diff = Some(format!("{} will be deleted (osbx created it and no longer renders it)\n", change.id));
            changes.push(change);
        }
    }
    Ok(changes)
}

/// The Flux Kustomization of the layer `name` (a layer's `dependsOn` names these).
pub(super) fn flux_kustomization(profile: &Profile, name: &str) -> ObjectRef {
    crate::flux::KUSTOMIZATION.object(Some(&profile.cluster.flux_namespace), name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layers_of(profile: &str) -> Vec<Layer> {
        let loaded = crate::profile::load(&crate::profile::ProfileSource::Embedded(profile.into())).unwrap();
        let rendered = crate::commands::renderer(None).unwrap().render(&loaded).unwrap();
        layers(&loaded.profile, &rendered)
    }

    #[test]
    fn layers_follow_depends_on() {
        let order = |p| layers_of(p).into_iter().map(|l| l.name).collect::<Vec<_>>();
        assert_eq!(
            order("fresh-cluster"),
            ["kata", "spire-agents", "spire-smoke", "opensandbox", "opensandbox-pools", "acceptance"]
        );
        assert_eq!(order("homelab"), ["opensandbox", "opensandbox-pools"]);
    }

    #[test]
    fn external_dependencies_are_waited_for() {
        let l = layers_of("homelab");
        assert_eq!(l[0].external_deps, ["kata", "spire-agents"]);
        assert!(l[1].external_deps.is_empty());
    }
}
