//! What a Helm chart reads from its values, for `osbx lint --chart DIR`. A key is read when the
//! chart's `values.yaml` defines it, a template refers to it or to a map above it (which hands
//! over the whole subtree: `toYaml .Values.resources`, `with .Values.controller`), a
//! dependency's `condition` names it, or it belongs to a subchart (by name or alias) that reads
//! the rest of it; `global` is every chart's. Templates are read as text, so a key reached only
//! through a variable is counted as read when a reference names a map above it (no false alarm).

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Why a chart cannot be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ChartError {
    /// A file of the chart could not be read or parsed.
    #[error("{path}: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

/// A chart (with its subcharts) as far as its values go.
#[derive(Debug, Clone)]
pub(crate) struct Chart {
    /// `Chart.yaml` `name`.
    pub name: String,
    /// `Chart.yaml` `version`.
    pub version: String,
    values: Value,
    /// `.Values.a.b` references in the templates, as key paths.
    references: Vec<Vec<String>>,
    /// Dependency conditions (`a.enabled`), as key paths.
    conditions: Vec<Vec<String>>,
    /// Subcharts by the key their values live under (alias, else name); `None` when the chart
    /// names a dependency it does not carry.
    subcharts: Vec<(String, Option<Chart>)>,
}

fn read(path: &Path) -> Result<String, ChartError> {
    std::fs::read_to_string(path).map_err(|e| ChartError::Read { path: path.to_owned(), message: e.to_string() })
}

fn yaml(path: &Path) -> Result<Value, ChartError> {
    let text = read(path)?;
    serde_saphyr::from_str::<Value>(&text)
        .map(|v| if v.is_null() { Value::Object(serde_json::Map::new()) } else { v })
        .map_err(|e| ChartError::Read { path: path.to_owned(), message: e.to_string() })
}

impl Chart {
    /// Read the chart in `dir`.
    ///
    /// # Errors
    /// [`ChartError`] when `Chart.yaml`, `values.yaml` or a template cannot be read.
    pub(crate) fn load(dir: &Path) -> Result<Self, ChartError> {
        let meta = yaml(&dir.join("Chart.yaml"))?;
        let values = if dir.join("values.yaml").is_file() { yaml(&dir.join("values.yaml"))? } else { Value::Null };
        let mut references = Vec::new();
        let templates = dir.join("templates");
        if templates.is_dir() {
            for file in files(&templates) {
                references.extend(value_references(&read(&file)?));
            }
        }
        let mut conditions = Vec::new();
        let mut subcharts = Vec::new();
        for dep in meta["dependencies"].as_array().into_iter().flatten() {
            let name = dep["name"].as_str().unwrap_or_default();
            let key = dep["alias"].as_str().unwrap_or(name).to_owned();
            for c in dep["condition"].as_str().unwrap_or_default().split(',').filter(|c| !c.trim().is_empty()) {
                conditions.push(c.trim().split('.').map(str::to_owned).collect());
            }
            let dir = match dep["repository"].as_str().and_then(|r| r.strip_prefix("file://")) {
                Some(rel) => dir.join(rel),
                None => dir.join("charts").join(name),
            };
            let sub = if dir.join("Chart.yaml").is_file() { Some(Chart::load(&dir)?) } else { None };
            subcharts.push((key, sub));
        }
        Ok(Chart {
            name: meta["name"].as_str().unwrap_or_default().to_owned(),
            version: meta["version"].as_str().map_or_else(|| meta["version"].to_string(), str::to_owned),
            values,
            references,
            conditions,
            subcharts,
        })
    }

    /// Its default values (`values.yaml`).
    #[must_use]
    pub(crate) fn into_values(self) -> Value {
        self.values
    }

    /// Whether the chart reads the value at `path` (`["controller", "image", "tag"]`).
    #[must_use]
    pub(crate) fn reads(&self, path: &[String]) -> bool {
        let Some(first) = path.first() else { return true };
        if first == "global" || self.conditions.iter().any(|c| c.as_slice() == path) {
            return true;
        }
        if let Some((_, sub)) = self.subcharts.iter().find(|(key, _)| key == first) {
            // A subchart the chart does not carry cannot be checked: not a finding.
            return sub.as_ref().is_none_or(|s| s.reads(&path[1..]));
        }
        defines(&self.values, path) || self.references.iter().any(|r| path.starts_with(r))
    }
}

/// Every leaf of `values` with its key path (an empty map is a leaf).
#[must_use]
pub(crate) fn leaves(values: &Value) -> Vec<Vec<String>> {
    fn walk(values: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        match values {
            Value::Object(map) if !map.is_empty() => {
                for (k, v) in map {
                    at.push(k.clone());
                    walk(v, at, out);
                    at.pop();
                }
            }
            _ => out.push(at.clone()),
        }
    }
    let mut out = Vec::new();
    walk(values, &mut Vec::new(), &mut out);
    out.retain(|p| !p.is_empty());
    out
}

impl Chart {
    /// The key paths of `values` the chart does not read (dead configuration).
    #[must_use]
    pub(crate) fn unread(&self, values: &Value) -> Vec<Vec<String>> {
        leaves(values).into_iter().filter(|p| !self.reads(p)).collect()
    }
}

/// Whether `values` has a key at `path` (whatever its value, `null` included).
fn defines(values: &Value, path: &[String]) -> bool {
    let mut at = values;
    for key in path {
        match at.get(key) {
            Some(v) => at = v,
            None => return false,
        }
    }
    true
}

/// Every file under `dir`, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() { stack.push(p) } else { out.push(p) }
        }
    }
    out.sort();
    out
}

/// The key paths a template refers to: `.Values.a.b` (also `$.Values…`) and
/// `index .Values "a-b" "c"`.
fn value_references(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices(".Values") {
        let rest = &text[at + ".Values".len()..];
        let mut path = Vec::new();
        if let Some(dotted) = rest.strip_prefix('.') {
            let end =
                dotted.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')).unwrap_or(dotted.len());
            path.extend(dotted[..end].split('.').filter(|k| !k.is_empty()).map(str::to_owned));
        } else if text[..at].trim_end().ends_with("index") || text[..at].trim_end().ends_with("(index") {
            let mut quoted = rest.trim_start();
            while let Some(q) = quoted.strip_prefix('"') {
                let Some(end) = q.find('"') else { break };
                path.push(q[..end].to_owned());
                quoted = q[end + 1..].trim_start();
            }
        }
        out.push(path);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_in_templates() {
        let refs = value_references(
            "{{ .Values.controller.image.tag }} {{- toYaml $.Values.resources | nindent 2 }} {{ index .Values \"node-agent\" \"enabled\" }} {{ .Values }}",
        );
        let refs: Vec<String> = refs.iter().map(|r| r.join(".")).collect();
        assert_eq!(refs, ["controller.image.tag", "resources", "node-agent.enabled", ""]);
    }
}
