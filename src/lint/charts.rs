//! `chart.*`: charts that are not pinned, and values the pinned chart does not read.

use serde_json::Value;

use super::{Linter, Severity};
use crate::chart::Chart;
use crate::merge::merge;
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

/// The chart a HelmRelease installs, by name: the last segment of its chart path, or of the
/// URL of the OCIRepository its `chartRef` names.
fn chart_name(release: &Value, objects: &[RenderedObject]) -> Option<String> {
    let spec = &release["spec"];
    if let Some(chart) = spec["chart"]["spec"]["chart"].as_str() {
        return chart.trim_end_matches('/').rsplit('/').next().map(str::to_owned);
    }
    let name = spec["chartRef"]["name"].as_str()?;
    let source = objects.iter().find(|o| o.object.id.kind() == spec["chartRef"]["kind"] && o.object.id.name == name)?;
    source.object.value["spec"]["url"].as_str()?.trim_end_matches('/').rsplit('/').next().map(str::to_owned)
}

/// The values a HelmRelease passes, as helm-controller merges them: `valuesFrom` in order (the
/// ConfigMaps and Secrets of the render), then the inline `values`.
fn release_values(release: &Value, objects: &[RenderedObject]) -> Value {
    let mut values = Value::Object(serde_json::Map::new());
    for from in release["spec"]["valuesFrom"].as_array().into_iter().flatten() {
        let key = from["valuesKey"].as_str().unwrap_or("values.yaml");
        let ns = release["metadata"]["namespace"].as_str();
        let Some(source) = objects.iter().find(|o| {
            o.object.id.kind() == from["kind"]
                && o.object.id.name == from["name"]
                && o.object.id.namespace.as_deref() == ns
        }) else {
            continue;
        };
        let text = source.object.value["data"][key].as_str().unwrap_or_default();
        let part: Value = serde_saphyr::from_str(text).unwrap_or(Value::Null);
        match from["targetPath"].as_str() {
            Some(path) => {
                let mut at = &mut values;
                for k in path.split('.') {
                    at = &mut at[k];
                }
                *at = Value::String(text.to_owned());
            }
            None => merge(&mut values, &part),
        }
    }
    merge(&mut values, &release["spec"]["values"]);
    values
}

/// Every leaf of `values` with its key path.
fn leaves(values: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match values {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                at.push(k.clone());
                leaves(v, at, out);
                at.pop();
            }
        }
        _ => out.push(at.clone()),
    }
}

pub(super) fn unread_values(l: &mut Linter<'_>, objects: &[RenderedObject], chart: &Chart) {
    for o in objects.iter().filter(|o| o.object.id.kind() == "HelmRelease") {
        if chart_name(&o.object.value, objects).as_deref() != Some(chart.name.as_str()) {
            continue;
        }
        let mut paths = Vec::new();
        leaves(&release_values(&o.object.value, objects), &mut Vec::new(), &mut paths);
        let component = l.loaded.profile.component_of(&o.layer);
        let field = component.map_or("layers", |c| c.section);
        let extra = component.and_then(|c| (c.values)(&l.loaded.profile.sections));
        for path in paths.iter().filter(|p| !p.is_empty() && !chart.reads(p)) {
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
