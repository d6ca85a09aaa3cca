//! Carrying out a planned apply, layer by layer and stage by stage.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use super::plan::Plan;
use super::{ApplyOptions, DeployError, Layer, flux_kustomization, ids};
use crate::changeset::{Action, ChangeSet};
use crate::cluster::flux_applier::FluxRender;
use crate::cluster::inventory::Inventory;
use crate::cluster::ssa::{self, Planned};
use crate::cluster::wait::{self, WaitError, WaitOptions};
use crate::cluster::{Cluster, RequestCounts};
use crate::object::{Object, ObjectRef, Stage};
use crate::profile::Profile;
use crate::progress::{Phase, Progress};
use crate::readiness::{self, Status};

/// What an apply did.
#[derive(Debug, Serialize)]
pub(crate) struct ApplyReport {
    /// Every object and its action.
    pub changes: ChangeSet,
    /// Readiness: `None` when not waited for, else whether everything became ready.
    pub ready: Option<bool>,
    /// Why not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_ready: Option<String>,
    /// Requests made.
    pub requests: RequestCounts,
}

/// What a run of [`execute`] carries from layer to layer.
struct Run<'a> {
    cluster: &'a Cluster,
    opts: &'a ApplyOptions,
    progress: &'a dyn Progress,
    /// Plans made before the first write, taken as layers use them; cleared when a wait makes
    /// them stale.
    planned: BTreeMap<ObjectRef, Planned>,
    /// Whether the render is the one Flux applies (see [`Plan::flux`]).
    flux: FluxRender,
    /// The inventory: as planned (every object about to be applied recorded), then as applied.
    inventory: Inventory,
    /// Whether the inventory lists objects the cluster's copy does not, to be written before the
    /// next stage that writes.
    intent: bool,
    changes: ChangeSet,
    /// Whether a readiness wait has returned in this run (a chart may have installed CRDs).
    waited: bool,
}

/// After a readiness wait, how long a kind the cluster does not serve yet may take to appear in
/// discovery before its objects are skipped: helm makes a chart's CRDs Established before its
/// release is Ready, and the API server's discovery follows a moment later (seconds on a loaded
/// server).
const DISCOVERY_GRACE: Duration = Duration::from_secs(10);

/// Apply the layers as planned.
///
/// The inventory, with every object about to be applied already in it, is written before the
/// first objects (a layer's Namespaces and CRDs), so an apply killed half-way leaves
/// nothing untracked (so are objects of kinds a chart installed meanwhile, before their stage);
/// it is written again at the end when the run changed it since (pruned objects). A layer's objects use the plan while it is
/// current: always with `--no-wait`; after a readiness wait they are read again.
///
/// # Errors
/// [`DeployError`] when an object cannot be applied; the error names the object in flight.
pub(crate) async fn execute(
    cluster: &Cluster,
    profile: &Profile,
    layers: &[Layer],
    plan: Plan,
    opts: &ApplyOptions,
    progress: &dyn Progress,
) -> Result<ApplyReport, DeployError> {
    let deadline = Instant::now() + opts.timeout;
    let Plan { previous, planned, flux } = plan;
    let mut inventory = previous.clone();
    for p in planned.values().filter(|p| p.action != Action::Skipped) {
        inventory.record(&p.id, p.action == Action::Created);
    }
    // Written with the first objects (see `apply_layer`), before any other.
    let saved = inventory.entries.clone();
    let intent = !opts.dry_run && inventory != previous;
    let mut run =
        Run { cluster, opts, progress, planned, flux, inventory, intent, changes: ChangeSet::default(), waited: false };
    let mut not_ready: Option<WaitError> = None;
    let wait_opts = WaitOptions { interval: opts.interval, deadline, fail_fast: true };
    let waits = opts.wait && !opts.dry_run;

    for layer in layers {
        if waits && !layer.external_deps.is_empty() {
            progress.phase(&layer.name, Phase::WaitingForDependencies);
            let deps: Vec<ObjectRef> = layer.external_deps.iter().map(|d| flux_kustomization(profile, d)).collect();
            if let Err(e) = wait::wait_for_set(cluster, &deps, &wait_opts, progress).await {
                not_ready = Some(e);
                break;
            }
            run.planned.clear();
            run.waited = true;
        }
        progress.phase(&layer.name, if opts.dry_run { Phase::Planning } else { Phase::Applying });
        let applied = run.apply_layer(layer).await?;
        for p in &applied {
            run.inventory.record(&p.id, p.action == Action::Created);
        }
        if waits {
            progress.phase(&layer.name, Phase::Waiting);
            let ids: Vec<ObjectRef> = applied.into_iter().map(|p| p.id).collect();
            // What the next layers read may change while this one becomes ready.
            run.planned.clear();
            if let Err(e) = wait::wait_for_set(cluster, &ids, &wait_opts, progress).await {
                not_ready = Some(e);
                break;
            }
            progress.phase(&layer.name, Phase::Ready);
            run.waited = true;
        }
    }

    // Prune once every layer was applied (readiness failures do not stop it: removing stale
    // objects can unblock their replacements).
    let cluster_failed = matches!(not_ready, Some(WaitError::Cluster(_)));
    let (mut changes, mut inventory) = (run.changes, run.inventory);
    if opts.prune && !cluster_failed && covers_every_object(layers, &changes) {
        for stale in previous.stale(&super::kept(profile, layers)) {
            match ssa::prune(cluster, &stale, opts.dry_run).await? {
                Some(change) => {
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
    if !opts.dry_run && (run.intent || inventory.entries != saved) {
        inventory.write(cluster).await?;
    }
    if let Some(WaitError::Cluster(e)) = not_ready {
        return Err(e.into());
    }
    Ok(ApplyReport {
        changes,
        ready: waits.then_some(not_ready.is_none()),
        not_ready: not_ready.map(|e| e.to_string()),
        requests: cluster.requests(),
    })
}

/// Whether the change set has every object of `layers` (no layer was left out by a failed wait).
fn covers_every_object(layers: &[Layer], changes: &ChangeSet) -> bool {
    let applied: BTreeSet<&ObjectRef> = changes.ids().collect();
    ids(layers).iter().all(|id| applied.contains(id))
}

impl Run<'_> {
    /// Apply one layer, stage by stage, from the plan where it has the object (else planning it
    /// now); returns what was applied (skipped objects left out). The intended inventory, while
    /// unwritten, is written before the first stage that writes anything.
    async fn apply_layer(&mut self, layer: &Layer) -> Result<Vec<Planned>, DeployError> {
        let mut applied = Vec::new();
        for stage in [Stage::Definitions, Stage::Classes, Stage::Resources] {
            let objects: Vec<_> = layer.objects.iter().filter(|o| o.id.gvk.stage() == stage).collect();
            if objects.is_empty() {
                continue;
            }
            // The plan made before any write, unless the kind was not served then.
            let mut stage_plan: Vec<Option<Planned>> =
                objects.iter().map(|o| self.planned.remove(&o.id).filter(|p| p.action != Action::Skipped)).collect();
            let missing = objects.iter().zip(&stage_plan).filter(|(_, p)| p.is_none()).map(|(o, _)| *o);
            let mut fresh = ssa::plan_all(self.cluster, missing, self.opts.plan_options(&self.flux)).await?.into_iter();
            for slot in stage_plan.iter_mut().filter(|p| p.is_none()) {
                *slot = fresh.next();
            }
            let mut stage_plan: Vec<Planned> = stage_plan.into_iter().flatten().collect();
            if self.waited {
                self.replan_unserved(&objects, &mut stage_plan).await?;
            }
            let answers = self.write(&stage_plan).await?;
            self.changes.0.extend(stage_plan.iter().map(|p| p.change(false)));
            if stage != Stage::Resources && !self.opts.dry_run {
                self.settle(&stage_plan, &answers).await?;
            }
            applied.extend(stage_plan.into_iter().filter(|p| p.action != Action::Skipped));
        }
        Ok(applied)
    }

    /// Plan again, for up to [`DISCOVERY_GRACE`], the objects skipped because their kind is not
    /// served yet: after a wait, their CRD is usually there and discovery has not caught up.
    async fn replan_unserved(&self, objects: &[&Object], plans: &mut [Planned]) -> Result<(), DeployError> {
        let started = Instant::now();
        loop {
            let skipped: Vec<usize> =
                plans.iter().enumerate().filter(|(_, p)| p.action == Action::Skipped).map(|(i, _)| i).collect();
            if skipped.is_empty() || started.elapsed() >= DISCOVERY_GRACE {
                return Ok(());
            }
            // Longer than the resolver's refresh interval, so the next miss runs discovery again.
            tokio::time::sleep(Duration::from_millis(600)).await;
            let again: Vec<&Object> =
                skipped.iter().filter_map(|&i| objects.iter().copied().find(|o| o.id == plans[i].id)).collect();
            let fresh = ssa::plan_all(self.cluster, again, self.opts.plan_options(&self.flux)).await?;
            for (i, p) in skipped.into_iter().zip(fresh) {
                plans[i] = p;
            }
        }
    }

    /// Write a stage; returns the server's answer for each object (`None`: not written). The
    /// inventory is written first whenever it does not list every object the stage writes yet
    /// (the planned inventory before the first stage; objects of kinds a chart installed, planned
    /// only now): an object never exists untracked, even when the connection dies mid-stage.
    async fn write(&mut self, stage_plan: &[Planned]) -> Result<Vec<Option<String>>, DeployError> {
        let (cluster, on_conflict) = (self.cluster, self.opts.on_conflict(&self.flux));
        if self.opts.dry_run {
            return Ok(vec![None; stage_plan.len()]);
        }
        for p in stage_plan.iter().filter(|p| p.writes()) {
            let created = p.action == Action::Created;
            if self.inventory.entries.get(&p.id).is_none_or(|was| created && !was) {
                self.inventory.record(&p.id, created);
                self.intent = true;
            }
        }
        if self.intent && stage_plan.iter().any(Planned::writes) {
            self.intent = false;
            self.inventory.write(cluster).await?;
        }
        Ok(ssa::write_all(cluster, stage_plan, on_conflict).await?)
    }

    /// Wait until a definitions or classes stage is usable: Namespaces are Active as created
    /// (read from the write's answer), CRDs take a moment to be Established; after new CRDs,
    /// discovery runs again.
    async fn settle(&self, stage_plan: &[Planned], answers: &[Option<String>]) -> Result<(), DeployError> {
        let pending: Vec<ObjectRef> = stage_plan
            .iter()
            .zip(answers)
            .filter_map(|(p, answer)| {
                let stored: Value = serde_json::from_str(answer.as_deref()?).unwrap_or(Value::Null);
                (readiness::compute(&stored).status != Status::Current).then(|| p.id.clone())
            })
            .collect();
        if !pending.is_empty() {
            let wait_opts = WaitOptions {
                interval: Duration::from_millis(250),
                deadline: Instant::now() + Duration::from_secs(60),
                fail_fast: true,
            };
            wait::wait_for_set(self.cluster, &pending, &wait_opts, self.progress)
                .await
                .map_err(DeployError::Definitions)?;
        }
        if stage_plan.iter().zip(answers).any(|(p, a)| a.is_some() && p.id.kind() == "CustomResourceDefinition") {
            self.cluster.resolver.refresh().await?;
        }
        Ok(())
    }
}
