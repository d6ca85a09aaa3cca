//! The Flux repository on disk: what would change, atomic writes, ownership and git.
//!
//! A render is staged ([`stage`]): for every file, its text on disk and the text osbx wants, or
//! its deletion when osbx wrote it before and no longer produces it (see `state`). Staging
//! refuses files osbx does not own (no ownership marker) unless forced, and the staged changes
//! are written as one transaction ([`write`]): every new file is first written next to its
//! target and synced, then all are renamed into place and the stale files deleted; if a step
//! fails, what was done is undone, so the tree is the old one or the new one, never a mix. A
//! write-ahead journal (see `journal`) carries that promise across a kill: the next render
//! finishes what the killed one started ([`recover`]).

mod git;
mod journal;
mod kustomization;
mod snapshot;
mod state;
mod write;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

pub(crate) use git::{
    Checkout, GitError, RepoState, checkout, commit, fetch, fetch_ref, head, merge_notes, note, notes_on_head_line,
    push, push_ref, remotes, repo_state, set_note, staged_conflicts, target, unchanged_since, uncommitted,
};
pub(crate) use kustomization::MergeError;
pub(crate) use snapshot::{Base, BaseError, Snapshot, at_commit, base, file_at, join, relative, work_tree};
use state::State;
pub(crate) use write::{lock, write};

use crate::render::{ClusterIndex, RenderError, Rendered, Renderer, Source, is_owned};

/// Why the repository cannot be updated.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RepoError {
    /// Files at the target paths were not written by osbx.
    #[error(
        "refusing to overwrite files osbx does not own (no \"Managed by osbx\" marker):\n{}\nmove them away, or pass --force to adopt them",
        .0.iter().map(|p| format!("  {p}")).collect::<Vec<_>>().join("\n")
    )]
    Foreign(Vec<String>),
    /// A target path is a directory, or its parent is a file.
    #[error("{path}: {reason}")]
    Blocked {
        /// The repository path it concerns.
        path: String,
        /// Why.
        reason: String,
    },
    /// The cluster kustomization cannot be merged into.
    #[error("{path}: cannot add or remove osbx's entries: {source}")]
    Merge {
        /// The repository path it concerns.
        path: String,
        /// Why.
        #[source]
        source: MergeError,
    },
    /// The state of an earlier render cannot be read.
    #[error(
        "{path}: not a state osbx can read ({reason}); remove it to start afresh (osbx then deletes nothing it rendered before)"
    )]
    State {
        /// The repository path it concerns.
        path: String,
        /// Why.
        reason: String,
    },
    /// The journal of an interrupted render cannot be read.
    #[error("{path}: an interrupted render's journal osbx cannot read ({reason})")]
    Journal {
        /// The repository path it concerns.
        path: String,
        /// Why.
        reason: String,
    },
    /// Rendering the new cluster kustomization failed.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// An I/O error while reading or writing.
    #[error("{path}: {source}")]
    Io {
        /// The repository path it concerns.
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
pub(crate) struct FileChange {
    /// Repository-relative path.
    pub path: String,
    /// Current text, `None` when the file does not exist.
    pub old: Option<String>,
    /// Wanted text, `None` to delete the file.
    pub new: Option<String>,
}

impl FileChange {
    /// Whether writing it would change the disk.
    #[must_use]
    pub(crate) fn changed(&self) -> bool {
        self.old != self.new
    }
}

/// Every file osbx writes or deletes for a render, compared with the disk.
#[derive(Debug, Clone)]
pub(crate) struct Staged {
    /// Repository root.
    pub root: PathBuf,
    /// All files (changed or not), in render order, then the deletions.
    pub files: Vec<FileChange>,
}

impl Staged {
    /// The files that differ from the disk.
    pub(crate) fn changed(&self) -> impl Iterator<Item = &FileChange> {
        self.files.iter().filter(|f| f.changed())
    }
}

/// Every path a `--commit` of this render covers: each file it changes now; each file osbx owns
/// that it writes, and each file the state committed at HEAD lists and that is gone (an earlier
/// render may have written or deleted them without committing, killed or refused by git); its
/// state file; and a cluster kustomization whose difference from HEAD is exactly osbx's own edit
/// (its entries added or removed, or the file created or deleted by osbx): other uncommitted
/// edits in that shared file are yours to commit. The commit takes those that differ from HEAD,
/// and nothing else.
#[must_use]
pub(crate) fn commit_paths(staged: &Staged, rendered: &Rendered) -> Vec<String> {
    let root = &staged.root;
    let mut paths: BTreeSet<String> = staged.changed().map(|f| f.path.clone()).collect();
    let state_path = state::path(&rendered.source);
    let committed = git::at_head(root, &state_path).and_then(|t| State::parse(&t).ok()).unwrap_or_default();
    let now = staged
        .files
        .iter()
        .find(|f| f.path == state_path)
        .and_then(|f| f.new.as_deref())
        .and_then(|t| State::parse(t).ok())
        .unwrap_or_default();
    let owned_files = staged.files.iter().map(|f| f.path.clone()).chain(committed.files.iter().cloned());
    for path in owned_files {
        match fs::read_to_string(root.join(&path)) {
            Ok(text) if is_owned(&text) => {
                paths.insert(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                paths.insert(path);
            }
            _ => {}
        }
    }
    let indexes: BTreeSet<&str> =
        rendered.clusters.iter().map(|c| c.path.as_str()).chain(committed.entries.keys().map(String::as_str)).collect();
    for path in indexes {
        let (head, disk) = (git::at_head(root, path), read_existing(root, path).ok().flatten());
        if head == disk || paths.contains(path) {
            continue;
        }
        let wanted: Vec<String> =
            rendered.clusters.iter().find(|c| c.path == path).map(|c| c.entries.clone()).unwrap_or_default();
        let stale: Vec<String> =
            committed.entries.get(path).into_iter().flatten().filter(|e| !wanted.contains(e)).cloned().collect();
        let osbx_edit = match (&head, &disk) {
            (Some(head), Some(disk)) => kustomization::merge(head, &wanted)
                .and_then(|merged| kustomization::remove(&merged, &stale))
                .is_ok_and(|edited| &edited == disk),
            (None, Some(_)) => now.created.contains(path),
            (Some(_), None) => committed.created.contains(path),
            (None, None) => false,
        };
        if osbx_edit {
            paths.insert(path.to_owned());
        }
    }
    paths.insert(state_path);
    paths.into_iter().collect()
}

/// Whether the Flux repository at `root` has pushed `rendered`: every file of the render is, byte
/// for byte, what the commit of the current branch's upstream holds (what Flux fetches, as the last
/// fetch or push left it), and each cluster kustomization there lists the render's layers.
///
/// # Errors
/// Why it is not shown to be pushed, in words (no repository or upstream, the files that differ).
pub(crate) fn pushed(root: &Path, rendered: &Rendered) -> Result<(), String> {
    let paths: Vec<String> =
        rendered.files.iter().map(|f| f.path.clone()).chain(rendered.clusters.iter().map(|c| c.path.clone())).collect();
    let git::Upstream { name: upstream, files: blobs } = git::at_upstream(root, &paths)?;
    let (files, indexes) = blobs.split_at(rendered.files.len());
    let differ: Vec<&str> = rendered
        .files
        .iter()
        .zip(files)
        .filter(|(f, pushed)| pushed.as_deref() != Some(f.content.as_bytes()))
        .map(|(f, _)| f.path.as_str())
        .collect();
    let mut why = match differ.as_slice() {
        [] => Vec::new(),
        [one] => vec![format!("{one} is not what {upstream} holds")],
        many => {
            let more = if many.len() > 5 { format!(" and {} more", many.len() - 5) } else { String::new() };
            vec![format!(
                "{} files are not what {upstream} holds: {}{more}",
                many.len(),
                many[..5.min(many.len())].join(", ")
            )]
        }
    };
    for (index, pushed) in rendered.clusters.iter().zip(indexes) {
        let text = pushed.as_deref().and_then(|b| std::str::from_utf8(b).ok());
        let missing: Vec<&str> = index
            .entries
            .iter()
            .filter(|e| !text.is_some_and(|t| kustomization::lists(t, e).unwrap_or(false)))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            why.push(format!("{} in {upstream} does not list {}", index.path, missing.join(", ")));
        }
    }
    if why.is_empty() { Ok(()) } else { Err(why.join("; ")) }
}

/// Finish (or undo) what a render that was killed part-way left in the repository at `root`;
/// returns what was done, or `None` when nothing was left.
///
/// # Errors
/// [`RepoError`] when the journal cannot be read or a step fails.
pub(crate) fn recover(root: &Path) -> Result<Option<String>, RepoError> {
    journal::recover(root)
}

/// The files `source` rendered into the repository at `root` before (by its state), with their
/// content now; files that are gone or no longer osbx's are left out.
///
/// # Errors
/// [`RepoError`] when the state or a file cannot be read.
pub(crate) fn rendered_before(root: &Path, source: &Source) -> Result<BTreeMap<String, String>, RepoError> {
    let state_path = state::path(source);
    let Some(text) = read_existing(root, &state_path)?.filter(|t| is_owned(t)) else { return Ok(BTreeMap::new()) };
    let state = State::parse(&text).map_err(|reason| RepoError::State { path: state_path.clone(), reason })?;
    let mut out = BTreeMap::new();
    for path in state.files {
        if let Some(content) = read_existing(root, &path)?.filter(|t| is_owned(t)) {
            out.insert(path, content);
        }
    }
    Ok(out)
}

/// Compare a render with the repository at `root`.
///
/// # Errors
/// [`RepoError`] when a file cannot be read, a path is blocked, a cluster kustomization cannot
/// be edited, or (unless `force`) a target file is not owned by osbx.
pub(crate) fn stage(root: &Path, rendered: &Rendered, renderer: &Renderer, force: bool) -> Result<Staged, RepoError> {
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
        files.push(FileChange { path: f.path.clone(), old, new: Some(f.content.clone()) });
    }
    let state_path = state::path(&rendered.source);
    let state_text = read_existing(root, &state_path)?;
    if state_text.as_deref().is_some_and(|t| !is_owned(t)) && !force {
        foreign.push(state_path.clone());
    }
    if !foreign.is_empty() {
        return Err(RepoError::Foreign(foreign));
    }
    let previous = match state_text.as_deref().filter(|t| is_owned(t)) {
        Some(text) => State::parse(text).map_err(|reason| RepoError::State { path: state_path.clone(), reason })?,
        None => State::default(),
    };
    let mut next = State {
        files: rendered.files.iter().map(|f| f.path.clone()).collect(),
        entries: BTreeMap::new(),
        created: BTreeSet::new(),
    };
    // What the render no longer produces, and osbx still owns.
    for path in previous.files.difference(&next.files) {
        if let Some(old) = read_existing(root, path)?.filter(|t| is_owned(t)) {
            files.push(FileChange { path: path.clone(), old: Some(old), new: None });
        }
    }
    let indexes: BTreeSet<&str> =
        rendered.clusters.iter().map(|c| c.path.as_str()).chain(previous.entries.keys().map(String::as_str)).collect();
    for path in indexes {
        let index = rendered.clusters.iter().find(|c| c.path == path);
        let recorded = previous.entries.get(path).cloned().unwrap_or_default();
        let created_before = previous.created.contains(path);
        if let Some((change, ours)) = cluster_index(root, path, index, &recorded, created_before, renderer)? {
            if !ours.is_empty() {
                next.entries.insert(path.to_owned(), ours);
            }
            if change.new.is_some() && (created_before || change.old.is_none()) {
                next.created.insert(path.to_owned());
            }
            files.push(change);
        }
    }
    let text = next.text(&rendered.source, &state_path);
    files.push(FileChange { path: state_path, old: state_text, new: Some(text) });
    Ok(Staged { root: root.to_path_buf(), files })
}

/// A cluster kustomization: created when missing, else osbx's entries merged in and the ones osbx
/// added before and no longer needs removed; one osbx created that lists nothing any more (its
/// cluster left the fleet) is deleted. Returns the change and the entries osbx added that
/// it lists now (`None`: neither the file nor anything to do).
fn cluster_index(
    root: &Path,
    path: &str,
    index: Option<&ClusterIndex>,
    recorded: &BTreeSet<String>,
    created_before: bool,
    renderer: &Renderer,
) -> Result<Option<(FileChange, BTreeSet<String>)>, RepoError> {
    let merge_error = |source| RepoError::Merge { path: path.to_owned(), source };
    let wanted: Vec<String> = index.map(|i| i.entries.clone()).unwrap_or_default();
    let old = read_existing(root, path)?;
    let (new, added) = match &old {
        Some(text) => {
            let added: BTreeSet<String> = wanted
                .iter()
                .filter(|e| !kustomization::lists(text, e).unwrap_or(false) || recorded.contains(*e))
                .cloned()
                .collect();
            let stale: Vec<String> = recorded.iter().filter(|e| !wanted.contains(e)).cloned().collect();
            let merged = kustomization::merge(text, &wanted).map_err(merge_error)?;
            let new = kustomization::remove(&merged, &stale).map_err(merge_error)?;
            // A cluster osbx no longer renders, whose kustomization osbx created and which now
            // lists nothing: the file goes too.
            if index.is_none() && created_before && kustomization::items(&new).map_err(merge_error)?.is_empty() {
                return Ok(Some((FileChange { path: path.to_owned(), old, new: None }, BTreeSet::new())));
            }
            (new, added)
        }
        None if index.is_none() => return Ok(None),
        None => {
            let mut resources = Vec::new();
            let dir = Path::new(path).parent().unwrap_or(Path::new(""));
            if root.join(dir).join("flux-system").is_dir() {
                resources.push("flux-system".to_owned());
            }
            resources.extend(wanted.iter().cloned());
            (renderer.cluster_kustomization(&resources)?, wanted.iter().cloned().collect())
        }
    };
    Ok(Some((FileChange { path: path.to_owned(), old, new: Some(new) }, added)))
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

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use git2::{Repository, Signature};

    use crate::render::{ClusterIndex, Rendered, RenderedFile, Source};

    const INDEX: &str = "clusters/lab/kustomization.yaml";

    fn rendered(pools: &str) -> Rendered {
        let file = |path: &str, content: &str| RenderedFile {
            path: path.to_owned(),
            layer: "pools".to_owned(),
            content: content.to_owned(),
            objects: Arc::from([]),
        };
        Rendered {
            source: Source { kind: "profile", name: "lab".to_owned() },
            files: vec![
                file("clusters/lab/apps/pools.yaml", "kind: Kustomization\n"),
                file("platform/pools.yaml", pools),
            ],
            clusters: vec![ClusterIndex { path: INDEX.to_owned(), entries: vec!["apps/pools.yaml".to_owned()] }],
        }
    }

    /// Commit `files` on `main` and point `origin/main`, its upstream, at that commit (as a push
    /// leaves them).
    fn pushed_commit(root: &Path, files: &[(&str, &str)]) {
        let repo = Repository::open(root).unwrap_or_else(|_| Repository::init(root).unwrap());
        let mut index = repo.index().unwrap();
        for (path, content) in files {
            let full = root.join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(&full, content).unwrap();
            index.add_path(Path::new(path)).unwrap();
        }
        index.write().unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = Signature::now("test", "test@example.com").unwrap();
        let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        let id = repo.commit(Some("refs/heads/main"), &sig, &sig, "render", &tree, &parents).unwrap();
        repo.set_head("refs/heads/main").unwrap();
        if repo.find_remote("origin").is_err() {
            repo.remote("origin", "https://127.0.0.1:9/flux.git").unwrap();
        }
        repo.reference("refs/remotes/origin/main", id, true, "pushed").unwrap();
        repo.find_branch("main", git2::BranchType::Local).unwrap().set_upstream(Some("origin/main")).unwrap();
    }

    #[test]
    fn a_render_is_pushed_only_when_the_upstream_holds_every_file_and_lists_its_layers() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        // (Unless the temporary directory is inside a repository, which then holds no render.)
        if Repository::discover(root).is_err() {
            let why = super::pushed(root, &rendered("a: 1\n")).unwrap_err();
            assert!(why.ends_with("is not in a git repository"), "{why}");
        }

        let index = "resources:\n  - flux-system\n  - apps/pools.yaml\n";
        let files = [
            ("clusters/lab/apps/pools.yaml", "kind: Kustomization\n"),
            ("platform/pools.yaml", "a: 1\n"),
            (INDEX, index),
        ];
        pushed_commit(root, &files);
        assert_eq!(super::pushed(root, &rendered("a: 1\n")), Ok(()));
        // Byte for byte: a changed value, or only a trailing newline, is not what is pushed.
        for other in ["a: 2\n", "a: 1"] {
            let why = super::pushed(root, &rendered(other)).unwrap_err();
            assert_eq!(why, "platform/pools.yaml is not what origin/main holds");
        }
        // The work tree does not count: only what the upstream's commit holds.
        std::fs::write(root.join("platform/pools.yaml"), "a: 2\n").unwrap();
        assert_eq!(super::pushed(root, &rendered("a: 1\n")), Ok(()));
        assert!(super::pushed(root, &rendered("a: 2\n")).is_err());

        // The cluster kustomization must list the layers, or Flux applies none of it.
        pushed_commit(root, &[(INDEX, "resources:\n  - flux-system\n")]);
        let why = super::pushed(root, &rendered("a: 1\n")).unwrap_err();
        assert_eq!(why, format!("{INDEX} in origin/main does not list apps/pools.yaml"));

        // No upstream: nothing says what is pushed.
        let repo = Repository::open(root).unwrap();
        repo.find_branch("main", git2::BranchType::Local).unwrap().set_upstream(None).unwrap();
        let why = super::pushed(root, &rendered("a: 1\n")).unwrap_err();
        assert_eq!(why, "branch main has no upstream (it was never pushed)");
    }
}
