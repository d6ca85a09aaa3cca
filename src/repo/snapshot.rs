//! A repository's manifests as one point of its history holds them, read-only and in memory: a
//! commit's tree (what Flux fetches at that commit), or the work tree with a render staged over
//! it (what the next `osbx render` would leave there). Only YAML files are kept (`.yaml`,
//! `.yml`): they are what Flux's kustomize build reads.

use std::collections::BTreeMap;
use std::path::Path;

use git2::Oid;

use super::git::{GitError, open, to_workdir};
use super::{RepoError, Staged, io};

/// The YAML files of one point of a repository, by `root`-relative `/`-separated path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    files: BTreeMap<String, Vec<u8>>,
}

fn is_yaml(path: &str) -> bool {
    Path::new(path).extension().is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"))
}

impl Snapshot {
    /// A snapshot of these files (the YAML ones are kept).
    pub(crate) fn of(files: impl IntoIterator<Item = (String, Vec<u8>)>) -> Self {
        Self { files: files.into_iter().filter(|(p, _)| is_yaml(p)).collect() }
    }

    /// The bytes of `path`.
    pub(crate) fn read(&self, path: &str) -> Option<&[u8]> {
        self.files.get(path.trim_start_matches("./")).map(Vec::as_slice)
    }

    /// Every file under the directory `dir` (recursively), in path order.
    pub(crate) fn under<'a>(&'a self, dir: &str) -> impl Iterator<Item = (&'a str, &'a [u8])> + 'a {
        let prefix = format!("{}/", dir.trim_start_matches("./").trim_end_matches('/'));
        let prefix = if prefix == "/" { String::new() } else { prefix };
        self.files
            .range(prefix.clone()..)
            .take_while(move |(p, _)| p.starts_with(&prefix))
            .map(|(p, b)| (p.as_str(), b.as_slice()))
    }

    /// Whether the directory `dir` holds any YAML file.
    pub(crate) fn has_dir(&self, dir: &str) -> bool {
        self.under(dir).next().is_some()
    }
}

/// `dir/rel` as a repository path: `.` dropped, `..` resolved (`a/b` + `../c` → `a/c`), no
/// leading or doubled `/`.
#[must_use]
pub(crate) fn join(dir: &str, rel: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in dir.split('/').chain(rel.split('/')) {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// The commit a review compares with, and how to name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Base {
    /// The commit the head is compared with.
    pub commit: Oid,
    /// What it is, for people: `origin/main (1a2b3c4)`, `the merge base of main and origin/main
    /// (1a2b3c4)`.
    pub label: String,
}

/// Why the base of a review cannot be found.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BaseError {
    /// The repository cannot be opened.
    #[error(transparent)]
    Git(#[from] GitError),
    /// `--base` names nothing in the repository.
    #[error("--base {spec}: no such commit, branch or tag in the repository at {root} ({reason})")]
    NoSuchRef {
        /// What was given.
        spec: String,
        /// The repository.
        root: String,
        /// libgit2's words.
        reason: String,
    },
    /// No `--base` and no upstream to take the merge base with.
    #[error("{0}: give the commit to compare with, e.g. --base origin/main")]
    NoUpstream(String),
}

fn short(id: Oid) -> String {
    id.to_string()[..7].to_owned()
}

/// The commit `spec` names in the repository containing `root` (a branch, tag, commit or any
/// revision git understands), or, without one, the merge base of the checked-out branch with its
/// upstream (where a pull request's branch left its target).
///
/// # Errors
/// [`BaseError`]: no repository, no such revision, no branch or upstream to take a merge base.
pub(crate) fn base(root: &Path, spec: Option<&str>) -> Result<Base, BaseError> {
    let (repo, _) = open(root)?;
    let shown = root.display().to_string();
    if let Some(spec) = spec.filter(|s| !s.is_empty()) {
        let commit = repo.revparse_single(spec).and_then(|o| o.peel_to_commit()).map_err(|e| BaseError::NoSuchRef {
            spec: spec.to_owned(),
            root: shown,
            reason: e.message().to_owned(),
        })?;
        return Ok(Base { label: format!("{spec} ({})", short(commit.id())), commit: commit.id() });
    }
    let head = repo
        .head()
        .map_err(|e| BaseError::NoUpstream(format!("the repository at {shown} has no commit ({})", e.message())))?;
    if !head.is_branch() {
        return Err(BaseError::NoUpstream(format!("HEAD of the repository at {shown} is not on a branch")));
    }
    let branch = git2::Branch::wrap(head);
    let name = branch.name().ok().flatten().unwrap_or("HEAD").to_owned();
    let upstream = branch.upstream().map_err(|_| BaseError::NoUpstream(format!("branch {name} has no upstream")))?;
    let upstream_name = upstream.name().ok().flatten().unwrap_or("its upstream").to_owned();
    let (Some(ours), Some(theirs)) = (branch.get().target(), upstream.get().target()) else {
        return Err(BaseError::NoUpstream(format!("branch {name} or {upstream_name} points at no commit")));
    };
    let commit = repo.merge_base(ours, theirs).map_err(|e| {
        BaseError::NoUpstream(format!("{name} and {upstream_name} have no common commit ({})", e.message()))
    })?;
    Ok(Base { label: format!("the merge base of {name} and {upstream_name} ({})", short(commit)), commit })
}

/// The YAML files of `commit`'s tree under the directory `root` stands for.
///
/// # Errors
/// [`GitError`] when the repository or the commit cannot be read.
pub(crate) fn at_commit(root: &Path, commit: Oid) -> Result<Snapshot, GitError> {
    let (repo, workdir) = open(root)?;
    let prefix = to_workdir(root, &workdir, &[String::new()]).pop().unwrap_or_default();
    let prefix = prefix.trim_end_matches('/').to_owned();
    let tree = repo.find_commit(commit)?.tree()?;
    let mut files = BTreeMap::new();
    let mut failed = None;
    tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
        let path = format!("{dir}{}", entry.name().unwrap_or_default());
        let rel = if prefix.is_empty() { Some(path.as_str()) } else { path.strip_prefix(&format!("{prefix}/")) };
        if let Some(rel) = rel
            && entry.kind() == Some(git2::ObjectType::Blob)
            && is_yaml(rel)
        {
            match entry.to_object(&repo).and_then(|o| o.peel_to_blob()) {
                Ok(blob) => {
                    files.insert(rel.to_owned(), blob.content().to_vec());
                }
                Err(e) => {
                    failed = Some(e);
                    return git2::TreeWalkResult::Abort;
                }
            }
        }
        git2::TreeWalkResult::Ok
    })?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    Ok(Snapshot { files })
}

/// The text of `rel` (`root`-relative) in `commit`, when it has that file.
///
/// # Errors
/// [`GitError`] when the repository or the commit cannot be read.
pub(crate) fn file_at(root: &Path, commit: Oid, rel: &str) -> Result<Option<Vec<u8>>, GitError> {
    let (repo, workdir) = open(root)?;
    let path = to_workdir(root, &workdir, &[rel.to_owned()]).pop().unwrap_or_default();
    let tree = repo.find_commit(commit)?.tree()?;
    let Ok(entry) = tree.get_path(Path::new(&path)) else { return Ok(None) };
    Ok(Some(entry.to_object(&repo)?.peel_to_blob()?.content().to_vec()))
}

/// Where `path` is under `root`, `root`-relative and `/`-separated (`None`: it is not under it).
#[must_use]
pub(crate) fn relative(root: &Path, path: &Path) -> Option<String> {
    let root = root.canonicalize().ok()?;
    let path = path.canonicalize().ok()?;
    Some(path.strip_prefix(&root).ok()?.to_string_lossy().replace('\\', "/"))
}

/// The work tree's YAML files under `root`, with `staged` written over them (its new texts, its
/// deletions): what the repository holds after the render, without writing it.
///
/// # Errors
/// [`RepoError::Io`] when a file cannot be read.
pub(crate) fn work_tree(root: &Path, staged: &Staged) -> Result<Snapshot, RepoError> {
    let mut files = BTreeMap::new();
    walk(root, root, &mut files)?;
    for f in &staged.files {
        match &f.new {
            Some(text) => {
                files.insert(f.path.clone(), text.as_bytes().to_vec());
            }
            None => {
                files.remove(&f.path);
            }
        }
    }
    Ok(Snapshot::of(files))
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) -> Result<(), RepoError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io(dir))?;
        let path = entry.path();
        let name = entry.file_name();
        if name == ".git" {
            continue;
        }
        let kind = entry.file_type().map_err(io(&path))?;
        if kind.is_dir() {
            walk(root, &path, out)?;
        } else if kind.is_file() {
            let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().replace('\\', "/");
            if is_yaml(&rel) {
                out.insert(rel, std::fs::read(&path).map_err(io(&path))?);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_lists_a_directory_and_nothing_beside_it() {
        let s = Snapshot::of([
            ("a/b.yaml".to_owned(), b"1".to_vec()),
            ("a/c/d.yml".to_owned(), b"2".to_vec()),
            ("ab/e.yaml".to_owned(), b"3".to_vec()),
            ("a/readme.md".to_owned(), b"4".to_vec()),
        ]);
        let got: Vec<&str> = s.under("./a/").map(|(p, _)| p).collect();
        assert_eq!(got, ["a/b.yaml", "a/c/d.yml"]);
        assert!(s.has_dir("ab"));
        assert!(!s.has_dir("x"));
        assert_eq!(s.read("./a/b.yaml"), Some(&b"1"[..]));
        assert_eq!(s.under("").count(), 3);
    }
}
