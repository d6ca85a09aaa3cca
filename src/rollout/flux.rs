//! Until Flux has reconciled a commit on one cluster: the root `GitRepository` at the commit,
//! then the Kustomizations (the root one, which applies `clusters/<name>/`, and every layer's)
//! having applied it and Ready at their generation, then the HelmReleases Ready at theirs. Each
//! step watches its objects ([`wait::wait_until`]); the source is first asked to reconcile now,
//! as `flux reconcile source git` does.

use std::time::{Duration, Instant};

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::cluster::operation::{Objects, Operation};
use crate::cluster::wait::{self, WaitError, WaitOptions};
use crate::cluster::{Cluster, ClusterError};
use crate::flux::{GIT_REPOSITORY, HELM_RELEASE};
use crate::object::ObjectRef;
use crate::profile::Profile;
use crate::progress::Progress;
use crate::readiness::{self, Status, StatusResult};

/// The root source and Kustomization of a cluster: `cluster.sourceRef` in `cluster.fluxNamespace`
/// (`flux bootstrap` names both alike).
fn roots(profile: &Profile) -> (ObjectRef, ObjectRef) {
    let (ns, name) = (profile.cluster.flux_namespace.as_str(), profile.cluster.source_ref.as_str());
    (GIT_REPOSITORY.object(Some(ns), name), crate::flux::KUSTOMIZATION.object(Some(ns), name))
}

/// What waiting for a commit does on a cluster with the Flux objects `flux` (the layers'
/// Kustomizations, HelmReleases and chart sources the profile renders).
pub(super) fn operations(profile: &Profile, flux: &[ObjectRef]) -> Vec<Operation> {
    let (source, root) = roots(profile);
    let mut out =
        vec![Operation::Patch(source.clone()), Operation::Wait(source), Operation::Get(Objects::Named(root.clone()))];
    out.push(Operation::Wait(root));
    out.extend(flux.iter().cloned().map(Operation::Wait));
    out
}

/// Whether a Flux revision (`main@sha1:<sha>`, `sha1:<sha>`, `<sha>`) is the commit `sha`.
fn at(revision: &str, sha: &str) -> bool {
    revision.rsplit(':').next().is_some_and(|r| r == sha)
}

/// Judge a Flux object against the commit: Current only when it has reconciled (the source) or
/// applied (a Kustomization) the commit, and is Ready at its generation.
fn judge(sha: &str, r: &ObjectRef, obj: &Value) -> StatusResult {
    let s = readiness::compute(obj);
    let short = &sha[..sha.len().min(12)];
    let revision = if GIT_REPOSITORY.is(&r.gvk) {
        Some(obj["status"]["artifact"]["revision"].as_str().unwrap_or_default())
    } else if crate::flux::KUSTOMIZATION.is(&r.gvk) {
        Some(obj["status"]["lastAppliedRevision"].as_str().unwrap_or_default())
    } else {
        None
    };
    match revision {
        Some(rev) if !at(rev, sha) && s.status != Status::Failed => StatusResult {
            status: Status::InProgress,
            message: format!(
                "at {}, not yet {short} ({}: {})",
                if rev.is_empty() { "no revision" } else { rev },
                s.status,
                s.message
            ),
        },
        _ => s,
    }
}

/// Ask Flux to fetch the source now (`reconcile.fluxcd.io/requestedAt`).
async fn request(cluster: &Cluster, source: &ObjectRef) -> Result<(), ClusterError> {
    let Some(api) = cluster.resolver.api(source).await? else { return Ok(()) };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let patch = json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": now.to_string()}}});
    match api.patch(&source.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        // No such source: the wait below says so.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(error) => Err(ClusterError::Api { subject: source.to_string(), error }),
    }
}

/// Wait until Flux on `cluster` has reconciled commit `sha`, or `timeout` passes.
///
/// # Errors
/// [`WaitError`]: a Flux object failed, the deadline passed (naming what was not there yet), or
/// the cluster refused a read.
pub(super) async fn reconciled(
    cluster: &Cluster,
    profile: &Profile,
    flux: &[ObjectRef],
    sha: &str,
    timeout: Duration,
    progress: &dyn Progress,
) -> Result<(), WaitError> {
    let opts = WaitOptions { interval: Duration::from_secs(2), deadline: Instant::now() + timeout, fail_fast: true };
    let (source, root) = roots(profile);
    request(cluster, &source).await?;
    let judge = |r: &ObjectRef, v: &Value| judge(sha, r, v);
    wait::wait_until(cluster, std::slice::from_ref(&source), &opts, progress, &judge).await?;
    // The root Kustomization applies the layers' Kustomizations: it goes first (a cluster
    // synced without one is left to its layers).
    let mut kustomizations: Vec<ObjectRef> =
        flux.iter().filter(|r| crate::flux::KUSTOMIZATION.is(&r.gvk)).cloned().collect();
    if cluster.get(&root).await?.is_some() {
        wait::wait_until(cluster, std::slice::from_ref(&root), &opts, progress, &judge).await?;
    }
    kustomizations.retain(|k| *k != root);
    wait::wait_until(cluster, &kustomizations, &opts, progress, &judge).await?;
    let releases: Vec<ObjectRef> = flux.iter().filter(|r| HELM_RELEASE.is(&r.gvk)).cloned().collect();
    wait::wait_for_set(cluster, &releases, &opts, progress).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_name_their_commit() {
        let sha = "0123456789abcdef0123456789abcdef01234567";
        assert!(at(&format!("main@sha1:{sha}"), sha));
        assert!(at(&format!("sha1:{sha}"), sha));
        assert!(at(sha, sha));
        assert!(!at("main@sha1:ffff", sha));
        let k = crate::flux::KUSTOMIZATION.object(Some("flux-system"), "apps");
        let obj = json!({"metadata": {"generation": 2}, "status": {"observedGeneration": 2, "lastAppliedRevision": "main@sha1:ffff",
            "conditions": [{"type": "Ready", "status": "True", "reason": "ReconciliationSucceeded", "observedGeneration": 2}]}});
        let s = judge(sha, &k, &obj);
        assert_eq!(s.status, Status::InProgress);
        assert!(s.message.starts_with("at main@sha1:ffff, not yet 0123456789ab (Current: "), "{}", s.message);
        let mut applied = obj.clone();
        applied["status"]["lastAppliedRevision"] = json!(format!("main@sha1:{sha}"));
        assert_eq!(judge(sha, &k, &applied).status, Status::Current);
    }
}
