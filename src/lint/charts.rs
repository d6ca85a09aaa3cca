//! `chart.*`: charts that are not pinned, and values the pinned chart does not read.

use super::{Linter, Severity};
use crate::chart::{Chart, chart_name, release_values};
use crate::object::Object;
use crate::render::RenderedObject;

/// The profile field that pins what `object` installs: the one its layer's component names.
fn pin_field(object: &Object, layer: &str, l: &Linter<'_>) -> &'static str {
    l.loaded.profile.component_of(layer).and_then(|c| (c.pin)(&object.id)).unwrap_or("layers")
}

/// An exact version (`1.2.3`, `v1.2.3`, `1.2.3-rc.1`), not a range.
fn exact(version: &str) -> bool {
    let v = version.strip_prefix('v').unwrap_or(version);
    let core = v.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Why a chart source or release floats, if it does.
fn floating(o: &Object) -> Option<String> {
    let spec = &o.value["spec"];
    match o.id.kind() {
        "GitRepository" => {
            let r = &spec["ref"];
            let pinned = r["commit"].is_string()
                || r["tag"].is_string()
                || r["name"].as_str().is_some_and(|n| n.starts_with("refs/tags/"))
                || r["semver"].as_str().is_some_and(exact);
            (!pinned).then(|| format!("{} follows {r}, not a tag, commit or exact semver", o.id))
        }
        "OCIRepository" => {
            let r = &spec["ref"];
            let pinned = r["digest"].is_string()
                || r["tag"].as_str().is_some_and(|t| t != "latest")
                || r["semver"].as_str().is_some_and(exact);
            (!pinned).then(|| format!("{} has no tag, digest or exact semver", o.id))
        }
        // A chart from a Helm repository must name its version; one from a Git or OCI source is
        // pinned by that source.
        "HelmRelease" if spec["chart"]["spec"]["sourceRef"]["kind"] == "HelmRepository" => {
            match spec["chart"]["spec"]["version"].as_str() {
                Some(v) if exact(v) => None,
                Some(v) => Some(format!("{} asks for chart version {v:?}, not an exact version", o.id)),
                None => Some(format!("{} names no chart version: Flux installs whatever is newest", o.id)),
            }
        }
        _ => None,
    }
}

pub(super) fn unpinned(l: &mut Linter<'_>, objects: &[RenderedObject]) {
    for o in objects {
        if let Some(why) = floating(&o.object) {
            let field = pin_field(&o.object, &o.layer, l);
            l.add("chart.unpinned", Severity::Warning, field, why, "pin an exact chart version, tag or commit");
        }
    }
}

pub(super) fn unread_values(l: &mut Linter<'_>, objects: &[RenderedObject], chart: &Chart) {
    let all = || objects.iter().map(|o| &o.object);
    for o in objects.iter().filter(|o| o.object.id.kind() == "HelmRelease") {
        if chart_name(&o.object.value, all()).as_deref() != Some(chart.name.as_str()) {
            continue;
        }
        let (values, _) = release_values(&o.object.value, &all());
        let component = l.loaded.profile.component_of(&o.layer);
        let field = component.map_or("layers", |c| c.section);
        let extra = component.and_then(|c| (c.values)(&l.loaded.profile.sections));
        for path in chart.unread(&values) {
            // A key of the section's own `values` is located there.
            let in_extra = extra.is_some_and(|e| path.iter().try_fold(e, |at, k| at.get(k)).is_some());
            let at = if in_extra { format!("{field}.values.{}", path.join(".")) } else { field.to_owned() };
            l.add(
                "chart.unread-value",
                Severity::Error,
                &at,
                format!(
                    "{} sets `{}`, which chart {} {} does not read: dead configuration",
                    o.object.id,
                    path.join("."),
                    chart.name,
                    chart.version
                ),
                "remove the value, or pin the chart version that reads it",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::exact;

    #[test]
    fn exact_versions() {
        for v in ["1.2.3", "v0.30.0", "4.1.0-rc.1"] {
            assert!(exact(v), "{v}");
        }
        for v in ["*", "0.30.x", ">=1.0.0", "^1.2.3", "1.2", "latest"] {
            assert!(!exact(v), "{v}");
        }
    }
}
