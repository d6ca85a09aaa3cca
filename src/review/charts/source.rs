//! Where a HelmRelease's chart comes from: its Flux source, and the pin it holds.

use serde_json::Value;

use super::ChartError;
use crate::flux::source::{ChartVersion, GitRef, OciRef};
use crate::flux::{GIT_REPOSITORY, HELM_REPOSITORY, OCI_REPOSITORY};
use crate::object::Object;

/// Where a chart comes from, as its Flux source pins it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Fetch {
    /// A path in a git repository at a reference.
    Git { url: String, reference: GitRef, path: String },
    /// A chart of a Helm repository (`oci`: an OCI Helm repository).
    Repo { url: String, chart: String, version: ChartVersion, oci: bool, plain_http: bool },
    /// An OCI artifact.
    Oci { url: String, reference: OciRef, plain_http: bool },
}

impl Fetch {
    /// The pin, for people.
    pub(super) fn reference(&self) -> String {
        match self {
            Fetch::Git { reference, .. } => reference.to_string(),
            Fetch::Repo { version, .. } => version.to_string(),
            Fetch::Oci { reference, .. } => reference.to_string(),
        }
    }

    /// Whether what this pin fetched today can differ tomorrow ([`crate::flux::source`]): a
    /// cached copy is then fetched again.
    pub(super) fn floats(&self) -> bool {
        match self {
            Fetch::Git { reference, .. } => reference.floats(),
            Fetch::Repo { version, .. } => version.floats(),
            Fetch::Oci { reference, .. } => reference.floats(),
        }
    }
}

/// Where `release`'s chart comes from: its source among `side`, and that source named. Every
/// name the HelmRelease and its source give is the change's and checked by its kind's rule
/// ([`crate::refs`]) before it becomes a path or an argument of git or helm.
pub(super) fn locate(release: &str, hr: &Value, side: &[&Object]) -> Result<(Fetch, String), ChartError> {
    let spec = &hr["spec"];
    let ns = hr["metadata"]["namespace"].as_str().unwrap_or_default();
    let refusal = |reason: String| ChartError::Release { release: release.to_owned(), reason };
    let refused = |object: &str, field: &str, reason: crate::refs::Refusal| ChartError::Refused {
        object: object.to_owned(),
        field: field.to_owned(),
        reason,
    };
    let (source_ref, chart) = if spec["chartRef"].is_object() {
        (&spec["chartRef"], None)
    } else {
        (&spec["chart"]["spec"]["sourceRef"], spec["chart"]["spec"]["chart"].as_str())
    };
    let kind = source_ref["kind"].as_str().unwrap_or_default();
    let name = source_ref["name"].as_str().unwrap_or_default();
    let source_ns = source_ref["namespace"].as_str().unwrap_or(ns);
    let shown = format!("{kind} {source_ns}/{name}");
    let source = side
        .iter()
        .find(|o| o.id.kind() == kind && o.id.name == name && o.id.namespace.as_deref() == Some(source_ns))
        .ok_or_else(|| {
            refusal(format!("its chart source {shown} is not in the repository: its chart cannot be expanded"))
        })?;
    let s = &source.value["spec"];
    let url = s["url"].as_str().unwrap_or_default().to_owned();
    let schemes: &[&str] = match kind {
        k if k == GIT_REPOSITORY.kind => &["http://", "https://", "ssh://"],
        k if k == HELM_REPOSITORY.kind && s["type"] != "oci" => &["http://", "https://"],
        _ => &["oci://"],
    };
    crate::refs::url(&url, schemes).map_err(|r| refused(&shown, "spec.url", r))?;
    let shown = format!("{shown} ({url})");
    let plain_http = s["insecure"] == true;
    let fetch = match kind {
        k if k == GIT_REPOSITORY.kind => {
            let reference = GitRef::of(&s["ref"]);
            let rule = match reference {
                GitRef::Commit(_) => crate::refs::commit,
                GitRef::Semver(_) => crate::refs::version,
                GitRef::Name(_) | GitRef::Tag(_) | GitRef::Branch(_) => crate::refs::git_ref,
            };
            let field = format!("spec.ref.{}", reference.field());
            rule(reference.value()).map_err(|why| refused(&shown, &field, why))?;
            if let GitRef::Semver(range) = &reference {
                crate::flux::versions::Constraint::parse(range)
                    .map_err(|why| refused(&shown, &field, format!("{why} (a semver constraint as Flux reads it)")))?;
            }
            if matches!(&reference, GitRef::Name(n) if !n.starts_with("refs/")) {
                return Err(refused(&shown, &field, "a reference name starts with refs/".into()));
            }
            let path = chart.ok_or_else(|| refusal("names no chart path in its GitRepository".into()))?;
            let path = crate::refs::repo_path(path).map_err(|r| refused(release, "spec.chart.spec.chart", r))?;
            Fetch::Git { url, reference, path }
        }
        k if k == HELM_REPOSITORY.kind => {
            let chart = chart.ok_or_else(|| refusal("names no chart".into()))?.to_owned();
            crate::refs::chart_name(&chart).map_err(|r| refused(release, "spec.chart.spec.chart", r))?;
            let version = ChartVersion::of(hr);
            if let Some(v) = version.asked() {
                crate::refs::version(v).map_err(|r| refused(release, "spec.chart.spec.version", r))?;
            }
            Fetch::Repo { url, chart, version, oci: s["type"] == "oci", plain_http }
        }
        k if k == OCI_REPOSITORY.kind => {
            let chart = url.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
            crate::refs::chart_name(chart).map_err(|r| refused(&shown, "spec.url (its last segment, the chart)", r))?;
            let reference = OciRef::of(&s["ref"]);
            let rule = match reference {
                OciRef::Digest(_) => crate::refs::digest,
                OciRef::Semver(_) => crate::refs::version,
                OciRef::Tag(_) => crate::refs::oci_tag,
            };
            rule(reference.value()).map_err(|why| refused(&shown, &format!("spec.ref.{}", reference.field()), why))?;
            Fetch::Oci { url, reference, plain_http }
        }
        other => {
            return Err(refusal(format!(
                "its chart source kind {other} is not expanded (GitRepository, HelmRepository and OCIRepository are)"
            )));
        }
    };
    Ok((fetch, shown))
}
