//! `helm template`: a fetched chart with the values helm-controller would pass, split into the
//! objects helm-controller would install.

use std::path::Path;

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
            // The values may hold decrypted Secrets: a private file (0600, a random name made new,
            // never through a link), deleted when dropped.
            let file = values_file(&self.cache, &values.to_string()).map_err(|e| fail(e.to_string()))?;
            let mut cmd = self.helm.command();
            // Every option in its `--name=value` form, then `--`: the release name and the chart
            // directory are positionals helm never reads as options, whatever they hold.
            cmd.arg("template")
                .arg(format!("--namespace={namespace}"))
                .arg(format!("--kube-version={}", self.kube_version))
                .arg("--include-crds")
                .arg({
                    let mut arg = std::ffi::OsString::from("--values=");
                    arg.push(file.path());
                    arg
                });
            if !tests {
                cmd.arg("--skip-tests");
            }
            cmd.arg("--").arg(name).arg(dir);
            let out = cmd.output().map_err(|e| fail(e.to_string()))?;
            if !out.status.success() {
                return Err(fail(String::from_utf8_lossy(&out.stderr).trim().to_owned()));
            }
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        })
        .clone()
    }
}

/// A new private file in `dir` holding `text` (mode 0600, an unpredictable name, created with
/// `O_EXCL` so no link in its place is followed), deleted when dropped.
pub(super) fn values_file(dir: &Path, text: &str) -> std::io::Result<tempfile::NamedTempFile> {
    std::fs::create_dir_all(dir)?;
    let mut file = tempfile::Builder::new().prefix(".values-").suffix(".json").tempfile_in(dir)?;
    std::io::Write::write_all(&mut file, text.as_bytes())?;
    std::io::Write::flush(&mut file)?;
    Ok(file)
}

/// The objects of helm's output, each with whether it comes from the chart's `crds/`.
pub(super) fn parse(text: &str) -> Result<Vec<(Object, bool)>, String> {
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
    Ok(out)
}

/// The release namespace given to each namespaced object without one (a kind is namespaced
/// by the built-in table or a CRD of the chart's or of `side`).
pub(super) fn place(mut out: Vec<(Object, bool)>, namespace: &str, side: &[&Object]) -> Vec<(Object, bool)> {
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
    out
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    /// The values handed to helm can hold decrypted Secrets: a private file with a name nobody
    /// can guess, never written through a link someone placed.
    #[test]
    fn the_values_file_is_private_and_unpredictable() {
        let dir = tempfile::tempdir().unwrap();
        let a = super::values_file(dir.path(), "{\"secret\": 1}").unwrap();
        let b = super::values_file(dir.path(), "{}").unwrap();
        assert_ne!(a.path(), b.path());
        let meta = std::fs::symlink_metadata(a.path()).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{:o}", meta.permissions().mode());
        assert_eq!(std::fs::read_to_string(a.path()).unwrap(), "{\"secret\": 1}");
        let name = a.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with(".values-") && name.len() > ".values-.json".len() + 5, "{name}");
        let path = a.path().to_path_buf();
        drop(a);
        assert!(!path.exists(), "deleted when dropped");
    }
}
