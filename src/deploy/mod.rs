//! Apply and diff a rendered profile against a cluster, layer by layer.
//!
//! Layers go in `dependsOn` order (see [`layers`]); how an apply is planned and carried out is in
//! `apply`. Before a layer is applied, the Flux Kustomizations of the external layers it depends
//! on must be Ready (Flux would wait for them too). Inside a layer the apply is staged: CRDs,
//! Namespaces and ClusterRoles first, then `*Class` kinds, each waited for (Established/Active),
//! then everything else. After a layer, its objects (including its Flux Kustomization) are waited
//! for, so the next layer finds what it needs, e.g. the Pool CRD the chart of the previous layer
//! installs. An inventory of what osbx created is kept in the cluster for `--prune`.

mod apply;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

pub use self::apply::{ApplyOptions, ApplyReport, Plan, execute, plan};
use crate::changeset::{Action, Change, ChangeSet};
use crate::cluster::apply::{self as ssa, ApplyError, PlanOptions};
use crate::cluster::inventory::{self, Inventory};
use crate::cluster::wait::WaitError;
use crate::cluster::{Cluster, ClusterError};
use crate::object::ObjectRef;
use crate::profile::Profile;
use crate::render::Rendered;

/// One layer to apply.
#[derive(Debug, Clone)]
pub struct Layer {
    /// Name (also its Flux Kustomization's name).
    pub name: String,
    /// External layers it depends on (their Kustomizations must be Ready first).
    pub external_deps: Vec<String>,
    /// Its objects, its Flux Kustomization included, in apply order.
    pub objects: Vec<(ObjectRef, Value)>,
}

/// Every object of `layers`, in apply order.
#[must_use]
pub fn refs(layers: &[Layer]) -> Vec<ObjectRef> {
    layers.iter().flat_map(|l| l.objects.iter().map(|(r, _)| r.clone())).collect()
}

pub(super) fn values(layers: &[Layer]) -> Vec<Value> {
    layers.iter().flat_map(|l| l.objects.iter().map(|(_, v)| v.clone())).collect()
}

/// Why a deploy could not be planned or applied.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// An object could not be applied.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// The cluster failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A rendered file is not valid.
    #[error(transparent)]
    Render(#[from] crate::render::RenderError),
    /// A rendered value is not an object.
    #[error(transparent)]
    NotAnObject(#[from] crate::object::NotAnObject),
    /// Definitions (CRDs, Namespaces) did not become ready.
    #[error("{0}")]
    Definitions(WaitError),
}

impl DeployError {
    /// Whether the server refused a read or write for lack of permission (403).
    #[must_use]
    pub fn forbidden(&self) -> bool {
        let api_403 =
            |e: &ClusterError| matches!(e, ClusterError::Api { source: kube::Error::Api(s), .. } if s.code == 403);
        match self {
            DeployError::Apply(ApplyError::Forbidden { .. }) => true,
            DeployError::Apply(ApplyError::Cluster(e)) | DeployError::Cluster(e) => api_403(e),
            _ => false,
        }
    }
}

/// The layers of a render in `dependsOn` order (Kahn's algorithm; ties in profile order).
///
/// # Errors
/// [`DeployError`] when a rendered file does not parse.
pub fn layers(profile: &Profile, rendered: &Rendered) -> Result<Vec<Layer>, DeployError> {
    let rendered_names: Vec<&str> = profile.layers.iter().filter(|l| !l.external).map(|l| l.name.as_str()).collect();
    let mut by_layer: BTreeMap<String, Vec<(ObjectRef, Value)>> = BTreeMap::new();
    for o in rendered.objects() {
        by_layer.entry(o.layer.clone()).or_default().push((ObjectRef::of(&o.object)?, o.object));
    }
    let mut done: BTreeSet<&str> = BTreeSet::new();
    let mut out = Vec::new();
    while out.len() < rendered_names.len() {
        let next =
            profile.layers.iter().filter(|l| !l.external && !done.contains(l.name.as_str())).find(|l| {
                l.depends_on.iter().all(|d| done.contains(d.as_str()) || !rendered_names.contains(&d.as_str()))
            });
        // Validation rejects cycles; stop rather than loop if one slipped through.
        let Some(layer) = next else { break };
        done.insert(&layer.name);
        let mut objects = by_layer.remove(&layer.name).unwrap_or_default();
        objects.sort_by(|a, b| a.0.cmp(&b.0));
        out.push(Layer {
            name: layer.name.clone(),
            external_deps: layer.depends_on.iter().filter(|d| !rendered_names.contains(&d.as_str())).cloned().collect(),
            objects,
        });
    }
    Ok(out)
}

/// Add the API key Secret the profile names (`opensandbox.server.apiKey.secretRef`) to the layer
/// that renders OpenSandbox, so that apply creates or rotates it like any other object (and diff
/// masks it). The key is never part of the render, so it never reaches git.
pub fn add_api_key_secret(profile: &Profile, layers: &mut [Layer], key: &str) -> Result<(), DeployError> {
    let Some(secret_ref) = &profile.opensandbox.server.api_key.secret_ref else { return Ok(()) };
    let Some((_, spec)) = profile.rendering(&crate::components::opensandbox::COMPONENT) else { return Ok(()) };
    let Some(layer) = layers.iter_mut().find(|l| l.name == spec.name) else { return Ok(()) };
    let mut data = std::collections::BTreeMap::new();
    data.insert(secret_ref.key.clone(), k8s_openapi::ByteString(key.as_bytes().to_vec()));
    let secret = k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(secret_ref.name.clone()),
            namespace: Some(profile.opensandbox.namespaces.control_plane.clone()),
            labels: Some([("app.kubernetes.io/managed-by".to_owned(), "osbx".to_owned())].into()),
            ..Default::default()
        },
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    let mut value = serde_json::to_value(&secret).unwrap_or(Value::Null);
    value["apiVersion"] = Value::String("v1".into());
    value["kind"] = Value::String("Secret".into());
    let r = ObjectRef::of(&value)?;
    layer.objects.push((r, value));
    layer.objects.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(())
}

/// The inventory of a profile on a cluster.
#[must_use]
pub fn inventory_ref(profile: &Profile) -> (String, String) {
    (profile.cluster.flux_namespace.clone(), Inventory::name_for(&profile.metadata.name, &profile.cluster.name))
}

async fn prune_one(cluster: &Cluster, r: &ObjectRef, dry_run: bool) -> Result<Option<Change>, DeployError> {
    let Some(live) = cluster.get(r).await? else { return Ok(None) };
    if !inventory::managed_by_osbx(&live) {
        let mut c = Change::new(r.clone(), Action::Skipped);
        c.reason = Some("not pruned: osbx no longer manages any of its fields".into());
        return Ok(Some(c));
    }
    if !dry_run && let Some(api) = cluster.resolver.api(r).await? {
        let params = kube::api::DeleteParams {
            propagation_policy: Some(kube::api::PropagationPolicy::Background),
            ..Default::default()
        };
        match api.delete(&r.name, &params).await {
            // Gone meanwhile (or a repeated request found it deleted): what pruning wanted.
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(ClusterError::Api { subject: r.to_string(), source }.into()),
        }
    }
    Ok(Some(Change::new(r.clone(), Action::Deleted)))
}

/// Diff every rendered object against the cluster (server-side dry-run), plus the objects osbx
/// created before and no longer renders (as `deleted`).
///
/// # Errors
/// [`DeployError`] when a dry-run is refused or the cluster fails.
pub async fn diff(cluster: &Cluster, profile: &Profile, layers: &[Layer]) -> Result<ChangeSet, DeployError> {
    let objects = values(layers);
    let (inv_ns, inv_name) = inventory_ref(profile);
    let (planned, inventory) = futures::try_join!(
        async {
            ssa::plan_all(cluster, &objects, PlanOptions { dry_run_new: true, force_conflicts: true })
                .await
                .map_err(DeployError::from)
        },
        async { Inventory::load(cluster, &inv_ns, &inv_name).await.map_err(DeployError::from) },
    )?;
    let mut changes = ChangeSet::default();
    for p in &planned {
        let mut change = p.change(true);
        if p.action == Action::Skipped {
            // Its CRD comes from another layer: show it as it would be created.
            change.action = Action::Created;
            change.diff = Some(crate::cluster::diff::unified(&change.subject, None, &p.desired));
        }
        changes.push(change);
    }
    let current: Vec<ObjectRef> = planned.iter().map(|p| p.object.clone()).collect();
    for stale in inventory.stale(&current) {
        if let Some(mut change) = prune_one(cluster, &stale, true).await?
            && change.action == Action::Deleted
        {
            change.diff =
                Some(format!("{} will be deleted (osbx created it and no longer renders it)\n", change.subject));
            changes.push(change);
        }
    }
    Ok(changes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(profile: &str) -> Vec<String> {
        let loaded = crate::profile::load(&crate::profile::ProfileSource::Embedded(profile.into())).unwrap();
        let rendered = crate::render::Renderer::new(None).unwrap().render(&loaded).unwrap();
        layers(&loaded.profile, &rendered).unwrap().into_iter().map(|l| l.name).collect()
    }

    #[test]
    fn layers_follow_depends_on() {
        assert_eq!(order("fresh-cluster"), ["kata", "spire-agents", "spire-smoke", "opensandbox", "opensandbox-pools"]);
        assert_eq!(order("homelab"), ["opensandbox", "opensandbox-pools"]);
    }

    #[test]
    fn external_dependencies_are_waited_for() {
        let loaded = crate::profile::load(&crate::profile::ProfileSource::Embedded("homelab".into())).unwrap();
        let rendered = crate::render::Renderer::new(None).unwrap().render(&loaded).unwrap();
        let l = layers(&loaded.profile, &rendered).unwrap();
        assert_eq!(l[0].external_deps, ["kata", "spire-agents"]);
        assert!(l[1].external_deps.is_empty());
    }
}
