//! Tera filters that turn profile values into YAML and TOML text.
//!
//! YAML emission is serde-saphyr's (it decides quoting); these filters only place its output at
//! the right indentation. TOML values are few and simple (strings, integers, booleans), so they
//! are formatted here: a JSON string literal is also a valid TOML basic string.

use std::collections::HashMap;

use serde_json::Value;
use tera::{Error, Result, Tera};

/// Register every filter on `tera`.
pub(super) fn register(tera: &mut Tera) {
    tera.register_filter("yaml", yaml);
    tera.register_filter("scalar", scalar);
    tera.register_filter("flow", flow);
    tera.register_filter("toml", toml);
    tera.register_filter("indent_by", indent_by);
    tera.register_filter("code_list", code_list);
    tera.register_filter("merge_yaml", merge_yaml);
}

fn arg_usize(args: &HashMap<String, Value>, name: &str) -> Result<usize> {
    match args.get(name) {
        None => Ok(0),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| Error::msg(format!("argument `{name}` must be a non-negative integer"))),
    }
}

/// `{{ value | yaml(indent=N) }}`: block YAML, every line indented by N, no trailing newline.
fn yaml(value: &Value, args: &HashMap<String, Value>) -> Result<Value> {
    let indent = arg_usize(args, "indent")?;
    // Multi-line strings become literal blocks; long single-line strings are never folded.
    let options = serde_saphyr::ser_options! { compact_list_indent: false, folded_wrap_chars: usize::MAX };
    let text = serde_saphyr::to_string_with_options(value, options).map_err(|e| Error::msg(e.to_string()))?;
    Ok(Value::String(indent_text(text.trim_end_matches('\n'), indent)))
}

/// `{% filter merge_yaml(over=values) %}…{% endfilter %}`: the YAML document inside, with `over`
/// merged over it (see [`crate::merge::merge`]) and written out again; unchanged (comments kept)
/// when `over` is null.
fn merge_yaml(value: &Value, args: &HashMap<String, Value>) -> Result<Value> {
    let Value::String(text) = value else { return Err(Error::msg("`merge_yaml` needs a string")) };
    let over = args.get("over").unwrap_or(&Value::Null);
    if over.is_null() {
        return Ok(value.clone());
    }
    let mut base: Value = serde_saphyr::from_str(text).map_err(|e| Error::msg(format!("merge_yaml: {e}")))?;
    crate::merge::merge(&mut base, over);
    let yaml = yaml(&base, &HashMap::new())?;
    Ok(Value::String(format!("{}\n", yaml.as_str().unwrap_or_default())))
}

/// `{{ value | scalar }}`: one YAML scalar, quoted only when plain style would change its meaning.
fn scalar(value: &Value, _: &HashMap<String, Value>) -> Result<Value> {
    if value.is_object() || value.is_array() {
        return Err(Error::msg("`scalar` needs a string, number or boolean; use `yaml` for collections"));
    }
    let text = serde_saphyr::to_string_with_options(value, inline_options()).map_err(|e| Error::msg(e.to_string()))?;
    Ok(Value::String(text.trim_end_matches('\n').to_owned()))
}

/// `{{ list | flow }}`: a flow sequence, `[a, b]`.
fn flow(value: &Value, _: &HashMap<String, Value>) -> Result<Value> {
    let Value::Array(items) = value else { return Err(Error::msg("`flow` needs a list")) };
    let text = serde_saphyr::to_string_with_options(&serde_saphyr::FlowSeq(items), inline_options())
        .map_err(|e| Error::msg(e.to_string()))?;
    Ok(Value::String(text.trim_end_matches('\n').to_owned()))
}

/// Options for values written on the line of their key: never a block scalar.
fn inline_options() -> serde_saphyr::SerializerOptions {
    serde_saphyr::ser_options! { prefer_block_scalars: false }
}

/// `{{ value | toml }}`: a TOML string, integer, float or boolean literal.
fn toml(value: &Value, _: &HashMap<String, Value>) -> Result<Value> {
    match value {
        Value::String(_) | Value::Number(_) | Value::Bool(_) => Ok(Value::String(value.to_string())),
        _ => Err(Error::msg("`toml` needs a string, number or boolean")),
    }
}

/// `{% filter indent_by(n=4) %}…{% endfilter %}`: indent non-empty lines by n spaces.
fn indent_by(value: &Value, args: &HashMap<String, Value>) -> Result<Value> {
    let n = arg_usize(args, "n")?;
    let Value::String(s) = value else { return Err(Error::msg("`indent_by` needs a string")) };
    Ok(Value::String(indent_text(s, n)))
}

/// `{{ names | code_list }}`: "`a`", "`a` and `b`", "`a`, `b` and `c`".
fn code_list(value: &Value, _: &HashMap<String, Value>) -> Result<Value> {
    let Value::Array(items) = value else { return Err(Error::msg("`code_list` needs a list")) };
    let items: Vec<String> =
        items.iter().map(|v| format!("`{}`", v.as_str().map_or_else(|| v.to_string(), str::to_owned))).collect();
    let text = match items.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    };
    Ok(Value::String(text))
}

fn indent_text(text: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    let mut out = String::with_capacity(text.len() + n * 8);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if !line.is_empty() {
            out.push_str(&pad);
            out.push_str(line);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn no_args() -> HashMap<String, Value> {
        HashMap::new()
    }

    #[test]
    fn yaml_indents_and_quotes() {
        let args = HashMap::from([("indent".to_owned(), json!(4))]);
        let out = yaml(&json!({"limits": {"cpu": "2", "memory": "4Gi"}}), &args).unwrap();
        assert_eq!(out, json!("    limits:\n      cpu: \"2\"\n      memory: 4Gi"));
    }

    #[test]
    fn flow_and_scalar() {
        assert_eq!(flow(&json!(["/bin/sh", "-c"]), &no_args()).unwrap(), json!("[/bin/sh, -c]"));
        assert_eq!(flow(&json!(["a, b"]), &no_args()).unwrap(), json!("[\"a, b\"]"));
        assert_eq!(scalar(&json!("yes"), &no_args()).unwrap(), json!("\"yes\""));
        assert_eq!(scalar(&json!("ci-pod"), &no_args()).unwrap(), json!("ci-pod"));
    }

    #[test]
    fn toml_literals() {
        assert_eq!(toml(&json!("a\"b"), &no_args()).unwrap(), json!("\"a\\\"b\""));
        assert_eq!(toml(&json!(80), &no_args()).unwrap(), json!("80"));
        assert!(toml(&json!([1]), &no_args()).is_err());
    }

    #[test]
    fn lists_in_prose() {
        assert_eq!(code_list(&json!(["a"]), &no_args()).unwrap(), json!("`a`"));
        assert_eq!(code_list(&json!(["a", "b", "c"]), &no_args()).unwrap(), json!("`a`, `b` and `c`"));
    }
}
