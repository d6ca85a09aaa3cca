//! Checks before any write: the cluster answers, Flux serves the API versions osbx renders, and
//! the caller may do everything the apply needs (SelfSubjectAccessReview per resource, namespace
//! and verb). Each failure is a clear message; the command exits 2 without writing.

use std::collections::BTreeSet;

use futures::stream::{self, StreamExt};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use kube::api::{Api, PostParams};

use super::{Cluster, ClusterError};
use crate::object::{Gvk, ObjectRef};

/// Why the apply cannot start.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// The cluster does not answer or refuses the credentials.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// Flux (at the API versions osbx renders) is not installed, or lacks a controller's kinds.
    #[error(
        "Flux is not installed on this cluster, or is too old: it does not serve {}.\nInstall Flux ≥ 2.7 first: `flux install` (or `flux bootstrap …`), then rerun",
        .0.join(", ")
    )]
    FluxMissing(Vec<String>),
    /// The namespace of the Flux objects does not exist.
    #[error(
        "namespace {0} (cluster.fluxNamespace) does not exist: is Flux installed there? Install it with `flux install`, or set cluster.fluxNamespace"
    )]
    FluxNamespace(String),
    /// The caller lacks permissions.
    #[error("the current user may not do everything this apply needs:\n{}\nask a cluster admin for these permissions, or use another --context", .0.iter().map(|d| format!("  {d}")).collect::<Vec<_>>().join("\n"))]
    Forbidden(Vec<String>),
}

/// What preflight found.
#[derive(Debug, Clone)]
pub struct Report {
    /// Server version.
    pub version: String,
}

/// The first requests of a run, made while the profile renders: the server version (which
/// proves the cluster answers and accepts the credentials), then discovery. One after the other:
/// until the first connection has negotiated HTTP/2, a second request would open a second one.
///
/// # Errors
/// [`PreflightError::Cluster`]: unreachable, refused credentials, or failed discovery.
pub async fn warm_up(cluster: &Cluster) -> Result<Report, PreflightError> {
    let version = cluster.version().await?;
    cluster.resolver.refresh().await?;
    Ok(Report { version })
}

/// Checks before the first write of an apply whose plan needs `needs`: Flux serves every Flux
/// kind among the `used` objects at the version they use (taken from the render, so a layer that
/// renders an `OCIRepository` needs it served), the Flux namespace exists, and the caller may
/// make every write (one SelfSubjectAccessReview per resource, namespace and verb; none for a
/// no-op).
///
/// # Errors
/// [`PreflightError`] for the first failing check.
pub async fn check(
    cluster: &Cluster,
    used: &[ObjectRef],
    needs: &[(ObjectRef, &'static str)],
    flux_ns: &str,
) -> Result<(), PreflightError> {
    let flux_kinds: BTreeSet<&Gvk> = used.iter().map(|o| &o.gvk).filter(|k| k.is_flux()).collect();
    let mut missing = Vec::new();
    for kind in flux_kinds {
        if !cluster.resolver.serves(kind).await? {
            missing.push(kind.to_string());
        }
    }
    if !missing.is_empty() {
        return Err(PreflightError::FluxMissing(missing));
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cluster.client.clone());
    let (flux_ns_found, allowed) = futures::join!(namespaces.get_opt(flux_ns), access(cluster, needs));
    let flux_ns_found =
        flux_ns_found.map_err(|source| ClusterError::Api { subject: format!("Namespace/{flux_ns}"), source })?;
    allowed?;
    if flux_ns_found.is_none() {
        return Err(PreflightError::FluxNamespace(flux_ns.to_owned()));
    }
    Ok(())
}

/// Every permission an apply of `objects` could need (reads included), checked when a read was
/// refused, so that the error names everything that is missing rather than the first refusal.
///
/// # Errors
/// [`PreflightError::Forbidden`] with every missing permission.
pub async fn access_all(
    cluster: &Cluster,
    objects: &[ObjectRef],
    inventory: &ObjectRef,
    prune: bool,
) -> Result<(), PreflightError> {
    let verbs: &[&'static str] =
        if prune { &["get", "list", "create", "patch", "delete"] } else { &["get", "list", "create", "patch"] };
    let mut needs: Vec<(ObjectRef, &'static str)> =
        objects.iter().flat_map(|o| verbs.iter().map(move |v| (o.clone(), *v))).collect();
    needs.extend(["get", "create", "patch"].map(|v| (inventory.clone(), v)));
    let namespace = Gvk::new("", "v1", "Namespace").object(None, inventory.namespace.as_deref().unwrap_or_default());
    needs.push((namespace, "get"));
    access(cluster, &needs).await
}

async fn access(cluster: &Cluster, needs: &[(ObjectRef, &'static str)]) -> Result<(), PreflightError> {
    let mut checks: BTreeSet<(String, String, Option<String>, &'static str)> = BTreeSet::new();
    for (o, verb) in needs {
        // Kinds not served yet (CRDs another layer installs) cannot be resolved; checked later by the apply.
        let Some((ar, scope)) = cluster.resolver.resolve(o).await? else { continue };
        let ns = matches!(scope, kube::discovery::Scope::Namespaced).then(|| o.namespace.clone()).flatten();
        checks.insert((ar.group.clone(), ar.plural.clone(), ns, verb));
    }
    let api: Api<SelfSubjectAccessReview> = Api::all(cluster.client.clone());
    let results: Vec<Result<Option<String>, ClusterError>> =
        stream::iter(checks.into_iter().map(|(group, resource, ns, verb)| {
            let api = api.clone();
            async move {
                let review = SelfSubjectAccessReview {
                    spec: SelfSubjectAccessReviewSpec {
                        resource_attributes: Some(ResourceAttributes {
                            group: Some(group.clone()),
                            resource: Some(resource.clone()),
                            namespace: ns.clone(),
                            verb: Some(verb.to_owned()),
                            ..ResourceAttributes::default()
                        }),
                        ..SelfSubjectAccessReviewSpec::default()
                    },
                    ..SelfSubjectAccessReview::default()
                };
                let answer = api
                    .create(&PostParams::default(), &review)
                    .await
                    .map_err(|source| ClusterError::Api { subject: "SelfSubjectAccessReview".into(), source })?;
                let allowed = answer.status.is_some_and(|s| s.allowed);
                let what = if group.is_empty() { resource } else { format!("{resource}.{group}") };
                Ok((!allowed).then(|| match ns {
                    Some(ns) => format!("cannot {verb} {what} in namespace {ns}"),
                    None => format!("cannot {verb} {what} (cluster-wide)"),
                }))
            }
        }))
        .buffered(cluster.concurrency)
        .collect()
        .await;
    let mut denied = Vec::new();
    for r in results {
        if let Some(d) = r? {
            denied.push(d);
        }
    }
    if denied.is_empty() { Ok(()) } else { Err(PreflightError::Forbidden(denied)) }
}
