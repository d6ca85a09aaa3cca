//! An apply's plan: everything read and decided before the first write.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::{DeployError, Layer, inventory, kept, objects};
use crate::changeset::Action;
use crate::cluster::Cluster;
use crate::cluster::inventory::Inventory;
use crate::cluster::ssa::{self, PlanOptions, Planned};
use crate::object::ObjectRef;
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
    /// The writes this plan makes: server-side apply of a new object needs `create` and
    /// `patch`, of a changed one `patch`; `--prune` needs `delete` for what the inventory holds
    /// and the render no longer has; any write also writes the inventory ConfigMap. An
    /// unchanged object needs nothing beyond the read that already happened.
    #[must_use]
    pub fn needs(&self, profile: &Profile, layers: &[Layer], prune: bool) -> Vec<(ObjectRef, &'static str)> {
        let mut out = BTreeSet::new();
        for p in self.planned.values() {
            let verbs: &[&'static str] = match p.action {
                Action::Created => &["create", "patch"],
                Action::Configured => &["patch"],
                _ => &[],
            };
            out.extend(verbs.iter().map(|verb| (p.id.clone(), *verb)));
        }
        if prune {
            out.extend(self.previous.stale(&kept(profile, layers)).into_iter().map(|id| (id, "delete")));
        }
        let later = self.planned.values().any(|p| p.action == Action::Skipped);
        if !out.is_empty() || later {
            out.extend(["create", "patch"].map(|verb| (self.previous.config_map.clone(), verb)));
        }
        out.into_iter().collect()
    }
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
