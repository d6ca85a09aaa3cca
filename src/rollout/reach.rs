//! Reaching a fleet's clusters before anything is written: each one connected, and everything
//! the rollout will do there reviewed.

use std::collections::BTreeSet;

use super::{RolloutError, Settings, flux};
use crate::cluster::operation::Operation;
use crate::cluster::preflight;
use crate::cluster::{Cluster, ClusterError};
use crate::deploy;
use crate::fleet::Fleet;
use crate::object::ObjectRef;
use crate::profile::LoadedProfile;
use crate::render::Renderer;
use crate::verify;

/// A cluster as the rollout reaches it.
pub(super) struct Target<'f> {
    pub(super) member: &'f LoadedProfile,
    /// Every object its render holds.
    pub(super) objects: Vec<ObjectRef>,
    /// Its Flux objects.
    pub(super) flux: Vec<ObjectRef>,
    /// With an acceptance layer: the run whose report this wave may trust.
    pub(super) acceptance: Option<crate::components::acceptance::Expected>,
    pub(super) cluster: Option<Cluster>,
}

/// Reach every cluster of the waves from `start` on and review what the rollout will do there,
/// before anything is written.
pub(super) async fn reach_all<'f>(
    fleet: &'f Fleet,
    renderer: &Renderer,
    settings: &Settings,
    start: usize,
) -> Result<Vec<Target<'f>>, RolloutError> {
    let names: BTreeSet<&str> =
        fleet.waves[start..].iter().flat_map(|w| w.clusters.iter().map(String::as_str)).collect();
    let mut targets = Vec::new();
    for (index, (member, reach)) in fleet.members.iter().zip(&fleet.reach).enumerate() {
        if !names.contains(member.profile.cluster.name.as_str()) {
            continue;
        }
        let rendered = renderer.render(member)?;
        let layers = deploy::layers(&member.profile, &rendered);
        let acceptance = gated_in_cluster(member, &layers);
        targets.push((index, member, reach, deploy::ids(&layers), deploy::flux_objects(&layers), acceptance));
    }
    let reached = futures::future::join_all(targets.into_iter().map(
        |(index, member, reach, objects, flux, acceptance)| async move {
            let name = member.profile.cluster.name.clone();
            let cluster =
                Cluster::connect(&reach.connect_options(&settings.connect)).await.map_err(|source| match source {
                    ClusterError::Kubeconfig { .. }
                    | ClusterError::NoKubeconfig { .. }
                    | ClusterError::NoContext { .. }
                    | ClusterError::NoCluster { .. } => RolloutError::Reach { cluster: name.clone(), index, source },
                    source => RolloutError::Cluster { cluster: name.clone(), source },
                })?;
            preflight::warm_up(&cluster)
                .await
                .map_err(|source| RolloutError::Preflight { cluster: name.clone(), source })?;
            let ops =
                operations(&member.profile, &objects, &flux, &settings.verify.selection, &settings.verify.reach());
            preflight::review(&cluster, &ops, "this rollout")
                .await
                .map_err(|source| RolloutError::Preflight { cluster: name.clone(), source })?;
            Ok::<_, RolloutError>(Target { member, objects, flux, acceptance, cluster: Some(cluster) })
        },
    ))
    .await;
    reached.into_iter().collect()
}

/// With an acceptance layer, the cluster gates itself: the run of this render's Job, for the
/// criteria of this render's profile, publishing to the layer's report.
fn gated_in_cluster(
    member: &LoadedProfile,
    layers: &[deploy::Layer],
) -> Option<crate::components::acceptance::Expected> {
    let (acceptance, _) = member.profile.acceptance()?;
    acceptance.expected(member.profile.criteria(), layers.iter().flat_map(|l| &l.objects))
}

/// Everything a rollout does on one cluster whose render holds `objects` (`flux` its Flux
/// objects): ask the root source to fetch, wait for the Flux objects; then, with an acceptance
/// layer, read the report its runs publish (the cluster checks itself: nothing is created),
/// else wait for every object and run the `selection` of checks.
#[must_use]
pub(crate) fn operations(
    profile: &crate::profile::Profile,
    objects: &[ObjectRef],
    flux: &[ObjectRef],
    selection: &verify::Selection,
    reach: &verify::Reach,
) -> Vec<Operation> {
    let mut ops: Vec<Operation> = vec![Operation::Review];
    ops.extend(flux::operations(profile, flux));
    if let Some((acceptance, _)) = profile.acceptance() {
        // The Job's report (beside the report), and the Job whose uid a trusted report names.
        let verdicts = crate::verify::in_cluster::publish::verdicts(&acceptance.report());
        ops.push(Operation::Get(crate::cluster::operation::Objects::Named(verdicts)));
        ops.push(Operation::Get(crate::cluster::operation::Objects::Named(acceptance.job())));
        return ops;
    }
    ops.extend(objects.iter().cloned().map(Operation::Wait));
    ops.extend(verify::session::operations(profile, flux, selection, reach));
    ops
}
