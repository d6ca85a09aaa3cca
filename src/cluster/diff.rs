//! Comparing a live object with what a server-side apply would make of it (pure).
//!
//! Server-owned noise is removed from both sides first (managed fields, status, resource
//! version, uid, generation, timestamps, annotations the server or kubectl add), and Secret values
//! are masked with Flux's strings before anything is compared or shown: equal values become
//! `***`, changed ones `*** (before)` / `*** (after)`.

use serde_json::{Map, Value};

use crate::changeset::{Action, Change};
use crate::object::ObjectRef;

const NOISY_METADATA: &[&str] = &[
    "managedFields",
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "selfLink",
    "deletionGracePeriodSeconds",
];
/// Annotations that say nothing about the object's meaning: kubectl's and the Deployment
/// controller's, and osbx's own hash of what it applied last (stale when Flux applied the same
/// change from git before osbx compares).
const NOISY_ANNOTATIONS: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    "deployment.kubernetes.io/revision",
    crate::mark::APPLIED_HASH,
];

/// The object without server-owned fields.
#[must_use]
pub(crate) fn normalize(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(map) = v.as_object_mut() {
        map.remove("status");
    }
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in NOISY_METADATA {
            meta.remove(*k);
        }
        for key in ["annotations", "labels"] {
            if let Some(m) = meta.get_mut(key).and_then(Value::as_object_mut) {
                for k in NOISY_ANNOTATIONS {
                    m.remove(*k);
                }
                if m.is_empty() {
                    meta.remove(key);
                }
            }
        }
    }
    v
}

fn is_secret(obj: &Value) -> bool {
    obj["apiVersion"] == "v1" && obj["kind"] == "Secret"
}

/// Mask the values of a v1 Secret on both sides (either may be absent).
pub(crate) fn mask_secrets(live: Option<&mut Value>, merged: Option<&mut Value>) {
    let secret = live.as_deref().is_some_and(is_secret) || merged.as_deref().is_some_and(is_secret);
    if !secret {
        return;
    }
    let (mut live, mut merged) = (live, merged);
    for field in ["data", "stringData"] {
        let before = live.as_deref().and_then(|v| v.get(field)).and_then(Value::as_object).cloned().unwrap_or_default();
        let after =
            merged.as_deref().and_then(|v| v.get(field)).and_then(Value::as_object).cloned().unwrap_or_default();
        let mask = |own: &Map<String, Value>, other: &Map<String, Value>, suffix: &str| -> Map<String, Value> {
            own.iter()
                .map(|(k, v)| {
                    let text = match other.get(k) {
                        Some(o) if o != v => format!("*** ({suffix})"),
                        _ => "***".to_owned(),
                    };
                    (k.clone(), Value::String(text))
                })
                .collect()
        };
        if let Some(l) = live.as_deref_mut().and_then(Value::as_object_mut)
            && l.contains_key(field)
        {
            l.insert(field.to_owned(), Value::Object(mask(&before, &after, "before")));
        }
        if let Some(m) = merged.as_deref_mut().and_then(Value::as_object_mut)
            && m.contains_key(field)
        {
            m.insert(field.to_owned(), Value::Object(mask(&after, &before, "after")));
        }
    }
}

/// Whether the normalised objects differ (Flux's drift rule: labels, annotations and everything
/// outside `metadata`/`status`).
#[must_use]
pub(crate) fn drifted(live: &Value, merged: &Value) -> bool {
    normalize(live) != normalize(merged)
}

/// YAML text of an object for display.
#[must_use]
pub(crate) fn to_yaml(obj: &Value) -> String {
    let options = serde_saphyr::ser_options! { compact_list_indent: false, folded_wrap_chars: usize::MAX };
    serde_saphyr::to_string_with_options(obj, options).unwrap_or_else(|e| format!("# cannot show: {e}\n"))
}

/// Unified diff of the normalised, masked objects (`live` absent = created).
#[must_use]
pub(crate) fn unified(subject: &str, live: Option<&Value>, merged: &Value) -> String {
    let mut live = live.map(normalize);
    let mut merged = normalize(merged);
    mask_secrets(live.as_mut(), Some(&mut merged));
    let old = live.as_ref().map(to_yaml).unwrap_or_default();
    let new = to_yaml(&merged);
    similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("live/{subject}"), &format!("merged/{subject}"))
        .to_string()
}

/// One object in two renders (pure): created (`before` absent), deleted (`after` absent),
/// configured or unchanged, with a unified diff `before/<id>` → `after/<id>` of the normalised
/// objects, Secret values masked (a created or deleted object is shown whole).
#[must_use]
pub(crate) fn between(id: &ObjectRef, before: Option<&Value>, after: Option<&Value>) -> Change {
    let mut old = before.map(normalize);
    let mut new = after.map(normalize);
    let action = match (&old, &new) {
        (None, _) => Action::Created,
        (Some(_), None) => Action::Deleted,
        (Some(o), Some(n)) if o == n => return Change::new(id.clone(), Action::Unchanged),
        (Some(_), Some(_)) => Action::Configured,
    };
    mask_secrets(old.as_mut(), new.as_mut());
    let text = |v: &Option<Value>| v.as_ref().map(to_yaml).unwrap_or_default();
    let diff = similar::TextDiff::from_lines(text(&old).as_str(), text(&new).as_str())
        .unified_diff()
        .context_radius(3)
        .header(&format!("before/{id}"), &format!("after/{id}"))
        .to_string();
    Change { id: id.clone(), action, reason: None, diff: Some(diff) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn noise_is_ignored() {
        let rendered = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}});
        let mut live = rendered.clone();
        live["metadata"]["uid"] = json!("123");
        live["metadata"]["resourceVersion"] = json!("9");
        live["metadata"]["managedFields"] = json!([{"manager": "osbx"}]);
        live["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/last-applied-configuration": "{}"});
        live["status"] = json!({"x": 1});
        assert!(!drifted(&live, &rendered));
        live["data"]["k"] = json!("w");
        assert!(drifted(&live, &rendered));
        live["data"]["k"] = json!("v");
        live["metadata"]["labels"] = json!({"team": "x"});
        assert!(drifted(&live, &rendered), "labels count");
    }

    #[test]
    fn secrets_are_masked_with_before_and_after() {
        let live = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                          "data": {"same": "c2FtZQ==", "changed": "b2xk", "gone": "eA=="}});
        let merged = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                            "data": {"same": "c2FtZQ==", "changed": "bmV3", "new": "eQ=="}});
        let text = unified("Secret/ns/s", Some(&live), &merged);
        assert!(text.contains("-  changed: '*** (before)'") || text.contains("-  changed: \"*** (before)\""), "{text}");
        assert!(text.contains("+  changed: '*** (after)'") || text.contains("+  changed: \"*** (after)\""), "{text}");
        assert!(
            text.contains("same:") && !text.contains("c2FtZQ") && !text.contains("b2xk") && !text.contains("bmV3"),
            "{text}"
        );
        assert!(!text.contains("eA==") && !text.contains("eQ=="), "{text}");
    }
}
