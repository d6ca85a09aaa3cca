//! An apply: everything read and planned before the first write ([`plan`]), then carried out
//! layer by layer and stage by stage ([`execute`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use super::{DeployError, Layer, inventory_ref, prune_one, refs, values};
use crate::changeset::{Action, ChangeSet};
use crate::cluster::apply::{self as ssa, PlanOptions, Planned};
use crate::cluster::inventory::Inventory;
use crate::cluster::wait::{self, WaitError, WaitOptions};
use crate::cluster::{Cluster, RequestCounts};
use crate::object::{ObjectRef, Stage};
use crate::profile::Profile;
use crate::progress::Progress;

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

/// What an apply did.
#[derive(Debug, Serialize)]
pub struct ApplyReport {
    /// Every object and its action.
    pub changes: ChangeSet,
    /// Readiness: `None` when not waited for, else whether everything became ready.
    pub ready: Option<bool>,
    /// Why not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_ready: Option<String>,
    /// Requests made.
    pub requests: RequestCounts,
    /// Whether the readiness failure was terminal (fail fast) rather than a timeout.
    #[serde(skip)]
    pub failed: bool,
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
    pub fn needs(&self, layers: &[Layer], prune: bool) -> Vec<(ObjectRef, &'static str)> {
        let mut out = BTreeSet::new();
        for p in self.planned.values() {
            let verbs: &[&'static str] = match p.action {
                Action::Created => &["create", "patch"],
                Action::Configured => &["patch"],
                _ => &[],
            };
            out.extend(verbs.iter().map(|verb| (p.object.clone(), *verb)));
        }
        if prune {
            let current = refs(layers);
            out.extend(self.previous.stale(&current).into_iter().map(|object| (object, "delete")));
        }
        let later = self.planned.values().any(|p| p.action == Action::Skipped);
        if !out.is_empty() || later {
            let inventory = Inventory::config_map(&self.previous.namespace, &self.previous.name);
            out.extend(["create", "patch"].map(|verb| (inventory.clone(), verb)));
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
    let (inv_ns, inv_name) = inventory_ref(profile);
    let objects = values(layers);
    let plan_opts = PlanOptions { dry_run_new: opts.dry_run, force_conflicts: opts.force_conflicts };
    let (previous, planned) = futures::try_join!(
        async { Inventory::load(cluster, &inv_ns, &inv_name).await.map_err(DeployError::from) },
        async { ssa::plan_all(cluster, &objects, plan_opts).await.map_err(DeployError::from) },
    )?;
    Ok(Plan { previous, planned: planned.into_iter().map(|p| (p.object.clone(), p)).collect() })
}

/// Apply the layers as planned.
///
/// The inventory, with every object about to be applied already in it, is written together
/// with the first objects (a layer's Namespaces and CRDs), so an apply killed half-way leaves
/// nothing untracked; it is written again at the end only when that changed it (pruned objects,
/// objects of kinds a chart installed meanwhile). A layer's objects use the plan while it is
/// current: always with `--no-wait`; after a readiness wait they are read again.
///
/// # Errors
/// [`DeployError`] when an object cannot be applied; the partial change set so far is lost to
/// the caller only in the error case, which names the object in flight.
pub async fn execute(
    cluster: &Cluster,
    profile: &Profile,
    layers: &[Layer],
    plan: Plan,
    opts: &ApplyOptions,
    progress: &dyn Progress,
) -> Result<ApplyReport, DeployError> {
    let deadline = Instant::now() + opts.timeout;
    let Plan { previous, mut planned } = plan;
    let mut inventory = previous.clone();
    for p in planned.values().filter(|p| p.action != Action::Skipped) {
        inventory.record(&p.object, p.action == Action::Created);
    }
    // Written with the first objects (see `apply_layer`), before any other.
    let saved = inventory.clone();
    let mut intent = (!opts.dry_run && inventory != previous).then(|| inventory.clone());
    let mut changes = ChangeSet::default();
    let mut not_ready: Option<WaitError> = None;
    let wait_opts = WaitOptions { interval: opts.interval, deadline, fail_fast: true };

    for layer in layers {
        if opts.wait && !opts.dry_run && !layer.external_deps.is_empty() {
            progress.layer(&layer.name, "waiting for dependencies");
            let deps: Vec<ObjectRef> = layer.external_deps.iter().map(|d| flux_kustomization(profile, d)).collect();
            if let Err(e) = wait::wait_for_set(cluster, &deps, &wait_opts, progress).await {
                not_ready = Some(e);
                break;
            }
            planned.clear();
        }
        progress.layer(&layer.name, if opts.dry_run { "planning" } else { "applying" });
        let applied = apply_layer(cluster, layer, opts, (&mut planned, &mut intent), progress, &mut changes).await?;
        for p in &applied {
            if p.action != Action::Skipped {
                inventory.record(&p.object, p.action == Action::Created);
            }
        }
        if opts.wait && !opts.dry_run {
            progress.layer(&layer.name, "waiting");
            let refs: Vec<ObjectRef> =
                applied.iter().filter(|p| p.action != Action::Skipped).map(|p| p.object.clone()).collect();
            // What the next layers read may change while this one becomes ready.
            planned.clear();
            if let Err(e) = wait::wait_for_set(cluster, &refs, &wait_opts, progress).await {
                not_ready = Some(e);
                break;
            }
            progress.layer(&layer.name, "ready");
        }
    }

    // Prune once every layer was applied (readiness failures do not stop it: removing stale
    // objects can unblock their replacements).
    let cluster_failed = matches!(not_ready, Some(WaitError::Cluster(_)));
    if opts.prune && !cluster_failed && changes_all_layers(layers, &changes) {
        let current = refs(layers);
        for stale in previous.stale(&current) {
            match prune_one(cluster, &stale, opts.dry_run).await? {
                Some(change) => {
                    progress.change(&change);
                    if change.action == Action::Deleted {
                        inventory.forget(&stale);
                    }
                    changes.push(change);
                }
                // Gone already (deleted by hand, or never written): nothing left to track.
                None => inventory.forget(&stale),
            }
        }
    }
    if !opts.dry_run && (intent.is_some() || inventory != saved) {
        inventory.write(cluster).await?;
    }
    let failed = matches!(not_ready, Some(WaitError::Failed(_)));
    if let Some(WaitError::Cluster(e)) = not_ready {
        return Err(e.into());
    }
    let ready = (opts.wait && !opts.dry_run).then_some(not_ready.is_none());
    Ok(ApplyReport {
        changes,
        ready,
        not_ready: not_ready.map(|e| e.to_string()),
        requests: cluster.requests(),
        failed,
    })
}

fn changes_all_layers(layers: &[Layer], changes: &ChangeSet) -> bool {
    let applied: BTreeSet<&ObjectRef> = changes.refs().collect();
    layers.iter().all(|l| l.objects.iter().all(|(r, _)| applied.contains(r)))
}

fn flux_kustomization(profile: &Profile, name: &str) -> ObjectRef {
    ObjectRef {
        group: "kustomize.toolkit.fluxcd.io".into(),
        version: "v1".into(),
        kind: "Kustomization".into(),
        namespace: Some(profile.cluster.flux_namespace.clone()),
        name: name.to_owned(),
    }
}

/// Apply one layer, stage by stage, from `planned` where it has the object (else planning it
/// now). The `intent` inventory, when there is one, is written together with the first stage
/// that writes anything.
async fn apply_layer(
    cluster: &Cluster,
    layer: &Layer,
    opts: &ApplyOptions,
    (planned, intent): (&mut BTreeMap<ObjectRef, Planned>, &mut Option<Inventory>),
    progress: &dyn Progress,
    changes: &mut ChangeSet,
) -> Result<Vec<Planned>, DeployError> {
    let plan_opts = PlanOptions { dry_run_new: opts.dry_run, force_conflicts: opts.force_conflicts };
    let mut all = Vec::new();
    for stage in [Stage::Definitions, Stage::Classes, Stage::Resources] {
        let objects: Vec<&(ObjectRef, Value)> = layer.objects.iter().filter(|(r, _)| r.stage() == stage).collect();
        if objects.is_empty() {
            continue;
        }
        // The plan made before any write, unless the kind was not served then.
        let mut stage_plan: Vec<Option<Planned>> =
            objects.iter().map(|(r, _)| planned.remove(r).filter(|p| p.action != Action::Skipped)).collect();
        let missing: Vec<Value> =
            objects.iter().zip(&stage_plan).filter(|(_, p)| p.is_none()).map(|((_, v), _)| v.clone()).collect();
        if !missing.is_empty() {
            let mut fresh = ssa::plan_all(cluster, &missing, plan_opts).await?.into_iter();
            for slot in stage_plan.iter_mut().filter(|p| p.is_none()) {
                *slot = fresh.next();
            }
        }
        let stage_plan: Vec<Planned> = stage_plan.into_iter().flatten().collect();
        let writes = stage_plan.iter().any(|p| matches!(p.action, Action::Created | Action::Configured));
        let answers = if opts.dry_run {
            vec![None; stage_plan.len()]
        } else if let Some(inventory) = intent.take_if(|_| writes) {
            let (answers, ()) = futures::try_join!(
                async { ssa::write_all(cluster, &stage_plan, opts.force_conflicts).await.map_err(DeployError::from) },
                async { inventory.write(cluster).await.map_err(DeployError::from) },
            )?;
            answers
        } else {
            ssa::write_all(cluster, &stage_plan, opts.force_conflicts).await?
        };
        for p in &stage_plan {
            let change = p.change(false);
            progress.change(&change);
            changes.push(change);
        }
        if stage != Stage::Resources && !opts.dry_run {
            // Namespaces are Active as created; CRDs take a moment to be Established.
            let pending: Vec<ObjectRef> = stage_plan
                .iter()
                .zip(&answers)
                .filter_map(|(p, answer)| {
                    let stored: Value = serde_json::from_str(answer.as_deref()?).unwrap_or(Value::Null);
                    (crate::cluster::status::compute(&stored).status != crate::cluster::status::Status::Current)
                        .then(|| p.object.clone())
                })
                .collect();
            if !pending.is_empty() {
                let wait_opts = WaitOptions {
                    interval: Duration::from_millis(250),
                    deadline: Instant::now() + Duration::from_secs(60),
                    fail_fast: true,
                };
                wait::wait_for_set(cluster, &pending, &wait_opts, progress).await.map_err(DeployError::Definitions)?;
            }
            if stage_plan.iter().zip(&answers).any(|(p, a)| a.is_some() && p.object.kind == "CustomResourceDefinition")
            {
                cluster.resolver.refresh().await?;
            }
        }
        all.extend(stage_plan);
    }
    Ok(all)
}
