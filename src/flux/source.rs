//! Where a Flux source points, typed once from its object, and whether that pin floats.
//!
//! source-controller follows exactly one field of a reference, in a fixed precedence: a
//! `GitRepository`'s `spec.ref` is its `commit`, else `name`, else `semver`, else `tag`, else
//! `branch` (`master` when nothing is set); an `OCIRepository`'s is its `digest`, else `semver`,
//! else `tag` (`latest` when nothing is set). A HelmRelease whose chart comes from a
//! `HelmRepository` is pinned by `spec.chart.spec.version` (`*`, the newest, when unset); one
//! whose chart comes from a Git or OCI source is pinned by that source.
//!
//! A pin *floats* when the same object can fetch other content tomorrow: a branch, a Git
//! reference other than a tag's, a semver range, an OCI `latest` tag, a chart version range.
//! Lint's `chart.unpinned` warns about exactly these, and the review's chart cache refetches
//! exactly these ([`Pin::floats`]).

use std::fmt;

use serde_json::Value;

use super::{GIT_REPOSITORY, HELM_RELEASE, HELM_REPOSITORY, OCI_REPOSITORY};

/// Whether `version` is one exact version (`1.2.3`, `v1.2.3`, `1.2.3-rc.1`), not a range.
#[must_use]
pub(crate) fn exact(version: &str) -> bool {
    semver::Version::parse(version.strip_prefix('v').unwrap_or(version)).is_ok()
}

/// A `GitRepository`'s `spec.ref`: the one field source-controller follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GitRef {
    /// A commit SHA.
    Commit(String),
    /// A full reference name (`refs/tags/v1`, `refs/heads/main`, `refs/pull/1/head`).
    Name(String),
    /// The highest tag a semver range matches.
    Semver(String),
    /// A tag, as the repository's owners promise not to move it.
    Tag(String),
    /// A branch's head.
    Branch(String),
}

impl GitRef {
    /// The reference `spec.ref` (of a `GitRepository`) names.
    #[must_use]
    pub(crate) fn of(reference: &Value) -> Self {
        let field = |f: &str| reference[f].as_str().map(str::to_owned);
        if let Some(c) = field("commit") {
            Self::Commit(c)
        } else if let Some(n) = field("name") {
            Self::Name(n)
        } else if let Some(s) = field("semver") {
            Self::Semver(s)
        } else if let Some(t) = field("tag") {
            Self::Tag(t)
        } else {
            Self::Branch(field("branch").unwrap_or_else(|| "master".to_owned()))
        }
    }

    /// The field of `spec.ref` it was read from.
    #[must_use]
    pub(crate) fn field(&self) -> &'static str {
        match self {
            Self::Commit(_) => "commit",
            Self::Name(_) => "name",
            Self::Semver(_) => "semver",
            Self::Tag(_) => "tag",
            Self::Branch(_) => "branch",
        }
    }

    /// The field's value.
    #[must_use]
    pub(crate) fn value(&self) -> &str {
        match self {
            Self::Commit(v) | Self::Name(v) | Self::Semver(v) | Self::Tag(v) | Self::Branch(v) => v,
        }
    }

    /// Whether the same reference can name another commit tomorrow: a branch, a semver range, or
    /// a reference name that is not a tag's.
    #[must_use]
    pub(crate) fn floats(&self) -> bool {
        match self {
            Self::Commit(_) | Self::Tag(_) => false,
            Self::Name(n) => !n.starts_with("refs/tags/"),
            Self::Semver(s) => !exact(s),
            Self::Branch(_) => true,
        }
    }
}

impl fmt::Display for GitRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(n) => write!(f, "{n}"),
            other => write!(f, "{} {}", other.field(), other.value()),
        }
    }
}

/// An `OCIRepository`'s `spec.ref`: the one field source-controller follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OciRef {
    /// A manifest digest (`sha256:…`).
    Digest(String),
    /// The highest tag a semver range matches.
    Semver(String),
    /// A tag of the artifact (`latest` when `spec.ref` names nothing).
    Tag(String),
}

impl OciRef {
    /// The reference `spec.ref` (of an `OCIRepository`) names.
    #[must_use]
    pub(crate) fn of(reference: &Value) -> Self {
        let field = |f: &str| reference[f].as_str().map(str::to_owned);
        if let Some(d) = field("digest") {
            Self::Digest(d)
        } else if let Some(s) = field("semver") {
            Self::Semver(s)
        } else {
            Self::Tag(field("tag").unwrap_or_else(|| "latest".to_owned()))
        }
    }

    /// The field of `spec.ref` it was read from.
    #[must_use]
    pub(crate) fn field(&self) -> &'static str {
        match self {
            Self::Digest(_) => "digest",
            Self::Semver(_) => "semver",
            Self::Tag(_) => "tag",
        }
    }

    /// The field's value.
    #[must_use]
    pub(crate) fn value(&self) -> &str {
        match self {
            Self::Digest(v) | Self::Semver(v) | Self::Tag(v) => v,
        }
    }

    /// Whether the same reference can name another artifact tomorrow: `latest`, or a semver
    /// range.
    #[must_use]
    pub(crate) fn floats(&self) -> bool {
        match self {
            Self::Digest(_) => false,
            Self::Semver(s) => !exact(s),
            Self::Tag(t) => t == "latest",
        }
    }
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.field(), self.value())
    }
}

/// The chart version a HelmRelease asks a `HelmRepository` for (`spec.chart.spec.version`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChartVersion(Option<String>);

impl ChartVersion {
    /// The version `release` (a HelmRelease) asks for; unset and `*` are the same: any.
    #[must_use]
    pub(crate) fn of(release: &Value) -> Self {
        Self(release["spec"]["chart"]["spec"]["version"].as_str().filter(|v| *v != "*").map(str::to_owned))
    }

    /// The version or range asked for, `None` for any.
    #[must_use]
    pub(crate) fn asked(&self) -> Option<&str> {
        self.0.as_deref()
    }

    /// Whether helm-controller can install another chart tomorrow: any version, or a range.
    #[must_use]
    pub(crate) fn floats(&self) -> bool {
        !self.0.as_deref().is_some_and(exact)
    }
}

impl fmt::Display for ChartVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "version {}", self.0.as_deref().unwrap_or("*"))
    }
}

/// What pins the content an object makes Flux fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pin {
    /// A `GitRepository`'s reference.
    Git(GitRef),
    /// An `OCIRepository`'s reference.
    Oci(OciRef),
    /// The chart version a HelmRelease asks a `HelmRepository` for.
    Chart(ChartVersion),
}

impl Pin {
    /// The pin `object` holds: a Git or OCI source's reference, or the chart version of a
    /// HelmRelease whose chart comes from a `HelmRepository`. `None` for every other object (a
    /// HelmRelease of a Git or OCI source is pinned by that source).
    #[must_use]
    pub(crate) fn of(object: &Value) -> Option<Self> {
        let gvk = crate::object::Gvk::of(object).ok()?;
        let spec = &object["spec"];
        if GIT_REPOSITORY.is(&gvk) {
            Some(Self::Git(GitRef::of(&spec["ref"])))
        } else if OCI_REPOSITORY.is(&gvk) {
            Some(Self::Oci(OciRef::of(&spec["ref"])))
        } else if HELM_RELEASE.is(&gvk) && spec["chart"]["spec"]["sourceRef"]["kind"] == HELM_REPOSITORY.kind {
            Some(Self::Chart(ChartVersion::of(object)))
        } else {
            None
        }
    }

    /// Whether the pin can fetch other content tomorrow than today.
    #[must_use]
    pub(crate) fn floats(&self) -> bool {
        match self {
            Self::Git(r) => r.floats(),
            Self::Oci(r) => r.floats(),
            Self::Chart(v) => v.floats(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn exact_versions() {
        for v in ["1.2.3", "v0.30.0", "4.1.0-rc.1"] {
            assert!(exact(v), "{v}");
        }
        for v in ["*", "0.30.x", ">=1.0.0", "^1.2.3", "1.2", "latest"] {
            assert!(!exact(v), "{v}");
        }
    }

    fn pin(kind: &str, spec: &Value) -> Pin {
        let group = if kind == "HelmRelease" { "helm.toolkit.fluxcd.io/v2" } else { "source.toolkit.fluxcd.io/v1" };
        Pin::of(&json!({"apiVersion": group, "kind": kind, "metadata": {"name": "a"}, "spec": spec})).unwrap()
    }

    #[test]
    fn git_references_follow_source_controller_s_precedence() {
        let git = |r: Value| GitRef::of(&r);
        assert_eq!(git(json!({})), GitRef::Branch("master".into()));
        assert_eq!(git(json!({"branch": "main", "tag": "v1"})), GitRef::Tag("v1".into()));
        assert_eq!(git(json!({"tag": "v1", "semver": "1.x"})), GitRef::Semver("1.x".into()));
        assert_eq!(git(json!({"semver": "1.x", "name": "refs/heads/a"})), GitRef::Name("refs/heads/a".into()));
        assert_eq!(git(json!({"name": "refs/heads/a", "commit": "abc"})), GitRef::Commit("abc".into()));
        assert_eq!(git(json!({"tag": "v1"})).to_string(), "tag v1");
        assert_eq!(git(json!({"name": "refs/tags/v1"})).to_string(), "refs/tags/v1");
        assert_eq!(OciRef::of(&json!({})), OciRef::Tag("latest".into()));
        assert_eq!(
            OciRef::of(&json!({"tag": "1", "semver": "1.x", "digest": "sha256:0"})).to_string(),
            "digest sha256:0"
        );
    }

    /// Every way a pin floats, and its pinned neighbour.
    #[test]
    fn each_floating_kind_floats_and_its_pinned_neighbour_does_not() {
        let floating = [
            pin("GitRepository", &json!({})),
            pin("GitRepository", &json!({"ref": {"branch": "main"}})),
            pin("GitRepository", &json!({"ref": {"name": "refs/heads/main"}})),
            pin("GitRepository", &json!({"ref": {"name": "refs/heads/main", "tag": "v1"}})),
            pin("GitRepository", &json!({"ref": {"semver": ">=0.2.0"}})),
            pin("OCIRepository", &json!({})),
            pin("OCIRepository", &json!({"ref": {"tag": "latest"}})),
            pin("OCIRepository", &json!({"ref": {"semver": "0.x", "tag": "0.2.2"}})),
            pin("HelmRelease", &json!({"chart": {"spec": {"sourceRef": {"kind": "HelmRepository"}}}})),
            pin("HelmRelease", &json!({"chart": {"spec": {"version": "*", "sourceRef": {"kind": "HelmRepository"}}}})),
            pin(
                "HelmRelease",
                &json!({"chart": {"spec": {"version": "0.2.x", "sourceRef": {"kind": "HelmRepository"}}}}),
            ),
        ];
        for p in &floating {
            assert!(p.floats(), "{p:?}");
        }
        let pinned = [
            pin("GitRepository", &json!({"ref": {"commit": "0123abc", "branch": "main"}})),
            pin("GitRepository", &json!({"ref": {"tag": "helm/opensandbox/0.2.2"}})),
            pin("GitRepository", &json!({"ref": {"name": "refs/tags/v1"}})),
            pin("GitRepository", &json!({"ref": {"semver": "v0.2.2"}})),
            pin("OCIRepository", &json!({"ref": {"tag": "0.2.2"}})),
            pin("OCIRepository", &json!({"ref": {"digest": "sha256:00", "tag": "latest"}})),
            pin("OCIRepository", &json!({"ref": {"semver": "0.2.2"}})),
            pin(
                "HelmRelease",
                &json!({"chart": {"spec": {"version": "0.2.2", "sourceRef": {"kind": "HelmRepository"}}}}),
            ),
        ];
        for p in &pinned {
            assert!(!p.floats(), "{p:?}");
        }
        let from_git = json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease", "metadata": {"name": "a"},
            "spec": {"chart": {"spec": {"sourceRef": {"kind": "GitRepository"}}}}});
        assert_eq!(Pin::of(&from_git), None, "pinned by its source");
    }
}
