//! `chart.*`: charts that are not pinned, and values the pinned chart does not read.

use super::{Linter, Severity};
use crate::chart::Chart;
use crate::flux::release::{chart_name, release_values};
use crate::flux::source::Pin;
use crate::object::Object;
use crate::render::RenderedObject;

/// The profile field that pins what `object` installs: the one its layer's component names.
fn pin_field(object: &Object, layer: &str, l: &Linter<'_>) -> &'static str {
    l.loaded.profile.component_of(layer).and_then(|c| (c.pin)(&object.id)).unwrap_or("layers")
}

/// Why a chart source or release floats, if it does ([`Pin::floats`]).
fn floating(o: &Object) -> Option<String> {
    let pin = Pin::of(&o.value).filter(Pin::floats)?;
    let spec = &o.value["spec"];
    Some(match pin {
        Pin::Git(_) => format!("{} follows {}, not a tag, commit or exact semver", o.id, spec["ref"]),
        Pin::Oci(_) => format!("{} has no tag, digest or exact semver", o.id),
        Pin::Chart(version) => match version.asked() {
            Some(v) => format!("{} asks for chart version {v:?}, not an exact version", o.id),
            None => format!("{} names no chart version: Flux installs whatever is newest", o.id),
        },
    })
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
    for o in objects.iter().filter(|o| crate::flux::HELM_RELEASE.is(&o.object.id.gvk)) {
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
    use super::floating;
    use crate::object::Object;
    use serde_json::json;

    fn object(api_version: &str, kind: &str, spec: &serde_json::Value) -> Object {
        Object::new(
            json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "a", "namespace": "n"}, "spec": spec}),
        )
        .unwrap()
    }

    /// Each way a pin floats is a finding, its pinned neighbour is not: the same answer the
    /// review's chart cache asks ([`crate::flux::source::Pin::floats`]).
    #[test]
    fn each_floating_kind_is_unpinned() {
        let git = |r| object("source.toolkit.fluxcd.io/v1", "GitRepository", &json!({"ref": r}));
        let oci = |r| object("source.toolkit.fluxcd.io/v1", "OCIRepository", &json!({"ref": r}));
        let hr = |v: Option<&str>| {
            object(
                "helm.toolkit.fluxcd.io/v2",
                "HelmRelease",
                &json!({"chart": {"spec": {"version": v, "sourceRef": {"kind": "HelmRepository"}}}}),
            )
        };
        for o in [
            git(json!({"branch": "main"})),
            git(json!({"name": "refs/heads/main"})),
            git(json!({"name": "refs/heads/main", "tag": "v1"})),
            git(json!({"semver": ">=0.2.0"})),
            oci(json!({"tag": "latest"})),
            oci(json!(null)),
            oci(json!({"semver": "0.x", "tag": "0.2.2"})),
            hr(None),
            hr(Some("0.2.x")),
        ] {
            assert!(floating(&o).is_some(), "{}", o.value);
        }
        for o in [
            git(json!({"tag": "v1"})),
            git(json!({"name": "refs/tags/v1"})),
            git(json!({"commit": "0123abc"})),
            oci(json!({"tag": "0.2.2"})),
            oci(json!({"digest": "sha256:00"})),
            hr(Some("0.2.2")),
        ] {
            assert_eq!(floating(&o), None, "{}", o.value);
        }
        assert_eq!(
            floating(&git(json!({"branch": "main"}))).unwrap(),
            r#"GitRepository/n/a follows {"branch":"main"}, not a tag, commit or exact semver"#
        );
    }
}
