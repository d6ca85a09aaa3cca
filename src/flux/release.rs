//! A HelmRelease as helm-controller reads it: the release it names, the namespace it installs
//! into, the values it passes (its `valuesFrom` sources merged in order, then `values`) and the
//! chart it installs.

use serde_json::Value;

use crate::merge::merge;
use crate::object::Object;

/// helm-controller's release name: `spec.releaseName`, else `[targetNamespace-]name`, shortened
/// to 53 characters (the first 40, `-`, 12 hex digits of its SHA-256).
#[must_use]
pub(crate) fn release_name(release: &Value) -> String {
    if let Some(name) = release["spec"]["releaseName"].as_str().filter(|n| !n.is_empty()) {
        return name.to_owned();
    }
    let name = release["metadata"]["name"].as_str().unwrap_or_default();
    let full = match release["spec"]["targetNamespace"].as_str().filter(|n| !n.is_empty()) {
        Some(ns) => format!("{ns}-{name}"),
        None => name.to_owned(),
    };
    if full.len() <= 53 {
        return full;
    }
    let hash = crate::hash::sha256_hex(full.as_bytes());
    format!("{}-{}", &full[..40], &hash[..12])
}

/// The release's namespace: `spec.targetNamespace`, else the HelmRelease's.
#[must_use]
pub(crate) fn release_namespace(release: &Value) -> String {
    release["spec"]["targetNamespace"]
        .as_str()
        .filter(|n| !n.is_empty())
        .or(release["metadata"]["namespace"].as_str())
        .unwrap_or("default")
        .to_owned()
}

/// The values a HelmRelease passes to its chart, as helm-controller merges them: each
/// `valuesFrom` source in order (a ConfigMap's or Secret's key, `values.yaml` unless `valuesKey`
/// says otherwise: merged in, or set as one value at `targetPath`), then the inline `values`.
/// Sources are looked up among `objects` in the release's namespace; the ones that are not
/// there and not `optional` are returned by name (helm-controller would not install then).
#[must_use]
pub(crate) fn release_values<'a>(
    release: &Value,
    objects: &(impl IntoIterator<Item = &'a Object> + Clone),
) -> (Value, Vec<String>) {
    let mut values = Value::Object(serde_json::Map::new());
    let mut missing = Vec::new();
    let ns = release["metadata"]["namespace"].as_str();
    for from in release["spec"]["valuesFrom"].as_array().into_iter().flatten() {
        let key = from["valuesKey"].as_str().unwrap_or("values.yaml");
        let kind = from["kind"].as_str().unwrap_or_default();
        let name = from["name"].as_str().unwrap_or_default();
        let source = objects.clone().into_iter().find(|o| {
            o.id.kind() == kind && o.id.name == name && o.id.namespace.as_deref() == ns && o.id.gvk.group.is_empty()
        });
        let text = source.and_then(|s| data(&s.value, key));
        let Some(text) = text else {
            if from["optional"] != true {
                missing.push(format!("{kind}/{}/{name} key {key}", ns.unwrap_or_default()));
            }
            continue;
        };
        match from["targetPath"].as_str() {
            Some(path) => {
                let mut at = &mut values;
                for k in path.split('.') {
                    at = &mut at[k];
                }
                *at = typed(&text);
            }
            None => merge(&mut values, &serde_saphyr::from_str::<Value>(&text).unwrap_or(Value::Null)),
        }
    }
    merge(&mut values, &release["spec"]["values"]);
    (values, missing)
}

/// A `targetPath` value as helm-controller sets it (Helm's `--set` parser): quoted, the text
/// inside the quotes; else `true`, `false`, `null` and integers typed, anything else a string.
fn typed(text: &str) -> Value {
    let quoted = |q: char| text.len() >= 2 && text.starts_with(q) && text.ends_with(q);
    if quoted('"') || quoted('\'') {
        return Value::String(text[1..text.len() - 1].to_owned());
    }
    match text {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        "null" => Value::Null,
        _ => text.parse::<i64>().map_or_else(|_| Value::String(text.to_owned()), Value::from),
    }
}

/// The text of a ConfigMap's or Secret's `key` (a Secret's `data` decoded, or its `stringData`).
fn data(obj: &Value, key: &str) -> Option<String> {
    if let Some(text) = obj["data"][key].as_str() {
        if obj["kind"] == "Secret" {
            let bytes: k8s_openapi::ByteString = serde_json::from_value(Value::String(text.to_owned())).ok()?;
            return String::from_utf8(bytes.0).ok();
        }
        return Some(text.to_owned());
    }
    obj["stringData"][key].as_str().map(str::to_owned)
}

/// The chart a HelmRelease installs, by name: the last segment of its chart path, or of the
/// URL of the OCIRepository its `chartRef` names (among `objects`).
#[must_use]
pub(crate) fn chart_name<'a>(release: &Value, objects: impl IntoIterator<Item = &'a Object>) -> Option<String> {
    let spec = &release["spec"];
    if let Some(chart) = spec["chart"]["spec"]["chart"].as_str() {
        return chart.trim_end_matches('/').rsplit('/').next().map(str::to_owned);
    }
    let name = spec["chartRef"]["name"].as_str()?;
    let source = objects.into_iter().find(|o| o.id.kind() == spec["chartRef"]["kind"] && o.id.name == name)?;
    source.value["spec"]["url"].as_str()?.trim_end_matches('/').rsplit('/').next().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn release_names_are_helm_controllers() {
        let hr = |name: &str, target: Option<&str>, release: Option<&str>| json!({"metadata": {"name": name, "namespace": "n"}, "spec": {"targetNamespace": target, "releaseName": release}});
        assert_eq!(release_name(&hr("a", None, None)), "a");
        assert_eq!(release_name(&hr("a", Some("t"), None)), "t-a");
        assert_eq!(release_name(&hr("a", Some("t"), Some("r"))), "r");
        let long = release_name(&hr(&"x".repeat(50), Some("target"), None));
        assert_eq!(long.len(), 53);
        assert!(long.starts_with(&format!("target-{}", "x".repeat(33))), "{long}");
        assert_eq!(&long[40..41], "-");
        assert_eq!(release_namespace(&hr("a", None, None)), "n");
        assert_eq!(release_namespace(&hr("a", Some("t"), None)), "t");
    }
}
