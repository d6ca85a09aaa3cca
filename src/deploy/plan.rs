//! An apply's plan: everything read and decided before the first write.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::execute::flux_kustomization;
use super::{DeployError, Layer, ids, inventory, kept, objects};
use crate::changeset::Action;
use crate::cluster::Cluster;
use crate::cluster::inventory::Inventory;
use crate::cluster::need::Need;
use crate::cluster::preflight;
use crate::cluster::ssa::{self, PlanOptions, Planned};
use crate::object::{Gvk, ObjectRef};
use crate::profile::Profile;

/// Apply options.
#[derive(Debug, Clone, Copy)]
pub struct ApplyOptions {
    /// Plan and print; write nothing.
    pub dry_run: bool,
    /// Delete objects osbx created before and no longer renders.
    pub prune: bool,
    /// Wait for readiness after each layer.
    pub wait: bool,
    /// Overall readiness deadline.
    pub timeout: Duration,
    /// Poll interval while waiting.
    pub interval: Duration,
    /// Take ownership of fields other managers own.
    pub force_conflicts: bool,
}

impl ApplyOptions {
    pub(super) fn plan_options(&self) -> PlanOptions {
        PlanOptions { dry_run_new: self.dry_run, force_conflicts: self.force_conflicts }
    }
}

/// What an apply will do, read before anything is written: the inventory and the plan of every
/// object whose kind the cluster serves (objects of kinds a layer's chart installs are planned
/// when their layer comes).
#[derive(Debug, Clone)]
pub struct Plan {
    /// The inventory as it is on the cluster.
    pub previous: Inventory,
    /// The plan of each object, by identity.
    pub planned: BTreeMap<ObjectRef, Planned>,
}

impl Plan {
    /// The permissions the writes of this plan need, reviewed before the first write: the
    /// server-side apply of each new or changed object ([`ssa::write_needs`]); with `--prune`,
    /// reading and deleting what the inventory holds and the render no longer has; the inventory
    /// ConfigMap with any write. When the apply then waits, also the reads of the waits that the
    /// plan's own reads did not prove: objects the plan read with one LIST, and the Flux
    /// Kustomizations of external layers. An unchanged object needs nothing beyond the read that
    /// already happened, so a no-op apply reviews nothing.
    #[must_use]
    pub fn needs(&self, profile: &Profile, layers: &[Layer], opts: &ApplyOptions) -> Vec<Need> {
        let mut out = BTreeSet::new();
        for p in self.planned.values() {
            out.extend(ssa::write_needs(&p.id, p.action));
        }
        if opts.prune {
            out.extend(self.previous.stale(&kept(profile, layers)).iter().flat_map(ssa::prune_needs));
        }
        let later = self.planned.values().any(|p| p.action == Action::Skipped);
        if !out.is_empty() || later {
            out.extend(Inventory::write_needs(&self.previous.config_map));
            if opts.wait && !opts.dry_run {
                out.extend(wait_needs(profile, layers, true));
            }
        }
        out.into_iter().collect()
    }
}

/// The reads of the waits (readiness of each layer's objects, and first of the external layers
/// it depends on): `get` on each object (`only_listed`: only on those the plan reads with a
/// LIST, the others being read by name already) and on each external layer's Kustomization.
fn wait_needs(profile: &Profile, layers: &[Layer], only_listed: bool) -> Vec<Need> {
    let ids = ids(layers);
    let objects = if only_listed { ssa::listed(ids.iter()) } else { ids.iter().collect() };
    let deps = layers.iter().flat_map(|l| &l.external_deps).map(|d| flux_kustomization(profile, d));
    objects.into_iter().map(|id| Need::on("get", id)).chain(deps.map(|id| Need::on("get", &id))).collect()
}

/// Every permission an apply of `layers` can need, whatever the cluster holds: the plan's reads,
/// creating and changing every object (the API key Secret the profile names included), the
/// inventory, the Flux namespace, the waits' reads, and with `--prune` reading and deleting any
/// object of the rendered kinds in the rendered namespaces (the names of what is pruned are known
/// only from the inventory). `osbx rbac` turns this into roles; preflight reviews it all when a
/// read is refused, to name everything that is missing at once.
#[must_use]
pub fn access(profile: &Profile, layers: &[Layer], opts: &ApplyOptions) -> Vec<Need> {
    let ids = kept(profile, layers);
    let inventory = inventory(profile);
    let mut out: BTreeSet<Need> = ssa::read_needs(ids.iter()).into_iter().collect();
    out.extend(ids.iter().flat_map(|id| ssa::write_needs(id, Action::Created)));
    out.insert(Inventory::read_need(&inventory));
    out.extend(Inventory::write_needs(&inventory));
    out.insert(preflight::flux_namespace_need(&profile.cluster.flux_namespace));
    if opts.wait && !opts.dry_run {
        out.extend(wait_needs(profile, layers, false));
    }
    if opts.prune {
        let kinds: BTreeSet<(&Gvk, Option<&str>)> = ids.iter().map(|id| (&id.gvk, id.namespace.as_deref())).collect();
        for (kind, ns) in kinds {
            out.extend(["get", "delete"].map(|verb| Need::any(verb, kind, ns)));
        }
    }
    out.into_iter().collect()
}

/// Read everything an apply needs to decide what to write, in one wave: the inventory and the
/// live state of every rendered object (one LIST per kind and namespace where that saves
/// requests), planned as [`ssa::plan_all`] does. Nothing is written.
///
/// # Errors
/// [`DeployError`] when a read or a dry-run fails.
pub async fn plan(
    cluster: &Cluster,
    profile: &Profile,
    layers: &[Layer],
    opts: &ApplyOptions,
) -> Result<Plan, DeployError> {
    let (previous, planned) = futures::try_join!(
        async { Inventory::load(cluster, inventory(profile)).await.map_err(DeployError::from) },
        async { ssa::plan_all(cluster, objects(layers), opts.plan_options()).await.map_err(DeployError::from) },
    )?;
    Ok(Plan { previous, planned: planned.into_iter().map(|p| (p.id.clone(), p)).collect() })
}
