//! An apply's plan: everything read and decided before the first write.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use super::{DeployError, Layer, flux_kustomization, ids, inventory, kept, objects, writable};
use crate::changeset::Action;
use crate::cluster::Cluster;
use crate::cluster::flux_applier::{FluxRender, OnConflict};
use crate::cluster::inventory::Inventory;
use crate::cluster::operation::{Objects, Operation};
use crate::cluster::preflight;
use crate::cluster::ssa::{self, PlanOptions, Planned};
use crate::object::{Gvk, ObjectRef};
use crate::profile::Profile;

/// How an apply runs (`osbx apply` flags).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ApplyOptions {
    /// Plan and print; write nothing.
    pub dry_run: bool,
    /// Delete objects osbx created before and no longer renders.
    pub prune: bool,
    /// Wait for readiness after each layer.
    pub wait: bool,
    /// Overall readiness deadline.
    pub timeout: Duration,
    /// While waiting, how often a kind the server does not serve yet is looked up again.
    pub interval: Duration,
    /// Take ownership of fields other managers own.
    pub force_conflicts: bool,
}

impl ApplyOptions {
    /// What to do about fields another manager owns: take them with `--force-conflicts`, else
    /// stop, unless they are Flux's applier's alone and `flux` is the render Flux applies.
    pub(super) fn on_conflict<'a>(&self, flux: &'a FluxRender) -> OnConflict<'a> {
        if self.force_conflicts { OnConflict::Force } else { OnConflict::Stop(flux) }
    }

    pub(super) fn plan_options<'a>(&self, flux: &'a FluxRender) -> PlanOptions<'a> {
        PlanOptions { dry_run_new: self.dry_run, on_conflict: self.on_conflict(flux) }
    }

    /// What the apply does beyond planning and writing the render.
    #[must_use]
    pub(crate) fn scope(&self) -> Scope {
        Scope { prune: self.prune, wait: self.wait && !self.dry_run }
    }
}

/// What an apply does beyond planning and writing the render: all its operations depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scope {
    /// Deletes what osbx created before and no longer renders (`--prune`).
    pub prune: bool,
    /// Waits for readiness after each layer (not `--dry-run`, not `--wait=false`).
    pub wait: bool,
}

/// What an apply will do, read before anything is written: the inventory and the plan of every
/// object whose kind the cluster serves (objects of kinds a layer's chart installs are planned
/// when their layer comes).
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// The inventory as it is on the cluster.
    pub previous: Inventory,
    /// The plan of each object, by identity.
    pub planned: BTreeMap<ObjectRef, Planned>,
    /// Whether the render is the one Flux applies (the Flux repository's pushed HEAD holds it),
    /// so that fields only Flux's applier owns may be taken over.
    pub flux: FluxRender,
}

impl Plan {
    /// The writes of this plan and what comes with them, reviewed before the first write: the
    /// server-side apply of each new or changed object ([`ssa::writing`]); when pruning, reading
    /// and deleting what the inventory holds and the render no longer has; the inventory
    /// ConfigMap with any write. When the apply then waits, also the waits: every object (read,
    /// then watched) and the Flux Kustomizations of external layers. A no-op apply reviews
    /// nothing: what it waits for is already ready when first read, and is not watched.
    #[must_use]
    pub(crate) fn operations(&self, profile: &Profile, layers: &[Layer], scope: Scope) -> Vec<Operation> {
        let mut out: Vec<Operation> = self.planned.values().filter_map(|p| ssa::writing(&p.id, p.action)).collect();
        if scope.prune {
            out.extend(self.previous.stale(&kept(profile, layers)).iter().flat_map(ssa::pruning));
        }
        let later = self.planned.values().any(|p| p.action == Action::Skipped);
        if !out.is_empty() || later {
            out.push(Inventory::writing(&self.previous.config_map));
            if scope.wait {
                out.extend(waits(profile, layers, ids(layers)));
            }
        }
        out
    }
}

/// The waits (readiness of each layer's objects, and first of the external layers it depends
/// on): each of `objects` and each external layer's Kustomization.
fn waits(profile: &Profile, layers: &[Layer], objects: Vec<ObjectRef>) -> Vec<Operation> {
    let deps = layers.iter().flat_map(|l| &l.external_deps).map(|d| flux_kustomization(profile, d));
    objects.into_iter().chain(deps).map(Operation::Wait).collect()
}

/// Everything an apply of `layers` can do, whatever the cluster holds: the plan's reads,
/// creating and changing every object (the Secrets the components read included), the
/// inventory, the Flux namespace, the waits, and when pruning reading and deleting any object
/// of the rendered kinds in the rendered namespaces (the names of what is pruned are known only
/// from the inventory). `osbx rbac` turns it into roles; preflight reviews it all when a read is
/// refused, to name everything that is missing at once.
#[must_use]
pub(crate) fn operations(profile: &Profile, layers: &[Layer], scope: Scope) -> Vec<Operation> {
    let ids = kept(profile, layers);
    let inventory = inventory(profile);
    let mut out = ssa::reading(ids.iter());
    out.extend(writable(profile, layers, &ids).filter_map(|id| ssa::writing(id, Action::Created)));
    out.push(Inventory::reading(&inventory));
    out.push(Inventory::writing(&inventory));
    out.push(preflight::reading_flux_namespace(&profile.cluster.flux_namespace));
    if scope.wait {
        out.extend(waits(profile, layers, ids.clone()));
    }
    if scope.prune {
        let kinds: BTreeSet<(&Gvk, Option<&String>)> = ids.iter().map(|id| (&id.gvk, id.namespace.as_ref())).collect();
        for (kind, ns) in kinds {
            let any = || Objects::Any(kind.clone(), ns.cloned());
            out.extend([Operation::Get(any()), Operation::Delete(any())]);
        }
    }
    out
}

/// Read everything an apply needs to decide what to write, in one wave: the inventory and the
/// live state of every rendered object (one LIST per kind and namespace where that saves
/// requests), planned as [`ssa::plan_all`] does. `flux` says whether the render is the one Flux
/// applies; it is awaited only once the reads are in (finding it out reads the Flux repository,
/// which need not hold the reads back). Nothing is written.
///
/// # Errors
/// [`DeployError`] when a read or a dry-run fails, or a dry-run conflicts with Flux's applier
/// while `flux` is not shown to be its render.
pub(crate) async fn plan(
    cluster: &Cluster,
    profile: &Profile,
    layers: &[Layer],
    opts: &ApplyOptions,
    flux: impl Future<Output = FluxRender>,
) -> Result<Plan, DeployError> {
    let (previous, (planned, flux)) = futures::try_join!(
        async { Inventory::load(cluster, inventory(profile)).await.map_err(DeployError::from) },
        async {
            let objects: Vec<_> = objects(layers).collect();
            let live = ssa::prefetch(cluster, objects.iter().map(|o| &o.id)).await?;
            let flux = flux.await;
            let planned = ssa::plan_read(cluster, objects, opts.plan_options(&flux), live).await?;
            Ok::<_, DeployError>((planned, flux))
        },
    )?;
    Ok(Plan { previous, planned: planned.into_iter().map(|p| (p.id.clone(), p)).collect(), flux })
}
