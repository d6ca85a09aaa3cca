//! A HelmRelease's values as helm-controller computes them, and the probes of the dead-key check.
//!
//! helm-controller (`internal/chartutil` `ChartValuesFromReferences`): start from `{}`; for each
//! `spec.valuesFrom` entry in order, read `data[valuesKey]` (default `values.yaml`) of the
//! ConfigMap or Secret in the HelmRelease's namespace; with `targetPath`, set that dotted path to
//! the text as a string, otherwise parse it as YAML and deep-merge it (maps merge key by key,
//! anything else is replaced); a missing object or key is skipped when `optional`, an error
//! otherwise. Finally `spec.values` is deep-merged over the result.

use std::fmt::Write as _;

use serde_json::{Map, Value};

/// The suffix a string probe appends.
pub const PROBE_SUFFIX: &str = "-osbx-probe";

/// The values helm-controller passes to helm for `hr`, reading ConfigMaps and Secrets from
/// `objects` (the osbx render). The error says which reference failed and why.
pub fn resolve(hr: &Value, objects: &[Value]) -> Result<Value, String> {
    let namespace = hr["metadata"]["namespace"].as_str().unwrap_or("default");
    let mut result = Value::Object(Map::new());
    for (i, reference) in hr["spec"]["valuesFrom"].as_array().into_iter().flatten().enumerate() {
        let kind = reference["kind"].as_str().unwrap_or_default();
        let name = reference["name"].as_str().unwrap_or_default();
        let key = reference["valuesKey"].as_str().filter(|k| !k.is_empty()).unwrap_or("values.yaml");
        let optional = reference["optional"].as_bool().unwrap_or(false);
        let at = format!("spec.valuesFrom[{i}] ({kind} {namespace}/{name}, key {key})");
        let text = match data_of(objects, kind, namespace, name, key) {
            Ok(text) => text,
            Err(_) if optional => continue,
            Err(why) => return Err(format!("{at}: {why}")),
        };
        if let Some(path) = reference["targetPath"].as_str().filter(|p| !p.is_empty()) {
            set_path(&mut result, path, text).map_err(|e| format!("{at}: targetPath {path:?}: {e}"))?;
            continue;
        }
        let values: Value = serde_saphyr::from_str(&text).map_err(|e| format!("{at}: not YAML values: {e}"))?;
        match values {
            Value::Null => {}
            Value::Object(_) => merge_maps(&mut result, &values),
            other => return Err(format!("{at}: values must be a mapping, found {other}")),
        }
    }
    match &hr["spec"]["values"] {
        Value::Null => {}
        inline @ Value::Object(_) => merge_maps(&mut result, inline),
        other => return Err(format!("spec.values must be a mapping, found {other}")),
    }
    Ok(result)
}

/// `data[key]` (or `stringData[key]`) of the ConfigMap or Secret `namespace/name` in `objects`.
/// An object without a namespace matches any (Kustomizations may set it).
fn data_of(objects: &[Value], kind: &str, namespace: &str, name: &str, key: &str) -> Result<String, String> {
    if kind != "ConfigMap" && kind != "Secret" {
        return Err(format!("unsupported kind {kind:?}"));
    }
    let object = objects
        .iter()
        .find(|o| {
            o["kind"] == kind
                && o["metadata"]["name"] == name
                && o["metadata"]["namespace"].as_str().is_none_or(|ns| ns == namespace)
        })
        .ok_or_else(|| format!("osbx renders no {kind} {namespace}/{name}"))?;
    if let Some(text) = object["stringData"][key].as_str() {
        return Ok(text.to_owned());
    }
    match (kind, object["data"][key].as_str()) {
        ("Secret", Some(b64)) => {
            let bytes = base64_decode(b64).ok_or_else(|| format!("data.{key} is not base64"))?;
            String::from_utf8(bytes).map_err(|_| format!("data.{key} is not UTF-8"))
        }
        (_, Some(text)) => Ok(text.to_owned()),
        (_, None) => Err(format!("{kind} {namespace}/{name} has no key {key:?}")),
    }
}

/// Standard base64 (with or without padding); `None` when malformed.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=') {
        let v = u32::try_from(ALPHABET.iter().position(|a| *a == c)?).ok()?;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((acc >> bits) & 0xff).ok()?);
        }
    }
    Some(out)
}

/// helm-controller's `MergeMaps`: `over` wins, except that two maps merge recursively.
pub fn merge_maps(base: &mut Value, over: &Value) {
    let (Value::Object(b), Value::Object(o)) = (base, over) else { return };
    for (k, v) in o {
        match (b.get_mut(k), v) {
            (Some(bv @ Value::Object(_)), Value::Object(_)) => merge_maps(bv, v),
            _ => {
                b.insert(k.clone(), v.clone());
            }
        }
    }
}

/// `targetPath`: set a dotted path (`\.` escapes a dot) to `text`, as a string, creating maps.
fn set_path(values: &mut Value, path: &str, text: String) -> Result<(), String> {
    let mut keys = Vec::new();
    let mut current = String::new();
    let mut chars = path.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => current.extend(chars.next()),
            '.' => keys.push(std::mem::take(&mut current)),
            '[' | ']' => return Err("list indices are not supported by this test".into()),
            c => current.push(c),
        }
    }
    keys.push(current);
    let mut node = values;
    for (i, key) in keys.iter().enumerate() {
        let Value::Object(map) = node else { return Err(format!("{} is not a mapping", keys[..i].join("."))) };
        if i + 1 == keys.len() {
            map.insert(key.clone(), Value::String(text));
            return Ok(());
        }
        node = map.entry(key.clone()).or_insert_with(|| Value::Object(Map::new()));
    }
    Ok(())
}

/// One step into a values tree.
#[derive(Clone, Debug)]
pub enum Step {
    /// A map key.
    Key(String),
    /// A list index.
    Index(usize),
}

/// A scalar of the values: where it is and how the probe changes it.
#[derive(Clone, Debug)]
pub struct Leaf {
    /// The steps from the root.
    pub steps: Vec<Step>,
    /// Its value.
    pub value: Value,
    /// The probe's value (`string` + suffix, integer + 1, float + 0.5, bool flipped).
    pub probe: Value,
}

impl Leaf {
    /// `a.b[0].c`.
    pub fn path(&self) -> String {
        let mut out = String::new();
        for step in &self.steps {
            match step {
                Step::Key(k) if out.is_empty() => out.push_str(k),
                Step::Key(k) => {
                    out.push('.');
                    out.push_str(k);
                }
                Step::Index(i) => {
                    // Writing to a String cannot fail.
                    let _ = write!(out, "[{i}]");
                }
            }
        }
        out
    }

    /// The values with this leaf set to its probe.
    pub fn probed(&self, values: &Value) -> Value {
        let mut out = values.clone();
        let mut node = &mut out;
        for step in &self.steps {
            node = match step {
                Step::Key(k) => &mut node[k.as_str()],
                Step::Index(i) => &mut node[*i],
            };
        }
        *node = self.probe.clone();
        out
    }
}

/// Every scalar of `values` that a probe can change (strings, numbers, bools; not nulls or empty
/// collections), depth first in document order.
pub fn leaves(values: &Value) -> Vec<Leaf> {
    fn walk(v: &Value, steps: &mut Vec<Step>, out: &mut Vec<Leaf>) {
        let probe = match v {
            Value::Object(map) => {
                for (k, child) in map {
                    steps.push(Step::Key(k.clone()));
                    walk(child, steps, out);
                    steps.pop();
                }
                return;
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    steps.push(Step::Index(i));
                    walk(child, steps, out);
                    steps.pop();
                }
                return;
            }
            Value::Null => return,
            Value::String(s) => Value::String(format!("{s}{PROBE_SUFFIX}")),
            Value::Bool(b) => Value::Bool(!b),
            Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => Value::from(i.wrapping_add(1)),
                (None, Some(u), _) => Value::from(u.wrapping_add(1)),
                (_, _, Some(f)) => Value::from(f + 0.5),
                _ => return,
            },
        };
        out.push(Leaf { steps: steps.clone(), value: v.clone(), probe });
    }
    let mut out = Vec::new();
    walk(values, &mut Vec::new(), &mut out);
    out
}

/// A short rendering of a value for messages (long strings cut, newlines shown as `\n`).
pub fn brief(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() > 60 { format!("{}…\"", text.chars().take(57).collect::<String>()) } else { text }
}

/// The resolution itself, on references osbx does not use today (targetPath, Secrets, optional,
/// inline values), so that a profile that starts using them is resolved like helm-controller does.
#[test]
fn values_resolve_like_helm_controller() {
    use serde_json::json;
    let cm = |name: &str, key: &str, text: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns"}, "data": {key: text}});
    let objects = [
        cm("base", "values.yaml", "a: {b: 1, c: [1, 2]}\nkeep: x\n"),
        cm("over", "custom.yaml", "a: {b: 2, c: [3]}\n"),
        cm("raw", "values.yaml", "not: yaml: here"),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns"},
               "data": {"values.yaml": "czoge3Q6IHRydWV9"}}),
    ];
    let hr = |refs: Value, inline: Value| json!({"metadata": {"name": "r", "namespace": "ns"}, "spec": {"valuesFrom": refs, "values": inline}});
    let refs = json!([
        {"kind": "ConfigMap", "name": "base"},
        {"kind": "ConfigMap", "name": "over", "valuesKey": "custom.yaml"},
        {"kind": "ConfigMap", "name": "raw", "targetPath": "x.y\\.z"},
        {"kind": "Secret", "name": "s"},
        {"kind": "ConfigMap", "name": "absent", "optional": true},
    ]);
    let got = resolve(&hr(refs, json!({"keep": "inline"})), &objects).unwrap();
    assert_eq!(
        got,
        json!({"a": {"b": 2, "c": [3]}, "keep": "inline", "x": {"y.z": "not: yaml: here"}, "s": {"t": true}})
    );
    let err = resolve(&hr(json!([{"kind": "ConfigMap", "name": "absent"}]), Value::Null), &objects).unwrap_err();
    assert!(err.contains("osbx renders no ConfigMap ns/absent"), "{err}");
}
