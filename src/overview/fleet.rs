//! `osbx status --fleet`: every cluster of a fleet read concurrently (at most
//! [`CLUSTERS_AT_ONCE`] at a time), one line per cluster; a cluster that cannot be reached or
//! read is a line saying why, and the others are still read.

use std::path::Path;

use futures::StreamExt as _;
use serde::Serialize;

use super::{Against, Overview};
use crate::cluster::{Cluster, ConnectOptions};
use crate::fleet::Fleet;
use crate::render::{RenderError, Renderer};

/// At most this many clusters of a fleet are read at once.
const CLUSTERS_AT_ONCE: usize = 8;

/// A fleet at a glance: one line per cluster, in the fleet's order.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FleetOverview {
    /// The fleet's name.
    pub(crate) fleet: String,
    pub(crate) clusters: Vec<ClusterLine>,
}

impl FleetOverview {
    /// Whether some cluster could not be read.
    #[must_use]
    pub(crate) fn unreadable(&self) -> bool {
        self.clusters.iter().any(|l| l.error.is_some())
    }

    /// Whether every cluster is ready.
    #[must_use]
    pub(crate) fn ready(&self) -> bool {
        self.clusters.iter().all(|l| l.ready)
    }
}

/// Read every cluster of `fleet` (each member's render from `renderer`), reached as the fleet
/// says ([`crate::fleet::Reach::connect_options`], `connect` the command's access settings);
/// `repo` the Flux repository the layers are compared with.
///
/// # Errors
/// A member whose render fails (before any cluster is read); an unreachable or unreadable
/// cluster is a line, not an error.
pub(crate) async fn read_fleet(
    fleet: &Fleet,
    renderer: &Renderer,
    connect: &ConnectOptions,
    repo: &Path,
) -> Result<FleetOverview, RenderError> {
    let mut members = Vec::new();
    for (member, reach) in fleet.members.iter().zip(&fleet.reach) {
        let rendered = renderer.render(member)?;
        members.push((member, reach, crate::deploy::layers(&member.profile, &rendered)));
    }
    let clusters = futures::stream::iter(members.iter().map(|(member, reach, layers)| async move {
        let read = async {
            let cluster = Cluster::connect(&reach.connect_options(connect)).await?;
            anyhow::Ok(super::read(&cluster, &member.profile, layers, Some(repo), None).await?)
        };
        match read.await {
            Ok(o) => ClusterLine::of(&o),
            Err(e) => ClusterLine::unreadable(&member.profile.cluster.name, format!("{e:#}")),
        }
    }))
    .buffered(CLUSTERS_AT_ONCE)
    .collect()
    .await;
    Ok(FleetOverview { fleet: fleet.name.clone(), clusters })
}

/// One cluster of a fleet, in one line's worth.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterLine {
    pub(crate) cluster: String,
    pub(crate) ready: bool,
    pub(crate) layers_ready: usize,
    pub(crate) layers: usize,
    pub(crate) pools_healthy: usize,
    pub(crate) pools: usize,
    /// The revision the layers applied, when they all applied the same one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) revision: Option<String>,
    pub(crate) against_head: Against,
    /// Why the cluster could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

impl ClusterLine {
    /// The line of a cluster that was read.
    #[must_use]
    pub(crate) fn of(o: &Overview) -> Self {
        let mut revisions: Vec<&String> = o.layers.iter().filter_map(|l| l.revision.as_ref()).collect();
        revisions.dedup();
        let one = (revisions.len() == 1).then(|| revisions[0].clone());
        let against = if one.is_some() {
            o.layers.iter().find(|l| l.revision.is_some()).map_or(Against::Unknown, |l| l.against_head)
        } else {
            Against::Unknown
        };
        Self {
            cluster: o.cluster.clone(),
            ready: o.ready,
            layers_ready: o.layers.iter().filter(|l| l.ready).count(),
            layers: o.layers.len(),
            pools_healthy: o.pools.iter().filter(|p| p.healthy).count(),
            pools: o.pools.len(),
            revision: one,
            against_head: against,
            error: None,
        }
    }

    /// The line of a cluster that could not be read.
    #[must_use]
    pub(crate) fn unreadable(cluster: &str, error: String) -> Self {
        Self {
            cluster: cluster.to_owned(),
            ready: false,
            layers_ready: 0,
            layers: 0,
            pools_healthy: 0,
            pools: 0,
            revision: None,
            against_head: Against::Unknown,
            error: Some(error),
        }
    }
}
