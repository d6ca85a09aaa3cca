//! Checks before any write: the cluster answers, Flux serves the API versions osbx renders, and
//! the caller may do everything the run needs (SelfSubjectAccessReview per resource, namespace
//! and verb, then per object where a role names objects). Each failure is a clear message; the
//! command exits 2 without writing.
//!
//! What a run will do is planned as [`Operation`]s; their needs are reviewed here.

use std::collections::{BTreeMap, BTreeSet};

use futures::stream::{self, StreamExt};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::discovery::Scope;

use super::need::{Need, Target};
use super::operation::{self, Objects, Operation};
use super::{Cluster, ClusterError, describe};
use crate::object::{Gvk, KnownKind, ObjectRef};

/// Why the run cannot start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PreflightError {
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
    #[error("the current user may not do everything {run} needs:\n{}\nask a cluster admin for these permissions (`osbx rbac` prints them as roles), or use another --context", .denied.iter().map(|d| format!("  {d}")).collect::<Vec<_>>().join("\n"))]
    Forbidden {
        /// What was refused: `this apply`, `this diff`, `this verify run`, `osbx`.
        run: &'static str,
        /// One line per missing permission (`cannot create namespaces (cluster-wide)`).
        denied: Vec<String>,
    },
}

/// The server version's URL.
const VERSION: &str = "/version";
/// Aggregated discovery's URLs (the core group, then the others).
const DISCOVERY: [&str; 2] = ["/api", "/apis"];

/// Connecting ([`warm_up`]): the server version and aggregated discovery.
#[must_use]
pub(crate) fn connecting() -> Vec<Operation> {
    std::iter::once(VERSION).chain(DISCOVERY).map(Operation::Url).collect()
}

/// Reading the Flux namespace, which must exist before an apply ([`check`]).
#[must_use]
pub(crate) fn reading_flux_namespace(flux_ns: &str) -> Operation {
    Operation::Get(Objects::Named(KnownKind::NAMESPACE.object(None, flux_ns)))
}

/// What preflight found.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    /// Server version.
    pub version: String,
}

/// The first requests of a run, made while the profile renders: the server version (which
/// proves the cluster answers and accepts the credentials), then discovery. One after the other:
/// until the first connection has negotiated HTTP/2, a second request would open a second one.
///
/// # Errors
/// [`PreflightError::Cluster`]: unreachable, refused credentials, or failed discovery;
/// [`PreflightError::Forbidden`] when the user may not read the version or discovery.
pub(crate) async fn warm_up(cluster: &Cluster) -> Result<Report, PreflightError> {
    let version = match cluster.client.apiserver_version().await {
        Ok(v) => v.git_version,
        Err(e) if is_forbidden(&e) => return Err(forbidden("osbx", &Operation::Url(VERSION).needs())),
        Err(e) => return Err(ClusterError::Unreachable { server: cluster.server.clone(), reason: describe(&e) }.into()),
    };
    crate::timing::mark("version");
    if let Err(e) = cluster.resolver.refresh().await {
        if matches!(&e, ClusterError::Api { error, .. } if is_forbidden(error)) {
            // Name the refused discovery URL when a review can tell which.
            review(cluster, &DISCOVERY.map(Operation::Url), "osbx").await?;
        }
        return Err(e.into());
    }
    crate::timing::mark("discovery");
    Ok(Report { version })
}

fn is_forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403)
}

/// Denials of needs named without discovery (URLs, the review itself; plurals guessed from the
/// kind: [`Need::plural`]).
fn forbidden(run: &'static str, needs: &[Need]) -> PreflightError {
    let denied = needs
        .iter()
        .map(|n| match &n.target {
            Target::Url(path) => format!("cannot {} {path}", n.verb),
            Target::Objects { kind, namespace, name, subresource } => Key {
                group: kind.group.clone(),
                plural: Need::plural(kind),
                subresource: *subresource,
                namespace: namespace.clone(),
                namespaced: namespace.is_some(),
                verb: n.verb,
            }
            .denial(name.as_slice()),
        })
        .collect();
    PreflightError::Forbidden { run, denied }
}

/// Whether the Flux namespace exists ([`reading_flux_namespace`]): read by an apply with its
/// plan, in the same burst, for [`check`].
///
/// # Errors
/// The read's error (refused, failed).
pub(crate) async fn flux_namespace(cluster: &Cluster, flux_ns: &str) -> Result<bool, kube::Error> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cluster.client.clone());
    Ok(namespaces.get_metadata_opt(flux_ns).await?.is_some())
}

/// Checks before the first write of an apply that plans `operations`: Flux serves every Flux
/// kind among the `used` objects at the version they use (taken from the render, so a layer that
/// renders an `OCIRepository` needs it served), the Flux namespace exists (`flux_ns_found`, what
/// [`flux_namespace`] read), and the caller may make every write (one SelfSubjectAccessReview
/// per resource, namespace and verb; none for a no-op).
///
/// # Errors
/// [`PreflightError`] for the first failing check.
pub(crate) async fn check(
    cluster: &Cluster,
    used: &[ObjectRef],
    operations: &[Operation],
    flux_ns: &str,
    flux_ns_found: Result<bool, kube::Error>,
) -> Result<(), PreflightError> {
    let flux_kinds: BTreeSet<&Gvk> = used.iter().map(|o| &o.gvk).filter(|k| crate::flux::is_flux(k)).collect();
    let mut missing = Vec::new();
    for kind in flux_kinds {
        if !cluster.resolver.serves(kind).await? {
            missing.push(kind.to_string());
        }
    }
    if !missing.is_empty() {
        return Err(PreflightError::FluxMissing(missing));
    }
    let allowed = review(cluster, operations, "this apply").await;
    let flux_ns_found = match flux_ns_found {
        Ok(found) => found,
        Err(e) if is_forbidden(&e) => {
            let mut operations = operations.to_vec();
            operations.push(reading_flux_namespace(flux_ns));
            review(cluster, &operations, "this apply").await?;
            return Err(ClusterError::Api { subject: format!("Namespace/{flux_ns}"), error: e }.into());
        }
        Err(source) => return Err(ClusterError::Api { subject: format!("Namespace/{flux_ns}"), error: source }.into()),
    };
    allowed?;
    if !flux_ns_found {
        return Err(PreflightError::FluxNamespace(flux_ns.to_owned()));
    }
    Ok(())
}

/// One review: a verb on a resource in a namespace (or cluster-wide).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    group: String,
    plural: String,
    subresource: Option<&'static str>,
    namespace: Option<String>,
    /// Whether the kind is namespaced (with no namespace: every namespace).
    namespaced: bool,
    verb: &'static str,
}

impl Key {
    fn what(&self) -> String {
        let resource = match self.subresource {
            Some(sub) => format!("{}/{sub}", self.plural),
            None => self.plural.clone(),
        };
        if self.group.is_empty() { resource } else { format!("{resource}.{}", self.group) }
    }

    /// `cannot <verb> <resource> in namespace <ns>` (or `(cluster-wide)`, `in every namespace`),
    /// then the names when only some objects are refused.
    fn denial(&self, names: &[String]) -> String {
        let (verb, what) = (self.verb, self.what());
        let mut line = match (&self.namespace, self.namespaced) {
            (Some(ns), _) => format!("cannot {verb} {what} in namespace {ns}"),
            (None, false) => format!("cannot {verb} {what} (cluster-wide)"),
            (None, true) => format!("cannot {verb} {what} in every namespace"),
        };
        if !names.is_empty() {
            line.push_str(": ");
            line.push_str(&names.join(", "));
        }
        line
    }

    fn attributes(&self, name: Option<&str>) -> ResourceAttributes {
        ResourceAttributes {
            group: Some(self.group.clone()),
            resource: Some(self.plural.clone()),
            subresource: self.subresource.map(str::to_owned),
            namespace: self.namespace.clone(),
            name: name.map(str::to_owned),
            verb: Some(self.verb.to_owned()),
            ..ResourceAttributes::default()
        }
    }
}

/// Review what `operations` need ([`Operation::needs`]) for the current user, one
/// SelfSubjectAccessReview per resource, namespace
/// and verb; where that is refused and the needs name objects, one per object (a role may grant
/// only named objects). Kinds the cluster does not serve yet (CRDs another layer installs) are
/// left to the run. `run` names the run in the error (`this apply`).
///
/// # Errors
/// [`PreflightError::Forbidden`] with every missing permission; [`PreflightError::Cluster`] when
/// a review fails.
pub(crate) async fn review(
    cluster: &Cluster,
    operations: &[Operation],
    run: &'static str,
) -> Result<(), PreflightError> {
    let needs = operation::needs(operations);
    // Per review: the names asked for (`None`: any object).
    let mut keys: BTreeMap<Key, Option<BTreeSet<String>>> = BTreeMap::new();
    let mut urls: BTreeSet<(&'static str, &'static str)> = BTreeSet::new();
    for need in &needs {
        let (kind, namespace, name, subresource) = match &need.target {
            Target::Url(path) => {
                urls.insert((need.verb, path));
                continue;
            }
            Target::Objects { kind, namespace, name, subresource } => (kind, namespace, name, subresource),
        };
        // A kind the cluster does not serve yet (a chart's CRD, installed by an earlier layer of
        // this run) is reviewed by the resource name `osbx rbac` grants for it, its scope taken
        // from the need: an access review needs no served resource, and a permission it lacks
        // must stop the run before its first write, not halfway through it.
        let (group, plural, namespaced) = match cluster.resolver.resolve(&kind.object(namespace.as_deref(), "")).await?
        {
            Some((ar, scope)) => (ar.group, ar.plural, matches!(scope, Scope::Namespaced)),
            None => (kind.group.clone(), Need::plural(kind), namespace.is_some()),
        };
        let key = Key {
            group,
            plural,
            subresource: *subresource,
            namespace: namespace.clone().filter(|_| namespaced),
            namespaced,
            verb: need.verb,
        };
        let names = keys.entry(key).or_insert_with(|| Some(BTreeSet::new()));
        match (names.as_mut(), name) {
            (Some(names), Some(name)) => {
                names.insert(name.clone());
            }
            (_, None) => *names = None,
            (None, Some(_)) => {}
        }
    }
    let api: Api<SelfSubjectAccessReview> = Api::all(cluster.client.clone());
    let resources: Vec<_> = keys
        .into_iter()
        .map(|(key, names)| {
            let api = api.clone();
            async move {
                if allowed(&api, Some(key.attributes(None)), None).await? {
                    return Ok(None);
                }
                let Some(names) = names.filter(|n| !n.is_empty()) else { return Ok(Some(key.denial(&[]))) };
                let answers = futures::future::join_all(
                    names.iter().map(|name| allowed(&api, Some(key.attributes(Some(name))), None)),
                )
                .await;
                let mut refused = Vec::new();
                for (name, answer) in names.iter().zip(answers) {
                    if !answer? {
                        refused.push(name.clone());
                    }
                }
                Ok(if refused.is_empty() { None } else { Some(key.denial(&refused)) })
            }
        })
        .collect();
    let urls: Vec<_> = urls
        .into_iter()
        .map(|(verb, path)| {
            let api = api.clone();
            async move {
                let attributes = NonResourceAttributes { path: Some(path.to_owned()), verb: Some(verb.to_owned()) };
                let ok = allowed(&api, None, Some(attributes)).await?;
                Ok(if ok { None } else { Some(format!("cannot {verb} {path}")) })
            }
        })
        .collect();
    let resources =
        stream::iter(resources).buffered(cluster.concurrency).collect::<Vec<Result<Option<String>, ReviewError>>>();
    let urls = stream::iter(urls).buffered(cluster.concurrency).collect::<Vec<Result<Option<String>, ReviewError>>>();
    let (resources, urls) = futures::join!(resources, urls);
    let mut denied = Vec::new();
    for r in urls.into_iter().chain(resources) {
        match r {
            Ok(Some(d)) => denied.push(d),
            Ok(None) => {}
            Err(ReviewError::Refused) => return Err(forbidden(run, &Operation::Review.needs())),
            Err(ReviewError::Cluster(e)) => return Err(e.into()),
        }
    }
    if denied.is_empty() { Ok(()) } else { Err(PreflightError::Forbidden { run, denied }) }
}

enum ReviewError {
    /// The user may not create access reviews.
    Refused,
    Cluster(ClusterError),
}

async fn allowed(
    api: &Api<SelfSubjectAccessReview>,
    resource_attributes: Option<ResourceAttributes>,
    non_resource_attributes: Option<NonResourceAttributes>,
) -> Result<bool, ReviewError> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec { resource_attributes, non_resource_attributes },
        ..SelfSubjectAccessReview::default()
    };
    match api.create(&PostParams::default(), &review).await {
        Ok(answer) => Ok(answer.status.is_some_and(|s| s.allowed)),
        Err(e) if is_forbidden(&e) => Err(ReviewError::Refused),
        Err(source) => {
            Err(ReviewError::Cluster(ClusterError::Api { subject: "SelfSubjectAccessReview".into(), error: source }))
        }
    }
}
