//! Writing a staged render as one transaction (temporary files, renames and deletions, undone
//! on failure and journaled against a kill), under a lock that makes renders into one
//! repository take turns.

use std::collections::{BTreeSet, HashMap, HashSet};
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
/// A text whose directory exists is written next to its target and renamed over it. Texts whose
/// directory does not exist yet are written straight into a temporary copy of the highest
/// directory that is missing (`clusters/.c-7.osbx-tmp/…`), renamed into place whole: a new
/// cluster, layer or `--out` tree costs one rename instead of one per file, and no directory
/// appears before the commit (a fleet render of 10,000 clusters into an empty directory is one
/// rename, not 30,000).
///
/// # Errors
/// [`RepoError::Io`] naming the file that failed; the tree on disk is then unchanged.
pub(crate) fn write(staged: &Staged, progress: &dyn Progress) -> Result<Vec<String>, RepoError> {
    let root = &staged.root;
    let changed: Vec<&FileChange> = staged.changed().collect();
    if changed.is_empty() {
        return Ok(Vec::new());
    }
    let places = Places::of(root, &changed);
    let journal = Journal {
        phase: Phase::Staging,
        renames: places.renames.clone(),
        deletes: changed.iter().filter(|f| f.new.is_none()).map(|f| f.path.clone()).collect(),
    };
    let result = journal
        .save(root)
        .and_then(|()| write_temps(root, &places, progress))
        .and_then(|()| Journal { phase: Phase::Committing, ..journal.clone() }.save(root))
        .and_then(|()| commit_steps(root, &journal));
    if let Err(e) = result {
        for (tmp, _) in &journal.renames {
            journal::remove_made(&root.join(tmp));
        }
        Journal::finish(root);
        return Err(e);
    }
    // The renames and deletions are durable before the journal that would redo them goes.
    let dirs: BTreeSet<PathBuf> = (journal.renames.iter().map(|(_, target)| target))
        .chain(&journal.deletes)
        .filter_map(|path| root.join(path).parent().map(Path::to_path_buf))
        .collect();
    let dirs: Vec<PathBuf> = dirs.into_iter().filter(|d| d.is_dir()).collect();
    // Best effort: the tree is the new one already.
    let _ = journal::sync_written(root, &[], &dirs);
    Journal::finish(root);
    Ok(changed.iter().map(|f| f.path.clone()).collect())
}

/// The temporary file or directory of a target, next to it.
fn temp_of(path: &str) -> String {
    let p = Path::new(path);
    let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    p.with_file_name(format!(".{name}.osbx-tmp")).to_string_lossy().replace('\\', "/")
}

/// Where a transaction stages each new text, and what it renames at its commit.
struct Places<'a> {
    /// Temporary file or directory → target, relative to the root, in the order first needed.
    renames: Vec<(String, String)>,
    /// Each new text and the path it is written to first (relative to the root).
    texts: Vec<(String, &'a str)>,
}

impl<'a> Places<'a> {
    /// Each new text goes next to its target when the target's directory exists, else into the
    /// temporary copy of the highest directory on its path that does not exist (every directory
    /// looked up once).
    fn of(root: &Path, changed: &[&'a FileChange]) -> Self {
        // Saving the journal makes its directory before anything is staged.
        let mut exists: HashMap<String, bool> = HashMap::from([(journal::DIR.to_owned(), true)]);
        let mut renames: Vec<(String, String)> = Vec::new();
        let mut new_dirs: HashSet<String> = HashSet::new();
        let mut texts = Vec::new();
        for f in changed {
            let Some(new) = &f.new else { continue };
            let missing = ancestors(&f.path)
                .find(|dir| !*exists.entry((*dir).to_owned()).or_insert_with(|| root.join(dir).is_dir()));
            match missing {
                None => {
                    let tmp = temp_of(&f.path);
                    texts.push((tmp.clone(), new.as_str()));
                    renames.push((tmp, f.path.clone()));
                }
                Some(dir) => {
                    let tmp = temp_of(dir);
                    texts.push((format!("{tmp}{}", &f.path[dir.len()..]), new.as_str()));
                    if new_dirs.insert(dir.to_owned()) {
                        renames.push((tmp, dir.to_owned()));
                    }
                }
            }
        }
        Places { renames, texts }
    }
}

/// The directories on a relative path, from the top: `a`, `a/b` for `a/b/c.yaml`.
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/').map(move |(i, _)| &path[..i])
}

/// Write each new text where [`Places`] stages it, creating the directories inside temporary
/// directories as needed; then make them all durable at once.
fn write_temps(root: &Path, places: &Places<'_>, progress: &dyn Progress) -> Result<(), RepoError> {
    let total = places.texts.len();
    progress.count("writing files", 0, total);
    let mut made: HashSet<String> = HashSet::new();
    let mut files = Vec::with_capacity(total);
    for (i, (path, text)) in places.texts.iter().enumerate() {
        progress.count("writing files", i, total);
        // Directories below a temporary directory are this transaction's own (made once each).
        for dir in ancestors(path).filter(|d| d.contains(".osbx-tmp")) {
            if made.insert(dir.to_owned()) {
                let full = root.join(dir);
                if dir.ends_with(".osbx-tmp") {
                    // One left by a transaction that was never journaled is nobody's tree.
                    journal::remove_made(&full);
                }
                fs::create_dir(&full).map_err(io(&full))?;
            }
        }
        let full = root.join(path);
        let mut file = fs::File::create(&full).map_err(io(&full))?;
        file.write_all(text.as_bytes()).map_err(io(&full))?;
        files.push(full);
    }
    let dirs: Vec<PathBuf> = made.iter().map(|d| root.join(d)).collect();
    journal::sync_written(root, &files, &dirs).map_err(|(path, e)| io(&path)(e))?;
    progress.count("writing files", total, total);
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
                        None => journal::remove_made(&target),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn change(path: &str, new: &str) -> FileChange {
        FileChange { path: path.into(), old: None, new: Some(new.into()) }
    }

    #[test]
    fn new_directories_are_staged_whole_and_existing_ones_file_by_file() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("clusters/a")).unwrap();
        let changes = [
            change("clusters/a/kustomization.yaml", "1"),
            change("clusters/b/kustomization.yaml", "2"),
            change("clusters/b/apps/x.yaml", "3"),
            change("platform/pools/pools.yaml", "4"),
            change(".osbx/profile-b.yaml", "5"),
            change("README.md", "6"),
        ];
        let changed: Vec<&FileChange> = changes.iter().collect();
        let places = Places::of(dir.path(), &changed);
        assert_eq!(
            places.renames,
            [
                ("clusters/a/.kustomization.yaml.osbx-tmp", "clusters/a/kustomization.yaml"),
                ("clusters/.b.osbx-tmp", "clusters/b"),
                (".platform.osbx-tmp", "platform"),
                (".osbx/.profile-b.yaml.osbx-tmp", ".osbx/profile-b.yaml"),
                (".README.md.osbx-tmp", "README.md"),
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
        );
        let staged: Vec<&str> = places.texts.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            staged,
            [
                "clusters/a/.kustomization.yaml.osbx-tmp",
                "clusters/.b.osbx-tmp/kustomization.yaml",
                "clusters/.b.osbx-tmp/apps/x.yaml",
                ".platform.osbx-tmp/pools/pools.yaml",
                ".osbx/.profile-b.yaml.osbx-tmp",
                ".README.md.osbx-tmp",
            ]
        );
    }

    #[test]
    fn a_transaction_that_fails_leaves_no_new_directory() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        fs::create_dir_all(root.join("clusters")).unwrap();
        // A file where the new directory must go: its rename fails, and everything is undone.
        fs::write(root.join("clusters/b"), "mine").unwrap();
        let staged = Staged {
            root: root.clone(),
            files: vec![change("clusters/a/k.yaml", "1"), change("clusters/b/k.yaml", "2")],
        };
        let err = write(&staged, &crate::progress::Silent).unwrap_err();
        assert!(err.to_string().contains("clusters/b"), "{err}");
        let mut left: Vec<String> = walk(&root);
        left.sort();
        assert_eq!(left, ["clusters/b"], "nothing staged or committed is left");
        assert_eq!(fs::read_to_string(root.join("clusters/b")).unwrap(), "mine");
    }

    fn walk(root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push(rel(root, &p));
                }
            }
        }
        out
    }

    fn rel(root: &Path, p: &Path) -> String {
        p.strip_prefix(root).unwrap().to_string_lossy().into_owned()
    }
}
