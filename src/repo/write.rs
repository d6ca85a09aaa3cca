//! Writing a staged render as one transaction (temporary files, renames and deletions, undone
//! on failure and journaled against a kill), under a lock that makes renders into one
//! repository take turns.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::journal::{self, Journal, Phase, backup_of, remove_empty_parents};
use super::{FileChange, RepoError, Staged, io};
use crate::progress::Progress;

/// An exclusive hold on a repository for one render (an advisory lock on its directory), so that
/// two renders into one repository take turns instead of mixing their trees. Released when
/// dropped, or when the process dies; the directories [`lock`] created go again if they are still
/// empty then (a render that failed leaves nothing behind).
#[derive(Debug)]
pub(crate) struct RepoLock {
    _dir: fs::File,
    created: Vec<PathBuf>,
}

impl Drop for RepoLock {
    fn drop(&mut self) {
        for dir in self.created.iter().rev() {
            let _ = fs::remove_dir(dir);
        }
    }
}

/// Take the repository at `root` for one render (creating its directory when missing), waiting
/// for another render that holds it.
///
/// # Errors
/// [`RepoError::Io`] when the directory cannot be created, opened or locked.
pub(crate) fn lock(root: &Path) -> Result<RepoLock, RepoError> {
    let mut created = Vec::new();
    create_dirs(root, &mut created)?;
    let root = if root.as_os_str().is_empty() { Path::new(".") } else { root };
    let file = fs::File::open(root).map_err(io(root))?;
    file.lock().map_err(io(root))?;
    Ok(RepoLock { _dir: file, created })
}

/// Test-only fault injection, at the N-th step (1-based) of a write's renames and deletions:
/// `OSBX_FAILPOINT=rename:N` fails it (the write must undo what it did), `OSBX_FAILPOINT=kill:N`
/// has the process SIGKILLed before it (the next render must finish the write).
fn failpoint(step: usize) -> std::io::Result<()> {
    let point = std::env::var("OSBX_FAILPOINT").unwrap_or_default();
    let at = |prefix: &str| point.strip_prefix(prefix).and_then(|n| n.parse::<usize>().ok()) == Some(step + 1);
    if at("kill:") {
        let _ = std::process::Command::new("kill").args(["-KILL", &std::process::id().to_string()]).status();
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
    if at("rename:") { Err(std::io::Error::other("injected failure (OSBX_FAILPOINT)")) } else { Ok(()) }
}

/// Write every changed file as one transaction, counting the files on `progress`; returns the
/// paths written or deleted.
///
/// # Errors
/// [`RepoError::Io`] naming the file that failed; the tree on disk is then unchanged.
pub(crate) fn write(staged: &Staged, progress: &dyn Progress) -> Result<Vec<String>, RepoError> {
    let root = &staged.root;
    let changed: Vec<&FileChange> = staged.changed().collect();
    if changed.is_empty() {
        return Ok(Vec::new());
    }
    let mut journal =
        Journal { phase: Phase::Staging, renames: Vec::new(), deletes: Vec::new(), created_dirs: Vec::new() };
    for f in &changed {
        match &f.new {
            Some(_) => journal.renames.push((temp_of(&f.path), f.path.clone())),
            None => journal.deletes.push(f.path.clone()),
        }
    }
    let mut created_dirs = Vec::new();
    let result = journal
        .save(root)
        .and_then(|()| write_temps(root, &changed, &mut created_dirs, progress))
        .and_then(|()| {
            journal.created_dirs = created_dirs.iter().map(|d| rel(root, d)).collect();
            journal.phase = Phase::Committing;
            journal.save(root)
        })
        .and_then(|()| commit_steps(root, &journal));
    if let Err(e) = result {
        for (tmp, _) in &journal.renames {
            let _ = fs::remove_file(root.join(tmp));
        }
        for dir in created_dirs.iter().rev() {
            let _ = fs::remove_dir(dir);
        }
        Journal::finish(root);
        return Err(e);
    }
    // The renames and deletions are durable before the journal that would redo them goes.
    let dirs: BTreeSet<PathBuf> = changed
        .iter()
        .filter_map(|f| root.join(&f.path).parent().map(Path::to_path_buf))
        .filter(|d| d.is_dir())
        .collect();
    let dirs: Vec<PathBuf> = dirs.into_iter().collect();
    // Best effort: the tree is the new one already.
    let _ = journal::sync_written(root, &[], &dirs);
    Journal::finish(root);
    Ok(changed.iter().map(|f| f.path.clone()).collect())
}

/// The temporary file of a target, next to it.
fn temp_of(path: &str) -> String {
    let p = Path::new(path);
    let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    p.with_file_name(format!(".{name}.osbx-tmp")).to_string_lossy().replace('\\', "/")
}

fn rel(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).to_string_lossy().replace('\\', "/")
}

/// Write each new text next to its target, recording the directories it had to create; then
/// make them all durable at once.
fn write_temps(
    root: &Path,
    changed: &[&FileChange],
    created_dirs: &mut Vec<PathBuf>,
    progress: &dyn Progress,
) -> Result<(), RepoError> {
    progress.count("writing files", 0, changed.len());
    let mut temps = Vec::new();
    for (i, f) in changed.iter().enumerate() {
        progress.count("writing files", i, changed.len());
        let Some(new) = &f.new else { continue };
        let target = root.join(&f.path);
        create_dirs(target.parent().unwrap_or(root), created_dirs)?;
        let tmp = root.join(temp_of(&f.path));
        let mut file = fs::File::create(&tmp).map_err(io(&tmp))?;
        file.write_all(new.as_bytes()).map_err(io(&tmp))?;
        temps.push(tmp);
    }
    journal::sync_written(root, &temps, created_dirs).map_err(|(path, e)| io(&path)(e))?;
    progress.count("writing files", changed.len(), changed.len());
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
    match fs::create_dir(dir) {
        // Another render created it meanwhile.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(io(dir)(e)),
        Ok(()) => {
            created.push(dir.to_path_buf());
            Ok(())
        }
    }
}

/// Rename the temporary files into place and delete the stale files, keeping a backup of each
/// target; on failure, put back what was there before. Directories emptied by deletions go.
fn commit_steps(root: &Path, journal: &Journal) -> Result<(), RepoError> {
    let mut done: Vec<(PathBuf, Option<PathBuf>)> = Vec::new();
    let steps = journal
        .renames
        .iter()
        .map(|(tmp, target)| (Some(tmp), target))
        .chain(journal.deletes.iter().map(|t| (None, t)));
    for (i, (tmp, target)) in steps.enumerate() {
        let target = root.join(target);
        let backup = backup_of(&target);
        let step = || -> Result<Option<PathBuf>, RepoError> {
            failpoint(i).map_err(io(&target))?;
            let had_old = target.exists();
            if had_old {
                let _ = fs::remove_file(&backup);
                fs::hard_link(&target, &backup).map_err(io(&target))?;
            }
            match tmp {
                Some(tmp) => fs::rename(root.join(tmp), &target).map_err(io(&target))?,
                None => fs::remove_file(&target).map_err(io(&target))?,
            }
            Ok(had_old.then(|| backup.clone()))
        };
        match step() {
            Ok(backup) => done.push((target, backup)),
            Err(e) => {
                let _ = fs::remove_file(&backup);
                for (target, backup) in done.into_iter().rev() {
                    match backup {
                        Some(b) => {
                            let _ = fs::rename(&b, &target);
                        }
                        None => {
                            let _ = fs::remove_file(&target);
                        }
                    }
                }
                return Err(e);
            }
        }
    }
    for (_, backup) in &done {
        if let Some(b) = backup {
            let _ = fs::remove_file(b);
        }
    }
    for target in &journal.deletes {
        remove_empty_parents(root, &root.join(target));
    }
    Ok(())
}
