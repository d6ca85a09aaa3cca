//! Deep merge of YAML/JSON trees, shared by fleet overrides and extra chart values: mappings
//! merge key by key, lists of named objects merge by `name`, anything else is replaced, and a
//! null changes nothing.

use serde_json::Value;

/// Merge `over` into `base`: objects key by key, lists of objects that all have a `name` by
/// name (unmatched ones appended), anything else replaced; a null override changes nothing.
pub(crate) fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (_, Value::Null) => {}
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (Value::Array(b), Value::Array(o)) if named(b) && named(o) => {
            for item in o {
                match b.iter_mut().find(|x| x["name"] == item["name"]) {
                    Some(existing) => merge(existing, item),
                    None => b.push(item.clone()),
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

fn named(items: &[Value]) -> bool {
    !items.is_empty() && items.iter().all(|i| i["name"].is_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merges_maps_and_named_lists() {
        let mut base = json!({"a": {"b": 1, "c": 2}, "pools": [{"name": "pod", "cap": {"max": 4, "min": 0}}, {"name": "vm", "cap": {"max": 2}}], "l": [1, 2]});
        merge(
            &mut base,
            &json!({"a": {"c": 3}, "pools": [{"name": "vm", "cap": {"max": 8}}, {"name": "gpu"}], "l": [9]}),
        );
        assert_eq!(
            base,
            json!({"a": {"b": 1, "c": 3}, "pools": [{"name": "pod", "cap": {"max": 4, "min": 0}}, {"name": "vm", "cap": {"max": 8}}, {"name": "gpu"}], "l": [9]})
        );
    }
}
