//! The catalogue of checks, one file per area.

mod exec;
mod flux;
mod kata;
mod lifecycle;
mod nodes;
mod opensandbox;
mod reclaim;
mod spiffe;
mod workload;

pub(crate) use lifecycle::{sweep_sandboxes, sweeping_sandboxes};

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{Check, Selection};
use crate::cluster::{Cluster, ClusterError};
use crate::object::{Gvk, ObjectRef};
use crate::profile::Profile;

/// The images the checks of `profile` pull (their probe pods, and what runs in them), each with
/// the ids of the checks that pull it: asked of every check that does something for the profile
/// (`osbx images`).
#[must_use]
pub(crate) fn images(profile: &Profile) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for check in catalogue(profile, Vec::new(), &Selection::default()) {
        if check.operations(profile, &super::Reach::default()).is_empty() {
            continue;
        }
        for image in check.images(profile) {
            out.entry(image).or_default().extend(check.ids());
        }
    }
    out
}

/// Every check for a profile, in report order; `selection` decides what a check that reports
/// several verdicts does for the ones not selected (the reclaim of a Lifecycle sandbox).
#[must_use]
pub(crate) fn catalogue(profile: &Profile, flux_objects: Vec<ObjectRef>, selection: &Selection) -> Vec<Box<dyn Check>> {
    let mut checks: Vec<Box<dyn Check>> = vec![
        Box::new(flux::Layers { objects: flux_objects }),
        Box::new(nodes::NodesReady),
        Box::new(nodes::RuntimeClasses),
        Box::new(kata::GuestKernel),
        Box::new(kata::HostKvm),
        Box::new(kata::VmmSharedMemory),
        Box::new(kata::Annotations),
        Box::new(kata::AnnotationsConfig { classes: profile.sections.pools.kata_classes() }),
        Box::new(spiffe::Spiffe),
        Box::new(opensandbox::Server),
        Box::new(opensandbox::Pools),
    ];
    for pool in &profile.sections.pools.items {
        let kata = reclaim::has_check(profile, &pool.name);
        let reclaim = kata && selection.selects(&reclaim::id(&pool.name));
        checks.push(Box::new(lifecycle::Lifecycle { pool: pool.name.clone(), kata, reclaim }));
    }
    for (_, pool) in profile.sections.pools.build_pools() {
        checks.push(Box::new(workload::Workload { pool: pool.pool.name.clone() }));
    }
    checks
}

/// List objects of a kind (see [`Cluster::list`]).
async fn list(
    cluster: &Cluster,
    kind: &Gvk,
    ns: Option<&str>,
    labels: Option<&str>,
) -> Result<Vec<Value>, ClusterError> {
    cluster.list(kind, ns, labels).await
}
