//! The Flux repository on disk: what would change, atomic writes, ownership and git.
//!
//! A render is staged ([`stage`]): for every file, its text on disk and the text osbx wants.
//! Staging refuses files osbx does not own (no ownership marker) unless forced, and the staged
//! files are written as one transaction ([`write`]): every new file is first written next to its target and synced, then all are
//! renamed into place; if any step fails, the renames already done are undone, so the tree is the
//! old one or the new one, never a mix.

mod git;
mod kustomization;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

pub use git::{GitError, RepoState, commit, repo_state, staged_conflicts};
pub use kustomization::MergeError;

use crate::render::{ClusterIndex, RenderError, Rendered, Renderer, is_owned};

/// Why the repository cannot be updated.
#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    /// Files at the target paths were not written by osbx.
    #[error(
        "refusing to overwrite files osbx does not own (no \"Managed by osbx\" marker):\n{}\nmove them away, or pass --force to adopt them",
        .0.iter().map(|p| format!("  {p}")).collect::<Vec<_>>().join("\n")
    )]
    Foreign(Vec<String>),
    /// A target path is a directory, or its parent is a file.
    #[error("{path}: {reason}")]
    Blocked {
        /// The path.
        path: String,
        /// Why.
        reason: String,
    },
    /// The cluster kustomization cannot be merged into.
    #[error("{path}: cannot add osbx's entries: {source}")]
    Merge {
        /// The path.
        path: String,
        /// Why.
        #[source]
        source: MergeError,
    },
    /// Rendering the new cluster kustomization failed.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// An I/O error while reading or writing.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RepoError + '_ {
    move |source| RepoError::Io { path: path.display().to_string(), source }
}

/// One staged file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// Repository-relative path.
    pub path: String,
    /// Current text, `None` when the file does not exist.
    pub old: Option<String>,
    /// Wanted text.
    pub new: String,
}

impl FileChange {
    /// Whether writing it would change the disk.
    #[must_use]
    pub fn changed(&self) -> bool {
        self.old.as_deref() != Some(self.new.as_str())
    }
}

/// Every file osbx writes for a render, compared with the disk.
#[derive(Debug, Clone)]
pub struct Staged {
    /// Repository root.
    pub root: PathBuf,
    /// All files (changed or not), in render order.
    pub files: Vec<FileChange>,
}

impl Staged {
    /// The files that differ from the disk.
    pub fn changed(&self) -> impl Iterator<Item = &FileChange> {
        self.files.iter().filter(|f| f.changed())
    }
}

/// Compare a render with the repository at `root`.
///
/// # Errors
/// [`RepoError`] when a file cannot be read, a path is blocked, the cluster kustomization cannot
/// be merged, or (unless `force`) a target file is not owned by osbx.
pub fn stage(root: &Path, rendered: &Rendered, renderer: &Renderer, force: bool) -> Result<Staged, RepoError> {
    let mut files = Vec::new();
    let mut foreign = Vec::new();
    for f in &rendered.files {
        let old = read_existing(root, &f.path)?;
        if let Some(old) = &old
            && !is_owned(old)
            && !force
        {
            foreign.push(f.path.clone());
        }
        files.push(FileChange { path: f.path.clone(), old, new: f.content.clone() });
    }
    if !foreign.is_empty() {
        return Err(RepoError::Foreign(foreign));
    }
    for index in &rendered.clusters {
        files.push(cluster_index(root, index, renderer)?);
    }
    Ok(Staged { root: root.to_path_buf(), files })
}

/// The cluster kustomization: created when missing, else osbx's entries merged in.
fn cluster_index(root: &Path, index: &ClusterIndex, renderer: &Renderer) -> Result<FileChange, RepoError> {
    let path = &index.path;
    let old = read_existing(root, path)?;
    let new = if let Some(text) = &old {
        kustomization::merge(text, &index.entries).map_err(|source| RepoError::Merge { path: path.clone(), source })?
    } else {
        let mut resources = Vec::new();
        let dir = Path::new(path).parent().unwrap_or(Path::new(""));
        if root.join(dir).join("flux-system").is_dir() {
            resources.push("flux-system".to_owned());
        }
        resources.extend(index.entries.iter().cloned());
        renderer.cluster_kustomization(&resources)?
    };
    Ok(FileChange { path: path.clone(), old, new })
}

fn read_existing(root: &Path, rel: &str) -> Result<Option<String>, RepoError> {
    let path = root.join(rel);
    match fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            Err(RepoError::Blocked { path: rel.to_owned(), reason: "a parent of this path is a file".into() })
        }
        Err(e) => Err(io(&path)(e)),
        Ok(m) if m.is_dir() => Err(RepoError::Blocked {
            path: rel.to_owned(),
            reason: "is a directory, osbx needs to write a file here".into(),
        }),
        Ok(_) => fs::read_to_string(&path).map(Some).map_err(io(&path)),
    }
}

/// Test-only fault injection: `OSBX_FAILPOINT=rename:N` fails the N-th rename (1-based) of a
/// write, to prove that a failure part-way leaves the previous tree in place.
fn failpoint(renamed: usize) -> std::io::Result<()> {
    let hit = std::env::var("OSBX_FAILPOINT")
        .ok()
        .and_then(|v| v.strip_prefix("rename:").and_then(|n| n.parse::<usize>().ok()))
        .is_some_and(|n| n == renamed + 1);
    if hit { Err(std::io::Error::other("injected failure (OSBX_FAILPOINT)")) } else { Ok(()) }
}

/// Write every changed file as one transaction; returns the paths written.
///
/// # Errors
/// [`RepoError::Io`] naming the file that failed; the tree on disk is then unchanged.
pub fn write(staged: &Staged) -> Result<Vec<String>, RepoError> {
    let changed: Vec<&FileChange> = staged.changed().collect();
    let mut created_dirs = Vec::new();
    let mut temps: Vec<(PathBuf, PathBuf)> = Vec::new();
    let result =
        write_temps(&staged.root, &changed, &mut created_dirs, &mut temps).and_then(|()| commit_renames(&temps));
    for (tmp, _) in &temps {
        let _ = fs::remove_file(tmp);
    }
    if let Err(e) = result {
        for dir in created_dirs.iter().rev() {
            let _ = fs::remove_dir(dir);
        }
        return Err(e);
    }
    Ok(changed.iter().map(|f| f.path.clone()).collect())
}

/// Write each file next to its target (synced), recording the directories it had to create and
/// each temporary file with its target.
fn write_temps(
    root: &Path,
    changed: &[&FileChange],
    created_dirs: &mut Vec<PathBuf>,
    temps: &mut Vec<(PathBuf, PathBuf)>,
) -> Result<(), RepoError> {
    for f in changed {
        let target = root.join(&f.path);
        let parent = target.parent().unwrap_or(root).to_path_buf();
        create_dirs(&parent, created_dirs)?;
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = parent.join(format!(".{name}.osbx-tmp"));
        let mut file = fs::File::create(&tmp).map_err(io(&tmp))?;
        temps.push((tmp.clone(), target));
        file.write_all(f.new.as_bytes()).map_err(io(&tmp))?;
        file.sync_all().map_err(io(&tmp))?;
    }
    Ok(())
}

fn create_dirs(dir: &Path, created: &mut Vec<PathBuf>) -> Result<(), RepoError> {
    // A relative `--out` ends in the empty path, which is the current directory.
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs(parent, created)?;
    }
    fs::create_dir(dir).map_err(io(dir))?;
    created.push(dir.to_path_buf());
    Ok(())
}

/// Rename staged files into place; on failure, put back what was there before.
fn commit_renames(staged: &[(PathBuf, PathBuf)]) -> Result<(), RepoError> {
    let mut done: Vec<(&Path, Option<PathBuf>)> = Vec::new();
    for (i, (tmp, target)) in staged.iter().enumerate() {
        let backup = target.with_file_name(format!(
            ".{}.osbx-old",
            target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
        ));
        let step = || -> Result<Option<PathBuf>, RepoError> {
            failpoint(i).map_err(io(target))?;
            let had_old = target.exists();
            if had_old {
                let _ = fs::remove_file(&backup);
                fs::hard_link(target, &backup).map_err(io(target))?;
            }
            fs::rename(tmp, target).map_err(io(target))?;
            Ok(had_old.then(|| backup.clone()))
        };
        match step() {
            Ok(backup) => done.push((target, backup)),
            Err(e) => {
                let _ = fs::remove_file(&backup);
                for (target, backup) in done.into_iter().rev() {
                    match backup {
                        Some(b) => {
                            let _ = fs::rename(&b, target);
                        }
                        None => {
                            let _ = fs::remove_file(target);
                        }
                    }
                }
                return Err(e);
            }
        }
    }
    for (_, backup) in done {
        if let Some(b) = backup {
            let _ = fs::remove_file(b);
        }
    }
    Ok(())
}
