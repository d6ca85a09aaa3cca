//! `helm template`: a fetched chart with the values helm-controller would pass, split into the
//! objects helm-controller would install.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{ChartError, Charts};
use crate::object::Object;
use crate::review::flux;

impl Charts {
    /// `helm template`, once per chart, release, namespace and values.
    pub(super) fn template(
        &self,
        release: &str,
        dir: &Path,
        name: &str,
        namespace: &str,
        values: &Value,
        tests: bool,
    ) -> Result<String, ChartError> {
        let key = format!("{}\n{name}\n{namespace}\n{tests}\n{values}", dir.display());
        let cell =
            self.templated.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(key).or_default().clone();
        cell.get_or_init(|| {
            let fail = |message: String| ChartError::Helm {
                release: release.to_owned(),
                step: "template".into(),
                chart: dir.display().to_string(),
                message,
            };
            let file = tempfile_in(&self.cache, &values.to_string()).map_err(|e| fail(e.to_string()))?;
            let mut cmd = self.helm.command();
            cmd.arg("template")
                .arg(name)
                .arg(dir)
                .args(["--namespace", namespace, "--kube-version", &self.kube_version, "--include-crds"])
                .arg("--values")
                .arg(file.path());
            if !tests {
                cmd.arg("--skip-tests");
            }
            let out = cmd.output().map_err(|e| fail(e.to_string()))?;
            if !out.status.success() {
                return Err(fail(String::from_utf8_lossy(&out.stderr).trim().to_owned()));
            }
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        })
        .clone()
    }
}

/// A file holding `text`, deleted when dropped.
pub(super) fn tempfile_in(dir: &Path, text: &str) -> std::io::Result<TempFile> {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    std::fs::create_dir_all(dir)?;
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!(".values-{}-{n}.json", std::process::id()));
    std::fs::write(&path, text)?;
    Ok(TempFile(path))
}

pub(super) struct TempFile(PathBuf);

impl TempFile {
    pub(super) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// helm's output as objects: each document's `# Source:` says whether it comes from `crds/`;
/// namespaced objects without a namespace land in the release's, as helm installs them.
pub(super) fn split(text: &str, namespace: &str, side: &[&Object]) -> Result<Vec<(Object, bool)>, String> {
    let mut out = Vec::new();
    for doc in text.split("\n---") {
        let from_crds = doc
            .lines()
            .find_map(|l| l.strip_prefix("# Source: "))
            .is_some_and(|s| s.contains("/crds/") && !s.contains("/templates/"));
        for o in flux::objects(doc)? {
            out.push((o, from_crds));
        }
    }
    let crds: Vec<Value> = out
        .iter()
        .map(|(o, _)| &o.value)
        .chain(side.iter().map(|o| &o.value))
        .filter(|v| v["kind"] == "CustomResourceDefinition")
        .cloned()
        .collect();
    let crds: Vec<&Value> = crds.iter().collect();
    for (o, _) in &mut out {
        if o.id.namespace.is_none() && flux::namespaced(&o.value, &crds) {
            o.value["metadata"]["namespace"] = Value::String(namespace.to_owned());
            o.id.namespace = Some(namespace.to_owned());
        }
    }
    Ok(out)
}
