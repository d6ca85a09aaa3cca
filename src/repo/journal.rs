//! Write-ahead journal of a render's file transaction, so that a render killed part-way (SIGKILL,
//! power loss) is finished by the next one.
//!
//! Before the first temporary file is written, `.osbx/journal.json` records every temporary file
//! or directory with its target and every file to delete (phase `staging`); once the temporary
//! files are on disk it is rewritten with phase `committing`, and removed when the transaction is
//! done. Both writes are synced, with their directory. The next render that finds a journal rolls
//! back a `staging` one (the tree never changed: the temporary files and directories go) and
//! completes a `committing` one (renames what is not renamed yet, deletes what is not deleted
//! yet), then says so.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{RepoError, io};

/// Where the journal of a repository lives, relative to its root.
pub(super) const PATH: &str = ".osbx/journal.json";
/// Its directory, which exists from the moment the journal is first saved.
pub(super) const DIR: &str = ".osbx";

/// The two phases of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Phase {
    /// Temporary files are being written; the tree has not changed.
    Staging,
    /// Every temporary file is written; renames and deletions are under way.
    Committing,
}

/// A transaction in progress (paths relative to the root).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Journal {
    pub phase: Phase,
    /// Temporary file → target, or temporary directory → a directory that did not exist.
    pub renames: Vec<(String, String)>,
    /// Files to delete.
    pub deletes: Vec<String>,
}

/// Remove a file or directory a transaction made (a temporary one, or a new directory renamed
/// into place), a directory with what is in it (best effort: it may be gone already).
pub(super) fn remove_made(path: &Path) {
    if fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        let _ = fs::remove_dir_all(path);
    } else {
        let _ = fs::remove_file(path);
    }
}

pub(super) fn sync_dir(dir: &Path) {
    // Makes the rename or creation of a file in `dir` durable (best effort: not every platform
    // can open a directory).
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Make what was written below `root` durable: the `files` (their data) and the entries of the
/// `dirs` (renames, creations, deletions). On Linux one `syncfs` of `root`'s file system does it
/// all with one journal commit, however many files a fleet render writes; elsewhere each file
/// and directory is synced in turn.
///
/// # Errors
/// The I/O error of the file (or file system) that could not be synced.
pub(super) fn sync_written(root: &Path, files: &[PathBuf], dirs: &[PathBuf]) -> Result<(), (PathBuf, std::io::Error)> {
    #[cfg(target_os = "linux")]
    {
        let _ = (files, dirs);
        let fd = fs::File::open(root).map_err(|e| (root.to_path_buf(), e))?;
        rustix::fs::syncfs(&fd).map_err(|e| (root.to_path_buf(), e.into()))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = root;
        for f in files {
            fs::File::open(f).and_then(|f| f.sync_all()).map_err(|e| (f.clone(), e))?;
        }
        for d in dirs {
            sync_dir(d);
        }
        Ok(())
    }
}

/// Remove the directories above `file` that are empty now, up to `root`.
pub(super) fn remove_empty_parents(root: &Path, file: &Path) {
    let mut dir = file.parent();
    while let Some(d) = dir {
        if d == root || !d.starts_with(root) || fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}

impl Journal {
    /// Write (or rewrite) the journal, durably.
    pub(super) fn save(&self, root: &Path) -> Result<(), RepoError> {
        let path = root.join(PATH);
        let dir = path.parent().unwrap_or(root);
        fs::create_dir_all(dir).map_err(io(dir))?;
        let tmp = path.with_extension("json.osbx-tmp");
        let text = serde_json::to_vec_pretty(self).unwrap_or_default();
        let mut file = fs::File::create(&tmp).map_err(io(&tmp))?;
        std::io::Write::write_all(&mut file, &text).map_err(io(&tmp))?;
        file.sync_all().map_err(io(&tmp))?;
        fs::rename(&tmp, &path).map_err(io(&path))?;
        sync_dir(dir);
        Ok(())
    }

    /// Remove the journal (the transaction is over).
    pub(super) fn finish(root: &Path) {
        let path = root.join(PATH);
        let _ = fs::remove_file(&path);
        if let Some(dir) = path.parent() {
            sync_dir(dir);
        }
    }
}

/// The backup a rename or deletion keeps of a target until the transaction is over.
pub(super) fn backup_of(target: &Path) -> PathBuf {
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    target.with_file_name(format!(".{name}.osbx-old"))
}

/// Finish what an interrupted render left (see the module doc); returns what was done, for the
/// user, or `None` when there was nothing to do.
///
/// # Errors
/// [`RepoError`] when the journal cannot be read or a step fails.
pub(super) fn recover(root: &Path) -> Result<Option<String>, RepoError> {
    let path = root.join(PATH);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path)(e)),
    };
    let journal: Journal = serde_json::from_str(&text)
        .map_err(|e| RepoError::Journal { path: path.display().to_string(), reason: e.to_string() })?;
    let said = match journal.phase {
        Phase::Staging => {
            for (tmp, _) in &journal.renames {
                remove_made(&root.join(tmp));
            }
            "an earlier render was interrupted before it changed anything: removed what it had staged"
        }
        Phase::Committing => {
            for (tmp, target) in &journal.renames {
                let (tmp, target) = (root.join(tmp), root.join(target));
                if tmp.exists() {
                    fs::rename(&tmp, &target).map_err(io(&target))?;
                }
                let _ = fs::remove_file(backup_of(&target));
            }
            for target in &journal.deletes {
                let target = root.join(target);
                match fs::remove_file(&target) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&target)(e)),
                    _ => {}
                }
                let _ = fs::remove_file(backup_of(&target));
                remove_empty_parents(root, &target);
            }
            "an earlier render was interrupted part-way: completed it"
        }
    };
    Journal::finish(root);
    Ok(Some(format!("{said} ({} file(s) written, {} deleted)", journal.renames.len(), journal.deletes.len())))
}
