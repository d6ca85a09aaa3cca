//! `osbx status --fleet`: one line per cluster.

use serde::Serialize;

use super::{Against, Overview};

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
