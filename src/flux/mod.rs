//! Flux's own meaning, stated once for everything that writes or reads Flux objects (the render,
//! apply's wait, lint, the offline review, rollout, `osbx status`): its kinds at the API versions
//! osbx writes, where a source points and whether that pin floats ([`source`]), and how
//! helm-controller names a release and merges its values ([`release`]).
//!
//! A pure room: it reads objects given as JSON and answers; it reaches no cluster, runs no
//! program and imports nothing from `cluster`, `deploy` or `commands` (the architecture tests
//! hold that).

pub(crate) mod release;
pub(crate) mod source;
pub(crate) mod versions;

use crate::object::{Gvk, KnownKind};

/// The API group every Flux kind's group ends with.
const GROUP_SUFFIX: &str = ".toolkit.fluxcd.io";

/// kustomize-controller's `Kustomization`: one layer of the tree.
pub(crate) const KUSTOMIZATION: KnownKind = KnownKind::new("kustomize.toolkit.fluxcd.io", "v1", "Kustomization");
/// helm-controller's `HelmRelease`.
pub(crate) const HELM_RELEASE: KnownKind = KnownKind::new("helm.toolkit.fluxcd.io", "v2", "HelmRelease");
/// source-controller's `GitRepository`.
pub(crate) const GIT_REPOSITORY: KnownKind = KnownKind::new("source.toolkit.fluxcd.io", "v1", "GitRepository");
/// source-controller's `OCIRepository`.
pub(crate) const OCI_REPOSITORY: KnownKind = KnownKind::new("source.toolkit.fluxcd.io", "v1", "OCIRepository");
/// source-controller's `HelmRepository`.
pub(crate) const HELM_REPOSITORY: KnownKind = KnownKind::new("source.toolkit.fluxcd.io", "v1", "HelmRepository");

/// Whether `gvk` is one of Flux's kinds (`*.toolkit.fluxcd.io`), at any version.
#[must_use]
pub(crate) fn is_flux(gvk: &Gvk) -> bool {
    gvk.group.ends_with(GROUP_SUFFIX)
}

/// Why a Kustomization or HelmRelease is not reconciled into the cluster it sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotHere {
    /// `spec.suspend` anything but absent or `false`: its controller applies and prunes nothing
    /// until it is resumed (another value is refused, not guessed at).
    Suspended,
    /// `spec.kubeConfig`: it is applied to another cluster.
    Remote,
}

impl NotHere {
    /// Whether `spec` (a Kustomization's or HelmRelease's) is not reconciled here, and why.
    #[must_use]
    pub(crate) fn of(spec: &serde_json::Value) -> Option<Self> {
        if !matches!(spec["suspend"], serde_json::Value::Null | serde_json::Value::Bool(false)) {
            Some(Self::Suspended)
        } else if spec["kubeConfig"].is_null() {
            None
        } else {
            Some(Self::Remote)
        }
    }

    /// The field that says so.
    #[must_use]
    pub(crate) fn field(self) -> &'static str {
        match self {
            Self::Suspended => "spec.suspend",
            Self::Remote => "spec.kubeConfig",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kinds_are_flux_s() {
        for k in [KUSTOMIZATION, HELM_RELEASE, GIT_REPOSITORY, OCI_REPOSITORY, HELM_REPOSITORY] {
            assert!(is_flux(&k.gvk()), "{k:?}");
        }
        assert!(!is_flux(&KnownKind::NODE.gvk()));
        assert!(!is_flux(&Gvk::new("kustomize.config.k8s.io", "v1beta1", "Kustomization")));
    }

    /// The templates write Flux's objects at the API versions stated here, and no other.
    #[test]
    fn the_templates_write_these_api_versions() {
        let known: Vec<String> = [KUSTOMIZATION, HELM_RELEASE, GIT_REPOSITORY, OCI_REPOSITORY, HELM_REPOSITORY]
            .iter()
            .map(|k| k.gvk().api_version())
            .collect();
        let mut seen = 0;
        for (path, text) in crate::embedded::templates() {
            for line in text.lines().filter_map(|l| l.trim().strip_prefix("apiVersion:")).map(str::trim) {
                if line.contains(GROUP_SUFFIX) {
                    assert!(known.iter().any(|k| k == line), "{path}: {line} is not one of {known:?}");
                    seen += 1;
                }
            }
        }
        assert!(seen >= 5, "the templates write Flux objects");
    }
}
