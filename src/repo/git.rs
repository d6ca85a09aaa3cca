//! Commit rendered files with git2: exactly the files osbx changed, never anything else.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use git2::{Repository, Signature, Status, StatusOptions};

/// Why a commit could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GitError {
    /// `--out` is not inside a git work tree.
    #[error("{path} is not inside a git repository (run `git init` there, or drop --commit)")]
    NotARepo {
        /// The directory.
        path: String,
    },
    /// The index holds staged changes osbx did not make.
    #[error(
        "refusing to commit: the index has staged changes osbx did not make:\n{}\ncommit or unstage them first",
        .0.iter().map(|p| format!("  {p}")).collect::<Vec<_>>().join("\n")
    )]
    UnrelatedStaged(Vec<String>),
    /// libgit2 failed.
    #[error("git: {0}")]
    Git(#[from] git2::Error),
}

fn open(root: &Path) -> Result<(Repository, PathBuf), GitError> {
    let repo = Repository::discover(root).map_err(|_| GitError::NotARepo { path: root.display().to_string() })?;
    let workdir = repo.workdir().ok_or_else(|| GitError::NotARepo { path: root.display().to_string() })?;
    let workdir = workdir.canonicalize().unwrap_or_else(|_| workdir.to_path_buf());
    Ok((repo, workdir))
}

/// `root`-relative paths → work-tree-relative paths.
fn to_workdir<'a>(root: &Path, workdir: &Path, paths: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let prefix = root.strip_prefix(workdir).unwrap_or(Path::new(""));
    paths.into_iter().map(|p| prefix.join(p).to_string_lossy().replace('\\', "/")).collect()
}

/// Staged paths (work-tree relative) that are not among `ours` (`root`-relative).
///
/// # Errors
/// [`GitError`] when `root` is not in a repository or libgit2 fails.
pub(crate) fn staged_conflicts(root: &Path, ours: &[String]) -> Result<Vec<String>, GitError> {
    let (repo, workdir) = open(root)?;
    let ours = to_workdir(root, &workdir, ours);
    let mut opts = StatusOptions::new();
    opts.include_untracked(false).include_ignored(false);
    let staged = Status::INDEX_NEW
        | Status::INDEX_MODIFIED
        | Status::INDEX_DELETED
        | Status::INDEX_RENAMED
        | Status::INDEX_TYPECHANGE;
    let statuses = repo.statuses(Some(&mut opts))?;
    let mut unrelated: Vec<String> = statuses
        .iter()
        .filter(|s| s.status().intersects(staged))
        .filter_map(|s| s.path().ok().map(str::to_owned))
        .filter(|p| !ours.contains(p))
        .collect();
    unrelated.sort();
    Ok(unrelated)
}

/// Stage `paths` (`root`-relative; a path no longer in the work tree leaves the index) and commit
/// them; returns the commit id and how many files it changed, or `None` when nothing differs
/// from HEAD.
///
/// # Errors
/// [`GitError`] when libgit2 fails.
pub(crate) fn commit(root: &Path, paths: &[String], message: &str) -> Result<Option<(git2::Oid, usize)>, GitError> {
    if paths.is_empty() {
        return Ok(None);
    }
    let (repo, workdir) = open(root)?;
    let paths = to_workdir(root, &workdir, paths);
    let mut index = repo.index()?;
    // Exact paths, never pathspecs: a pathspec list would glob-match (and an empty one matches all).
    for path in &paths {
        // A path osbx deleted leaves the index; the others are (re)added.
        if workdir.join(path).exists() {
            index.add_path(Path::new(path))?;
        } else {
            index.remove_path(Path::new(path))?;
        }
    }
    index.write()?;
    let tree_id = index.write_tree()?;
    let parent = match repo.head() {
        Ok(head) => Some(head.peel_to_commit()?),
        Err(e) if e.code() == git2::ErrorCode::UnbornBranch || e.code() == git2::ErrorCode::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    if parent.as_ref().is_some_and(|c| c.tree_id() == tree_id) {
        return Ok(None);
    }
    let tree = repo.find_tree(tree_id)?;
    let parent_tree = parent.as_ref().map(git2::Commit::tree).transpose()?;
    let files = repo.diff_tree_to_tree(parent_tree.as_ref(), Some(&tree), None)?.deltas().len();
    let sig = repo.signature().or_else(|_| Signature::now("osbx", "osbx@localhost"))?;
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    let id = repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &parents)?;
    Ok(Some((id, files)))
}

/// The trailers (`Key: value` lines closing a commit message) of the newest commit on HEAD's
/// first-parent line that has the trailer `key: value`; `None` when there is none, or when a
/// commit after it changed one of `paths` (`root`-relative): what that commit stands for is not
/// what the repository holds any more.
///
/// # Errors
/// [`GitError`] when `root` is not in a repository or libgit2 fails.
pub(crate) fn newest_marked(
    root: &Path,
    (key, value): (&str, &str),
    paths: &BTreeSet<String>,
) -> Result<Option<Vec<(String, String)>>, GitError> {
    let (repo, workdir) = open(root)?;
    let watched: HashSet<String> = to_workdir(root, &workdir, paths).into_iter().collect();
    let mut walk = repo.revwalk()?;
    match walk.push_head() {
        Err(e) if e.code() == git2::ErrorCode::UnbornBranch || e.code() == git2::ErrorCode::NotFound => {
            return Ok(None);
        }
        other => other?,
    }
    walk.simplify_first_parent()?;
    for id in walk {
        let commit = repo.find_commit(id?)?;
        let trailers: Vec<(String, String)> = git2::message_trailers_strs(commit.message().unwrap_or_default())
            .map(|t| t.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect())
            .unwrap_or_default();
        if trailers.iter().any(|(k, v)| k == key && v == value) {
            return Ok(Some(trailers));
        }
        let parent = commit.parents().next().map(|p| p.tree()).transpose()?;
        let diff = repo.diff_tree_to_tree(parent.as_ref(), Some(&commit.tree()?), None)?;
        let touches = diff.deltas().any(|d| {
            [d.old_file().path(), d.new_file().path()]
                .into_iter()
                .flatten()
                .any(|p| watched.contains(&p.to_string_lossy().replace('\\', "/")))
        });
        if touches {
            return Ok(None);
        }
    }
    Ok(None)
}

/// The text of `rel` (relative to `root`) in the commit at HEAD, when there is one.
#[must_use]
pub(super) fn at_head(root: &Path, rel: &str) -> Option<String> {
    let (repo, workdir) = open(root).ok()?;
    let path = to_workdir(root, &workdir, &[rel.to_owned()]).pop()?;
    let tree = repo.head().ok()?.peel_to_tree().ok()?;
    let blob = tree.get_path(Path::new(&path)).ok()?.to_object(&repo).ok()?.peel_to_blob().ok()?;
    String::from_utf8(blob.content().to_vec()).ok()
}

/// What a Flux repository holds that Flux cannot see yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RepoState {
    /// Work-tree paths with uncommitted changes (tracked files, and untracked ones).
    pub uncommitted: Vec<String>,
    /// Commits on the current branch that its upstream does not have, and the upstream's name.
    pub unpushed: Option<(usize, String)>,
}

/// The state of the git repository containing `path`, or `None` when it is not in one.
#[must_use]
pub(crate) fn repo_state(path: &Path) -> Option<RepoState> {
    let repo = Repository::discover(path).ok()?;
    let mut opts = StatusOptions::new();
    opts.include_untracked(true).recurse_untracked_dirs(true).include_ignored(false);
    let mut uncommitted: Vec<String> = repo
        .statuses(Some(&mut opts))
        .ok()?
        .iter()
        .filter(|s| !s.status().is_empty() && s.status() != Status::IGNORED)
        .filter_map(|s| s.path().ok().map(str::to_owned))
        .collect();
    uncommitted.sort();
    let unpushed = (|| {
        let head = repo.head().ok()?;
        let branch = git2::Branch::wrap(head);
        let upstream = branch.upstream().ok()?;
        let local = branch.get().target()?;
        let remote = upstream.get().target()?;
        let (ahead, _) = repo.graph_ahead_behind(local, remote).ok()?;
        let name = upstream.name().ok().flatten().unwrap_or("upstream").to_owned();
        (ahead > 0).then_some((ahead, name))
    })();
    Some(RepoState { uncommitted, unpushed })
}

/// The commit at HEAD of the repository containing `root`.
///
/// # Errors
/// [`GitError`] when there is no repository or no commit yet.
pub(crate) fn head(root: &Path) -> Result<String, GitError> {
    let (repo, _) = open(root)?;
    Ok(repo.head()?.peel_to_commit()?.id().to_string())
}

/// Whether any of `paths` (`root`-relative) differs from HEAD in the work tree.
#[must_use]
pub(crate) fn uncommitted(root: &Path, paths: &[String]) -> bool {
    let Ok((repo, workdir)) = open(root) else { return false };
    let paths = to_workdir(root, &workdir, paths);
    paths.iter().any(|p| repo.status_file(Path::new(p)).is_ok_and(|s| !s.is_empty() && s != Status::IGNORED))
}

/// `git push` in the repository containing `root`: the user's git, with its remotes,
/// credentials and hooks, pushes the current branch to its upstream.
///
/// # Errors
/// What git said, when it failed or could not run.
pub(crate) fn push(root: &Path) -> Result<(), String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["push", "--quiet"])
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()) }
}
