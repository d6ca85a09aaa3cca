//! Where a HelmRelease's chart comes from: its Flux source, and the pin it holds.

use serde_json::Value;

use super::ChartError;
use crate::object::Object;

/// Where a chart comes from, as its Flux source pins it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Fetch {
    /// A path in a git repository at a reference.
    Git { url: String, reference: GitRef, path: String },
    /// A chart of a Helm repository (`oci`: an OCI Helm repository).
    Repo { url: String, chart: String, version: Option<String>, oci: bool, plain_http: bool },
    /// An OCI artifact.
    Oci { url: String, reference: String, plain_http: bool },
}

/// A `GitRepository`'s `spec.ref`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum GitRef {
    Tag(String),
    Branch(String),
    Commit(String),
    Semver(String),
    Name(String),
}

impl std::fmt::Display for GitRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GitRef::Tag(t) => write!(f, "tag {t}"),
            GitRef::Branch(b) => write!(f, "branch {b}"),
            GitRef::Commit(c) => write!(f, "commit {c}"),
            GitRef::Semver(s) => write!(f, "semver {s}"),
            GitRef::Name(n) => write!(f, "{n}"),
        }
    }
}

impl Fetch {
    /// The pin, for people.
    pub(super) fn reference(&self) -> String {
        match self {
            Fetch::Git { reference, .. } => reference.to_string(),
            Fetch::Repo { version, .. } => format!("version {}", version.as_deref().unwrap_or("*")),
            Fetch::Oci { reference, .. } => reference.clone(),
        }
    }
}

pub(super) fn exact(version: &str) -> bool {
    semver::Version::parse(version.trim_start_matches('v')).is_ok()
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
        "GitRepository" => &["http://", "https://", "ssh://"],
        "HelmRepository" if s["type"] != "oci" => &["http://", "https://"],
        _ => &["oci://"],
    };
    crate::refs::url(&url, schemes).map_err(|r| refused(&shown, "spec.url", r))?;
    let shown = format!("{shown} ({url})");
    let plain_http = s["insecure"] == true;
    let fetch = match kind {
        "GitRepository" => {
            let r = &s["ref"];
            let check = |field: &str, value: &str, rule: fn(&str) -> Result<(), crate::refs::Refusal>| {
                rule(value).map_err(|why| refused(&shown, &format!("spec.ref.{field}"), why))
            };
            let reference = if let Some(c) = r["commit"].as_str() {
                check("commit", c, crate::refs::commit)?;
                GitRef::Commit(c.to_owned())
            } else if let Some(n) = r["name"].as_str() {
                check("name", n, crate::refs::git_ref)?;
                if !n.starts_with("refs/") {
                    return Err(refused(&shown, "spec.ref.name", "a reference name starts with refs/".into()));
                }
                GitRef::Name(n.to_owned())
            } else if let Some(v) = r["semver"].as_str() {
                check("semver", v, crate::refs::version)?;
                GitRef::Semver(v.to_owned())
            } else if let Some(t) = r["tag"].as_str() {
                check("tag", t, crate::refs::git_ref)?;
                GitRef::Tag(t.to_owned())
            } else {
                let b = r["branch"].as_str().unwrap_or("master");
                check("branch", b, crate::refs::git_ref)?;
                GitRef::Branch(b.to_owned())
            };
            let path = chart.ok_or_else(|| refusal("names no chart path in its GitRepository".into()))?;
            let path = crate::refs::repo_path(path).map_err(|r| refused(release, "spec.chart.spec.chart", r))?;
            Fetch::Git { url, reference, path }
        }
        "HelmRepository" => {
            let chart = chart.ok_or_else(|| refusal("names no chart".into()))?.to_owned();
            crate::refs::chart_name(&chart).map_err(|r| refused(release, "spec.chart.spec.chart", r))?;
            let version = spec["chart"]["spec"]["version"].as_str().filter(|v| *v != "*").map(str::to_owned);
            if let Some(v) = &version {
                crate::refs::version(v).map_err(|r| refused(release, "spec.chart.spec.version", r))?;
            }
            Fetch::Repo { url, chart, version, oci: s["type"] == "oci", plain_http }
        }
        "OCIRepository" => {
            let chart = url.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
            crate::refs::chart_name(chart).map_err(|r| refused(&shown, "spec.url (its last segment, the chart)", r))?;
            let r = &s["ref"];
            let reference = if let Some(d) = r["digest"].as_str() {
                crate::refs::digest(d).map_err(|why| refused(&shown, "spec.ref.digest", why))?;
                format!("digest {d}")
            } else if let Some(v) = r["semver"].as_str() {
                crate::refs::version(v).map_err(|why| refused(&shown, "spec.ref.semver", why))?;
                format!("semver {v}")
            } else {
                let t = r["tag"].as_str().unwrap_or("latest");
                crate::refs::oci_tag(t).map_err(|why| refused(&shown, "spec.ref.tag", why))?;
                format!("tag {t}")
            };
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
