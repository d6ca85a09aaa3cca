//! The defaults in docs/profile.md's tables are the schema's (which are the code's `Default`s):
//! every field a row names exists, every default written as a value is the schema's default,
//! `none` and `the chart's` mean no default, `*required*` means required; and every field with a
//! default is in a row (its own, or an ancestor's).

use serde_json::Value;

use crate::support::root;

/// One table row: the section's prefix, the field names in its first cell, its default cell.
struct Row {
    line: usize,
    fields: Vec<String>,
    default: String,
}

/// The rows of docs/profile.md's field tables, with each field's full path (`opensandbox.source.url`,
/// `pools.items[].name`; the document's own table has no prefix).
fn rows() -> Vec<Row> {
    let text = std::fs::read_to_string(root().join("docs/profile.md")).unwrap();
    let mut prefix: Option<String> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line == "## The document" {
            prefix = Some(String::new());
        } else if let Some(section) = line.strip_prefix("### `").and_then(|l| l.strip_suffix('`')) {
            prefix = Some(if section == "layers" { "layers[]".into() } else { section.to_owned() });
        } else if line.starts_with("## ") || line.starts_with("#### ") {
            prefix = None;
        } else if line.starts_with("A pool (`items[]`)") {
            prefix = Some("pools.items[]".into());
        } else if let Some(section) = line.strip_prefix("`verify.").and_then(|l| l.strip_suffix("`:")) {
            prefix = Some(format!("verify.{section}"));
        } else if let Some(p) = &prefix
            && line.starts_with("| `")
        {
            let cells: Vec<&str> = split_cells(line);
            let fields = cells[0]
                .split(',')
                .filter_map(|f| f.trim().strip_prefix('`')?.strip_suffix('`').map(str::to_owned))
                .map(|f| if p.is_empty() { f } else { format!("{p}.{f}") })
                .collect();
            out.push(Row { line: i + 1, fields, default: cells.get(1).copied().unwrap_or_default().trim().to_owned() });
        }
    }
    out
}

/// The cells of a table row, `\|` inside a cell kept.
fn split_cells(line: &str) -> Vec<&str> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = Vec::new();
    let mut start = 0;
    let bytes = inner.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'|' && (i == 0 || bytes[i - 1] != b'\\') {
            cells.push(&inner[start..i]);
            start = i + 1;
        }
    }
    cells.push(&inner[start..]);
    cells
}

/// The schema, and what it says of one field.
struct Schema(Value);

/// A field as the schema has it.
#[derive(Debug)]
struct Field {
    /// Its default, from the nearest ancestor (or itself) that states one; `None` when none does.
    default: Option<Value>,
    /// Whether its parent object requires it.
    required: bool,
}

impl Schema {
    fn load() -> Self {
        Self(osbx::profile::schema())
    }

    /// Follow `$ref` and a nullable `anyOf`.
    fn resolve<'a>(&'a self, mut node: &'a Value) -> &'a Value {
        loop {
            if let Some(r) = node["$ref"].as_str() {
                node = &self.0["$defs"][r.trim_start_matches("#/$defs/")];
            } else if let Some(alts) = node["anyOf"].as_array()
                && let Some(one) = alts.iter().find(|a| a["type"] != "null")
            {
                node = one;
            } else {
                return node;
            }
        }
    }

    /// The field at `path` (`a.b`, `items[].c`), if the schema has it.
    fn field(&self, path: &str) -> Option<Field> {
        let mut node = &self.0;
        let mut inherited: Option<Value> = None;
        let mut required = false;
        for part in path.split('.') {
            let (name, item) = match part.strip_suffix("[]") {
                Some(n) => (n, true),
                None => (part, false),
            };
            let object = self.resolve(node);
            let prop = object["properties"].get(name)?;
            required = object["required"].as_array().is_some_and(|r| r.iter().any(|x| x == name));
            inherited = match (prop.get("default"), inherited) {
                (Some(d), _) => Some(d.clone()),
                (None, Some(parent)) => parent.get(name).cloned(),
                (None, None) => None,
            };
            node = prop;
            if item {
                node = &self.resolve(node)["items"];
                inherited = None;
            }
        }
        Some(Field { default: inherited.filter(|d| !d.is_null()), required })
    }

    /// Every leaf field path with a default (not null, not empty), below `path`.
    fn defaulted(&self, node: &Value, path: &str, out: &mut Vec<String>) {
        let object = self.resolve(node);
        let Some(props) = object["properties"].as_object() else { return };
        for (name, prop) in props {
            let at = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
            let resolved = self.resolve(prop);
            if resolved["properties"].is_object() {
                self.defaulted(prop, &at, out);
            } else if self.field(&at).is_some_and(|f| f.default.as_ref().is_some_and(|d| d != &Value::Null)) {
                out.push(at);
            }
        }
    }
}

/// The value a default cell writes, when it is exactly one literal (`` `10m` ``, `` `{tag: v1}` ``)
/// and not a pattern (`` `platform/<name>` ``).
fn literal(cell: &str) -> Option<Value> {
    let inner = cell.strip_prefix('`')?.strip_suffix('`')?;
    if inner.contains('`') || inner.contains('<') {
        return None;
    }
    serde_saphyr::from_str(&inner.replace("\\|", "|")).ok()
}

/// The value without null members (a null is a field left unset).
fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            Value::Object(m.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), without_nulls(v))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(without_nulls).collect()),
        v => v.clone(),
    }
}

/// Whether a default sets nothing: null, or an object whose members set nothing, or an empty list.
fn sets_nothing(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.values().all(sets_nothing),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// JSON equality with numbers compared by value.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same(v, w)),
        _ => a == b,
    }
}

#[test]
fn the_defaults_in_docs_profile_md_are_the_code_s() {
    let schema = Schema::load();
    let rows = rows();
    assert!(rows.len() > 100, "the tables were not found: {} rows", rows.len());
    let mut wrong = Vec::new();
    for row in &rows {
        for field in &row.fields {
            let Some(f) = schema.field(field) else {
                wrong.push(format!("docs/profile.md:{}: `{field}` is not a field of the profile", row.line));
                continue;
            };
            let d = row.default.as_str();
            let problem = if d.starts_with("*required*") {
                (!d.contains("unless") && !f.required).then(|| "is documented as required but is not".to_owned())
            } else if d == "none" || d.starts_with("none ") || d == "the chart's" || d.starts_with("the chart's ") {
                f.default
                    .as_ref()
                    .filter(|v| !sets_nothing(v))
                    .map(|v| format!("is documented without a default but defaults to {v}"))
            } else if let Some(v) = literal(d)
                && !(v.is_string() && schema.field(v.as_str().unwrap_or_default()).is_some())
            {
                match &f.default {
                    Some(code) if same(&without_nulls(code), &without_nulls(&v)) => None,
                    Some(code) => Some(format!("is documented as {v} but defaults to {code}")),
                    // An empty list or map the code leaves out.
                    None if v == Value::Array(Vec::new()) || v == serde_json::json!({}) => None,
                    None => Some(format!("is documented as {v} but has no default")),
                }
            } else {
                None
            };
            if let Some(p) = problem {
                wrong.push(format!("docs/profile.md:{}: `{field}` {p}", row.line));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_defaulted_field_is_documented() {
    let schema = Schema::load();
    let documented: Vec<String> = rows().into_iter().flat_map(|r| r.fields).collect();
    let mut all = Vec::new();
    schema.defaulted(&schema.0, "", &mut all);
    let missing: Vec<&String> =
        all.iter().filter(|f| !documented.iter().any(|d| *f == d || f.starts_with(&format!("{d}.")))).collect();
    assert!(missing.is_empty(), "fields with a default and no row in docs/profile.md: {missing:?}");
}
