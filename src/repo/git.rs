//! Commit rendered files with git2: exactly the files osbx changed, never anything else.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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

pub(super) fn open(root: &Path) -> Result<(Repository, PathBuf), GitError> {
    let repo = Repository::discover(root).map_err(|_| GitError::NotARepo { path: root.display().to_string() })?;
    let workdir = repo.workdir().ok_or_else(|| GitError::NotARepo { path: root.display().to_string() })?;
    let workdir = workdir.canonicalize().unwrap_or_else(|_| workdir.to_path_buf());
    Ok((repo, workdir))
}

/// `root`-relative paths → work-tree-relative paths.
pub(super) fn to_workdir<'a>(root: &Path, workdir: &Path, paths: impl IntoIterator<Item = &'a String>) -> Vec<String> {
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

/// The note on `commit` in the notes ref `notes` (`refs/notes/…`), when there is one.
///
/// # Errors
/// [`GitError`] when `root` is not in a repository or libgit2 fails.
pub(crate) fn note(root: &Path, notes: &str, commit: &str) -> Result<Option<String>, GitError> {
    let (repo, _) = open(root)?;
    match repo.find_note(Some(notes), git2::Oid::from_str(commit)?) {
        Ok(n) => Ok(Some(n.message().unwrap_or_default().to_owned())),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Set the note on `commit` in the notes ref `notes` to `text` (a commit of the notes ref, as
/// `git notes add -f` makes it).
///
/// # Errors
/// [`GitError`] when `root` is not in a repository or libgit2 fails.
pub(crate) fn set_note(root: &Path, notes: &str, commit: &str, text: &str) -> Result<(), GitError> {
    let (repo, _) = open(root)?;
    let sig = repo.signature().or_else(|_| Signature::now("osbx", "osbx@localhost"))?;
    repo.note(&sig, &sig, Some(notes), git2::Oid::from_str(commit)?, text, true)?;
    Ok(())
}

/// The notes of the notes refs `refs` (each `refs/notes/…`; one that does not exist holds none)
/// on the commits of HEAD's first-parent line, newest first: `each` gets a commit's id and its
/// note in each ref that annotates it (in the order of `refs`), and stops the walk with `Break`.
///
/// # Errors
/// [`GitError`] when `root` is not in a repository or libgit2 fails.
pub(crate) fn notes_on_head_line(
    root: &Path,
    refs: &[&str],
    mut each: impl FnMut(&str, &[String]) -> std::ops::ControlFlow<()>,
) -> Result<(), GitError> {
    let (repo, _) = open(root)?;
    let mut annotated: std::collections::HashMap<git2::Oid, Vec<git2::Oid>> = std::collections::HashMap::new();
    for notes in refs {
        match repo.notes(Some(notes)) {
            Ok(iter) => {
                for pair in iter {
                    let (note, commit) = pair?;
                    annotated.entry(commit).or_default().push(note);
                }
            }
            Err(e) if e.code() == git2::ErrorCode::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    if annotated.is_empty() {
        return Ok(());
    }
    let mut walk = repo.revwalk()?;
    match walk.push_head() {
        Err(e) if e.code() == git2::ErrorCode::UnbornBranch || e.code() == git2::ErrorCode::NotFound => {
            return Ok(());
        }
        other => other?,
    }
    walk.simplify_first_parent()?;
    for id in walk {
        let id = id?;
        let Some(notes) = annotated.get(&id) else { continue };
        let texts = notes
            .iter()
            .map(|n| Ok(String::from_utf8_lossy(repo.find_blob(*n)?.content()).into_owned()))
            .collect::<Result<Vec<_>, git2::Error>>()?;
        if each(&id.to_string(), &texts).is_break() {
            break;
        }
    }
    Ok(())
}

/// Merge the notes ref `theirs` into the notes ref `ours` (both `refs/notes/…`), as `git notes
/// merge` does: `ours` is created at `theirs`, or fast-forwarded to it, when it can be; else
/// every note of `theirs` is added to `ours`, a commit annotated on both sides with different
/// notes gets what `combine(commit, ours, theirs)` makes of them, and a merge commit with both
/// tips as its parents ends `ours`, so that pushing it to where `theirs` came from is a
/// fast-forward. Nothing happens when `theirs` does not exist or `ours` holds it already.
///
/// # Errors
/// What `combine` returns, or [`GitError`] when `root` is not in a repository or libgit2 fails.
pub(crate) fn merge_notes<E: From<GitError>>(
    root: &Path,
    ours: &str,
    theirs: &str,
    mut combine: impl FnMut(&str, &str, &str) -> Result<String, E>,
) -> Result<(), E> {
    let (repo, _) = open(root)?;
    let found = |name: &str| match repo.refname_to_id(name) {
        Ok(id) => Ok(Some(id)),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(GitError::from(e)),
    };
    let Some(their_tip) = found(theirs)? else { return Ok(()) };
    let message = format!("osbx: notes merged from {theirs}");
    match found(ours)? {
        Some(tip) if tip == their_tip || repo.graph_descendant_of(tip, their_tip).map_err(GitError::from)? => {
            return Ok(());
        }
        // Both sides have notes the other has not.
        Some(tip) if !repo.graph_descendant_of(their_tip, tip).map_err(GitError::from)? => {}
        _ => {
            repo.reference(ours, their_tip, true, &message).map_err(GitError::from)?;
            return Ok(());
        }
    }
    let sig = repo.signature().or_else(|_| Signature::now("osbx", "osbx@localhost")).map_err(GitError::from)?;
    let mut theirs_notes = Vec::new();
    for pair in repo.notes(Some(theirs)).map_err(GitError::from)? {
        theirs_notes.push(pair.map_err(GitError::from)?);
    }
    for (blob, commit) in theirs_notes {
        let their_text = String::from_utf8_lossy(repo.find_blob(blob).map_err(GitError::from)?.content()).into_owned();
        let text = match repo.find_note(Some(ours), commit) {
            Ok(note) if note.id() == blob => continue,
            Ok(note) => {
                let our_text = note.message().unwrap_or_default().to_owned();
                let text = combine(&commit.to_string(), &our_text, &their_text)?;
                if text == our_text {
                    continue;
                }
                text
            }
            Err(e) if e.code() == git2::ErrorCode::NotFound => their_text,
            Err(e) => return Err(GitError::from(e).into()),
        };
        repo.note(&sig, &sig, Some(ours), commit, &text, true).map_err(GitError::from)?;
    }
    let tip = repo.find_commit(repo.refname_to_id(ours).map_err(GitError::from)?).map_err(GitError::from)?;
    let their_commit = repo.find_commit(their_tip).map_err(GitError::from)?;
    let tree = tip.tree().map_err(GitError::from)?;
    repo.commit(Some(ours), &sig, &sig, &message, &tree, &[&tip, &their_commit]).map_err(GitError::from)?;
    Ok(())
}

/// The object the ref `name` points at, or `None` when there is no such ref.
///
/// # Errors
/// [`GitError`] when `root` is not in a repository or libgit2 fails.
pub(crate) fn target(root: &Path, name: &str) -> Result<Option<String>, GitError> {
    let (repo, _) = open(root)?;
    match repo.refname_to_id(name) {
        Ok(id) => Ok(Some(id.to_string())),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Whether each of `dirs` (`root`-relative) holds at HEAD exactly what it held at `commit`
/// (the same tree, or absent at both).
///
/// # Errors
/// [`GitError`] when `root` is not in a repository, `commit` is not a commit there, or libgit2
/// fails.
pub(crate) fn unchanged_since(root: &Path, commit: &str, dirs: &[String]) -> Result<bool, GitError> {
    let (repo, workdir) = open(root)?;
    let then = repo.find_commit(git2::Oid::from_str(commit)?)?.tree()?;
    let now = repo.head()?.peel_to_tree()?;
    Ok(to_workdir(root, &workdir, dirs).iter().all(|dir| {
        let id = |tree: &git2::Tree<'_>| tree.get_path(Path::new(dir)).ok().map(|e| e.id());
        id(&then) == id(&now)
    }))
}

/// What HEAD is in a repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Checkout {
    /// A branch is checked out (maybe with no commit yet); `remote` is its upstream's remote,
    /// when it has one.
    Branch {
        /// The branch's short name.
        name: String,
        /// Its upstream's remote (`branch.<name>.remote`).
        remote: Option<String>,
    },
    /// HEAD is detached at this commit.
    Detached(String),
}

/// The names of the remotes of the repository containing `root`.
///
/// # Errors
/// [`GitError`] when `root` is not in a repository or libgit2 fails.
pub(crate) fn remotes(root: &Path) -> Result<Vec<String>, GitError> {
    let (repo, _) = open(root)?;
    Ok(repo.remotes()?.iter().filter_map(|r| r.ok().flatten().map(str::to_owned)).collect())
}

/// What HEAD is in the repository containing `root`.
///
/// # Errors
/// [`GitError`] when `root` is not in a repository or libgit2 fails.
pub(crate) fn checkout(root: &Path) -> Result<Checkout, GitError> {
    let (repo, _) = open(root)?;
    if repo.head_detached()? {
        return Ok(Checkout::Detached(repo.head()?.peel_to_commit()?.id().to_string()));
    }
    let head = repo.find_reference("HEAD")?;
    let full = head.symbolic_target()?.unwrap_or("HEAD").to_owned();
    let name = full.strip_prefix("refs/heads/").unwrap_or(&full).to_owned();
    let remote = repo.branch_upstream_remote(&full).ok().and_then(|b| b.as_str().ok().map(str::to_owned));
    Ok(Checkout::Branch { name, remote })
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

/// Files of the commit the current branch's upstream points at.
pub(crate) struct Upstream {
    /// The upstream's name (`origin/main`).
    pub name: String,
    /// The bytes of each path asked for (`None`: not in that commit).
    pub files: Vec<Option<Vec<u8>>>,
}

/// What the current branch's upstream holds (as the last fetch or push left it: what Flux
/// fetches): each of `paths` (`root`-relative) in its commit.
///
/// # Errors
/// Why nothing is known to be pushed, in words: `root` is not in a repository, HEAD is not on a
/// branch, the branch has no upstream, or libgit2 failed.
pub(crate) fn at_upstream(root: &Path, paths: &[String]) -> Result<Upstream, String> {
    let shown = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
    let shown = shown.display();
    let (repo, workdir) = open(root).map_err(|_| format!("{shown} is not in a git repository"))?;
    let head = repo.head().map_err(|e| format!("the repository at {shown} has no commit checked out ({e})"))?;
    if !head.is_branch() {
        return Err(format!("HEAD of the repository at {shown} is not on a branch"));
    }
    let branch = git2::Branch::wrap(head);
    let branch_name = branch.name().ok().flatten().unwrap_or("HEAD").to_owned();
    let upstream =
        branch.upstream().map_err(|_| format!("branch {branch_name} has no upstream (it was never pushed)"))?;
    let name = upstream.name().ok().flatten().unwrap_or("the upstream").to_owned();
    let tree = upstream.get().peel_to_tree().map_err(|e| format!("{name}: {e}"))?;
    let files = to_workdir(root, &workdir, paths)
        .iter()
        .map(|path| {
            let entry = tree.get_path(Path::new(path)).ok()?;
            Some(entry.to_object(&repo).ok()?.peel_to_blob().ok()?.content().to_vec())
        })
        .collect();
    Ok(Upstream { name, files })
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
    user_git(Command::new("git").arg("-C").arg(root).args(["push", "--quiet"]))
}

/// `git push REMOTE REF:REF` in the repository containing `root` (a ref other than the branch,
/// such as a notes ref), with the user's git.
///
/// # Errors
/// What git said, when it failed or could not run.
pub(crate) fn push_ref(root: &Path, remote: &str, reference: &str) -> Result<(), String> {
    user_git(Command::new("git").arg("-C").arg(root).args([
        "push",
        "--quiet",
        "--",
        remote,
        &format!("{reference}:{reference}"),
    ]))
}

/// `git fetch REMOTE` of the ref `reference` into the ref `into`, in the repository containing
/// `root`, with the user's git (as [`push_ref`]): `into` is then what the remote holds (forced,
/// as a remote-tracking branch is), or gone when the remote has no `reference`. The refspec is
/// a pattern (`+REF*:INTO*`) only so that a remote without the ref is no error; a ref of the
/// remote whose name merely starts with `reference` is fetched beside it, under `into`'s name
/// with the same ending.
///
/// # Errors
/// What git said, when it failed or could not run.
pub(crate) fn fetch_ref(root: &Path, remote: &str, reference: &str, into: &str) -> Result<(), String> {
    user_git(Command::new("git").arg("-C").arg(root).args([
        "fetch",
        "--quiet",
        "--no-tags",
        "--prune",
        "--",
        remote,
        &format!("+{reference}*:{into}*"),
    ]))
}

/// `git fetch URL REFSPEC…` into the bare repository `git_dir`, no tags beyond the refspecs,
/// with the user's git: its credential helpers, proxies and `url.*.insteadOf` apply, and it
/// fails rather than prompts for a password.
///
/// # Errors
/// What git said, when it failed or could not run.
pub(crate) fn fetch(git_dir: &Path, url: &str, refspecs: &[String]) -> Result<(), String> {
    user_git(
        Command::new("git")
            .arg("--git-dir")
            .arg(git_dir)
            .args(["fetch", "--quiet", "--no-tags", "--", url])
            .args(refspecs)
            .env("GIT_TERMINAL_PROMPT", "0")
            .stdin(Stdio::null()),
    )
}

/// Run `git`, the user's own from PATH, as built; what it said on stderr when it failed.
fn user_git(git: &mut Command) -> Result<(), String> {
    let out = git.output().map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()) }
}
