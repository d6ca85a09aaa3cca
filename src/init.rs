//! `osbx init`: a commented starter profile (or fleet file with its base profile) from the
//! embedded starters, with the `yaml-language-server` modeline and the JSON Schema it points at
//! beside it, so editors validate and complete as people type.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::embedded;

/// Which container runtimes the starter's pools use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runtimes {
    /// One runc pool.
    Runc,
    /// One Kata pool (and the kata layer).
    Kata,
    /// One pool of each (and the kata layer).
    Both,
}

/// What to start from.
#[derive(Debug, Clone)]
pub(crate) struct Starter {
    /// The cluster's name (and the profile's).
    pub cluster: String,
    /// The pools' runtimes.
    pub runtimes: Runtimes,
    /// With SPIRE agents and the smoke identity.
    pub spire: bool,
}

/// Why nothing was written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InitError {
    /// A file is in the way.
    #[error("{} exists; pass --force to overwrite it", .0.display())]
    Exists(PathBuf),
    /// A starter template failed (a bug).
    #[error("starter {name}: {message}")]
    Template {
        /// The starter.
        name: String,
        /// Tera's message.
        message: String,
    },
    /// Writing failed.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// A file `init` writes, and whether it is a generated schema (refreshed whenever it is osbx's).
#[derive(Debug, Clone)]
pub(crate) struct File {
    /// Where.
    pub path: PathBuf,
    /// What.
    pub content: String,
    /// A JSON Schema osbx generates (not the user's starter).
    pub schema: bool,
}

fn starter(name: &str, context: &Value) -> Result<String, InitError> {
    let text = embedded::starters().iter().find(|(n, _)| *n == name).map_or("", |(_, t)| *t);
    let ctx = tera::Context::from_value(context.clone())
        .map_err(|e| InitError::Template { name: name.into(), message: e.to_string() })?;
    tera::Tera::one_off(text, &ctx, false)
        .map_err(|e| InitError::Template { name: name.into(), message: e.to_string() })
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

fn schema_file(dir: &Path, name: &str, schema: &Value) -> File {
    let content = serde_json::to_string_pretty(schema).unwrap_or_default() + "\n";
    File { path: dir.join(name), content, schema: true }
}

/// The files of a starter profile at `path` (and its schema).
///
/// # Errors
/// [`InitError::Template`] when a starter fails to render.
pub(crate) fn profile(path: &Path, s: &Starter) -> Result<Vec<File>, InitError> {
    let runc = s.runtimes != Runtimes::Kata;
    let kata = s.runtimes != Runtimes::Runc;
    let deps: Vec<&str> = [kata.then_some("kata"), s.spire.then_some("spire-agents")].into_iter().flatten().collect();
    let context = json!({"file": file_name(path), "cluster": s.cluster, "runc": runc, "kata": kata, "spire": s.spire,
                         "deps": deps.join(", ")});
    let dir = path.parent().unwrap_or(Path::new(""));
    Ok(vec![
        File { path: path.to_owned(), content: starter("profile.yaml", &context)?, schema: false },
        schema_file(dir, "profile.schema.json", &crate::profile::schema()),
    ])
}

/// The files of a starter fleet at `path`: the fleet, its base profile `base.yaml` beside it,
/// and their schemas.
///
/// # Errors
/// [`InitError::Template`] when a starter fails to render.
pub(crate) fn fleet(path: &Path, s: &Starter) -> Result<Vec<File>, InitError> {
    let dir = path.parent().unwrap_or(Path::new(""));
    let mut files = profile(&dir.join("base.yaml"), s)?;
    let pool = if s.runtimes == Runtimes::Kata { "vm" } else { "pod" };
    let context = json!({"file": file_name(path), "cluster": s.cluster, "base": "base.yaml", "pool": pool});
    files.insert(0, File { path: path.to_owned(), content: starter("fleet.yaml", &context)?, schema: false });
    files.push(schema_file(dir, "fleet.schema.json", &crate::fleet::schema()));
    Ok(files)
}

/// Write the files, refusing (before writing anything) to overwrite an existing file unless
/// `force`; a schema osbx wrote before is refreshed without asking.
///
/// # Errors
/// [`InitError::Exists`] for the first file in the way, [`InitError::Io`] when writing fails.
pub(crate) fn write(files: &[File], force: bool) -> Result<(), InitError> {
    for f in files {
        let ours = f.schema && std::fs::read_to_string(&f.path).is_ok_and(|t| t.contains("\"title\": \"osbx "));
        if f.path.exists() && !force && !ours {
            return Err(InitError::Exists(f.path.clone()));
        }
    }
    for f in files {
        let io = |source| InitError::Io { path: f.path.clone(), source };
        if let Some(dir) = f.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let tmp = f.path.with_file_name(format!(".{}.osbx-tmp", file_name(&f.path)));
        std::fs::write(&tmp, &f.content).map_err(io)?;
        std::fs::rename(&tmp, &f.path).map_err(io)?;
    }
    Ok(())
}
