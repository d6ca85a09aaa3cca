//! The catalogue of checks, one file per area.

mod flux;
mod kata;
mod lifecycle;
mod nodes;
mod opensandbox;
mod spiffe;

pub(crate) use lifecycle::{sweep_sandboxes, sweeping_sandboxes};

use kube::api::{Api, DynamicObject};
use serde_json::Value;

use super::Check;
use crate::cluster::{Cluster, ClusterError};
use crate::object::{Gvk, ObjectRef};
use crate::profile::Profile;

/// Every check for a profile, in report order.
#[must_use]
pub(crate) fn catalogue(profile: &Profile, flux_objects: Vec<ObjectRef>) -> Vec<Box<dyn Check>> {
    let mut checks: Vec<Box<dyn Check>> = vec![
        Box::new(flux::Layers { objects: flux_objects }),
        Box::new(nodes::NodesReady),
        Box::new(nodes::RuntimeClasses),
        Box::new(kata::GuestKernel),
        Box::new(kata::HostKvm),
        Box::new(kata::VmmSharedMemory),
        Box::new(spiffe::Spiffe),
        Box::new(opensandbox::Server),
        Box::new(opensandbox::Pools),
    ];
    for pool in &profile.sections.pools.items {
        checks.push(Box::new(lifecycle::Lifecycle { pool: pool.name.clone() }));
    }
    checks
}

/// List objects of a kind (in a namespace, when given and the kind is namespaced; empty when
/// the kind is not served).
async fn list(
    cluster: &Cluster,
    kind: &Gvk,
    ns: Option<&str>,
    labels: Option<&str>,
) -> Result<Vec<Value>, ClusterError> {
    let Some((ar, scope)) = cluster.resolver.resolve(&kind.object(ns, "")).await? else { return Ok(Vec::new()) };
    let api: Api<DynamicObject> = match (scope, ns) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => Api::namespaced_with(cluster.client.clone(), ns, &ar),
        _ => Api::all_with(cluster.client.clone(), &ar),
    };
    let mut lp = kube::api::ListParams::default();
    if let Some(l) = labels {
        lp = lp.labels(l);
    }
    let items = api
        .list(&lp)
        .await
        .map_err(|source| ClusterError::Api { subject: format!("{} list", kind.kind), error: source })?;
    Ok(items.into_iter().map(|o| serde_json::to_value(o).unwrap_or(Value::Null)).collect())
}
