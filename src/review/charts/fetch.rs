//! Fetching a chart into the cache (git, a Helm repository, an OCI registry), once per pin, and
//! building its dependencies.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{ChartError, Charts, Fetch};
use crate::flux::source::{GitRef, OciRef};

impl Fetch {
    /// Its directory in the cache, one per source and pin: a readable name (`git/<url>@<ref>`,
    /// `helm/<url>/<chart>-<version>`, `oci/<url>-<ref>`, each made a path by [`slug`]) and, next
    /// to it, a digest of the source's kind and the whole pin ([`Fetch::identity`]): two sources
    /// whose readable names are alike (`http://` and `https://`, `a/b` and `a_b`, an OCI and an
    /// HTTP repository on the same path) never share an entry.
    pub(super) fn entry(&self) -> String {
        let digest = short_digest(&self.identity());
        match self {
            Fetch::Git { url, reference, .. } => format!("git/{}@{}-{digest}", slug(url), slug(&reference.to_string())),
            Fetch::Repo { url, chart, version, .. } => {
                format!("helm/{}/{chart}-{}-{digest}", slug(url), slug(version.asked().unwrap_or("latest")))
            }
            Fetch::Oci { url, reference, .. } => format!("oci/{}-{}-{digest}", slug(url), slug(&reference.to_string())),
        }
    }

    /// Everything that decides what is fetched, unabridged: the source's kind, its whole URL and
    /// transport, the chart and the pin (one field per line; none of them holds a line break).
    fn identity(&self) -> String {
        match self {
            Fetch::Git { url, reference, path } => format!("git\n{url}\n{reference}\n{path}"),
            Fetch::Repo { url, chart, version, oci, plain_http } => {
                let kind = if *oci { "helm-oci" } else { "helm" };
                format!("{kind}\n{url}\n{chart}\n{}\n{plain_http}", version.asked().unwrap_or("*"))
            }
            Fetch::Oci { url, reference, plain_http } => format!("oci\n{url}\n{reference}\n{plain_http}"),
        }
    }

    /// The chart's directory inside [`Fetch::entry`].
    pub(super) fn chart_dir(&self) -> &str {
        match self {
            Fetch::Git { path, .. } => path,
            Fetch::Repo { chart, .. } => chart,
            Fetch::Oci { url, .. } => url.trim_end_matches('/').rsplit('/').next().unwrap_or_default(),
        }
    }
}

impl Charts {
    /// The chart directory of `fetch`, fetched (and its dependencies built) once per run.
    pub(super) fn fetched(&self, release: &str, fetch: &Fetch, source: &str) -> Result<PathBuf, ChartError> {
        let key = format!("{fetch:?}");
        let cell =
            self.fetched.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(key).or_default().clone();
        cell.get_or_init(|| {
            let fail = |reason: String| ChartError::Fetch {
                release: release.to_owned(),
                from: source.to_owned(),
                reference: fetch.reference(),
                reason,
            };
            let (root, dir) = match fetch {
                Fetch::Git { url, reference, path } => self.git(release, fetch, url, reference, path),
                Fetch::Repo { .. } | Fetch::Oci { .. } => self.pull(release, fetch),
            }
            .map_err(|e| match e {
                GitFailure::Chart(e) => e,
                GitFailure::Other(reason) => fail(reason),
            })?;
            self.dependencies(release, &root, &dir)?;
            Ok(dir)
        })
        .clone()
    }

    pub(super) fn cached(&self, release: &str, rel: &str, present: bool) -> Result<Option<PathBuf>, GitFailure> {
        let dir = self.cache.join(rel);
        if present {
            return Ok(Some(dir));
        }
        if self.air_gapped {
            return Err(GitFailure::Chart(ChartError::NotCached {
                release: release.to_owned(),
                dir: self.cache.display().to_string(),
                want: rel.to_owned(),
            }));
        }
        Ok(None)
    }

    /// A chart of a git repository: fetched by the user's git into a bare repository of the
    /// cache (its credentials and proxies apply, as to `osbx rollout`'s push), its directory
    /// and the `file://` dependencies it names exported from the commit the reference names
    /// (read with libgit2).
    pub(super) fn git(
        &self,
        release: &str,
        fetch: &Fetch,
        url: &str,
        reference: &GitRef,
        path: &str,
    ) -> Result<(PathBuf, PathBuf), GitFailure> {
        let rel = fetch.entry();
        let exported = in_cache(&self.cache, &rel)?;
        let present = exported.join(path).join("Chart.yaml").is_file() && !reference.floats();
        if let Some(dir) = self.cached(release, &rel, present)? {
            return Ok((dir.clone(), dir.join(path)));
        }
        let other = |e: git2::Error| GitFailure::Other(e.message().to_owned());
        // One bare repository per whole URL (its readable name and a digest of the URL).
        let bare = in_cache(&self.cache, &format!("git/{}-{}.git", slug(url), short_digest(url)))?;
        std::fs::create_dir_all(&bare).map_err(|e| GitFailure::Other(format!("{}: {e}", bare.display())))?;
        let repo = git2::Repository::open_bare(&bare).or_else(|_| git2::Repository::init_bare(&bare)).map_err(other)?;
        let refspecs: Vec<String> = match reference {
            GitRef::Tag(t) => vec![format!("+refs/tags/{t}:refs/tags/{t}")],
            GitRef::Branch(b) => vec![format!("+refs/heads/{b}:refs/heads/{b}")],
            GitRef::Name(n) => vec![format!("+{n}:{n}")],
            GitRef::Commit(_) | GitRef::Semver(_) => {
                vec!["+refs/tags/*:refs/tags/*".to_owned(), "+refs/heads/*:refs/heads/*".to_owned()]
            }
        };
        let known = match reference {
            GitRef::Commit(c) => git2::Oid::from_str(c).ok().and_then(|id| repo.find_commit(id).ok()).is_some(),
            _ => false,
        };
        if !known {
            crate::repo::fetch(&bare, url, &refspecs).map_err(GitFailure::Other)?;
        }
        let commit = match reference {
            GitRef::Tag(t) => repo.revparse_single(&format!("refs/tags/{t}")).and_then(|o| o.peel_to_commit()),
            GitRef::Branch(b) => repo.revparse_single(&format!("refs/heads/{b}")).and_then(|o| o.peel_to_commit()),
            GitRef::Name(n) => repo.revparse_single(n).and_then(|o| o.peel_to_commit()),
            GitRef::Commit(c) => repo.revparse_single(c).and_then(|o| o.peel_to_commit()),
            GitRef::Semver(range) => highest_tag(&repo, range)
                .and_then(|t| repo.revparse_single(&format!("refs/tags/{t}"))?.peel_to_commit()),
        }
        .map_err(|e| GitFailure::Other(format!("{reference}: {}", e.message())))?;
        let tree = commit.tree().map_err(other)?;
        let staging = in_cache(&self.cache, &format!("{rel}.tmp{}", std::process::id()))?;
        let _ = std::fs::remove_dir_all(&staging);
        if let Err(e) = export(&repo, &tree, path, &staging) {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(match e {
                Export::Refused(reason) => GitFailure::Chart(ChartError::Refused {
                    object: format!("the chart of {release}"),
                    field: format!("the tree of commit {}", commit.id()),
                    reason,
                }),
                Export::Other(reason) => GitFailure::Other(reason),
            });
        }
        if !staging.join(path).join("Chart.yaml").is_file() {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(GitFailure::Other(format!("{path} holds no Chart.yaml at commit {}", commit.id())));
        }
        let _ = std::fs::remove_dir_all(&exported);
        std::fs::rename(&staging, &exported).map_err(|e| GitFailure::Other(format!("{}: {e}", exported.display())))?;
        Ok((exported.clone(), exported.join(path)))
    }

    /// A chart of a Helm or OCI repository, pulled by helm into the cache.
    pub(super) fn pull(&self, release: &str, fetch: &Fetch) -> Result<(PathBuf, PathBuf), GitFailure> {
        let (rel, chart) = (fetch.entry(), fetch.chart_dir());
        // Options in their `--name=value` form; the chart reference, the one positional, after
        // `--`, so that nothing the change names is read as an option.
        let (mut options, chart_ref) = match fetch {
            Fetch::Repo { url, chart, version, oci, plain_http } => {
                let (mut options, chart_ref) = if *oci {
                    (Vec::new(), format!("{}/{chart}", url.trim_end_matches('/')))
                } else {
                    (vec![format!("--repo={url}")], chart.clone())
                };
                if let Some(version) = version.asked() {
                    options.push(format!("--version={version}"));
                }
                if *plain_http {
                    options.push("--plain-http".into());
                }
                (options, chart_ref)
            }
            Fetch::Oci { url, reference, plain_http } => {
                let (mut options, chart_ref) = match reference {
                    OciRef::Digest(digest) => (Vec::new(), format!("{url}@{digest}")),
                    OciRef::Semver(version) | OciRef::Tag(version) => {
                        (vec![format!("--version={version}")], url.clone())
                    }
                };
                if *plain_http {
                    options.push("--plain-http".into());
                }
                (options, chart_ref)
            }
            Fetch::Git { .. } => unreachable!("git sources are fetched with git"),
        };
        let target = in_cache(&self.cache, &rel)?;
        let present = !fetch.floats() && target.join(chart).join("Chart.yaml").is_file();
        if let Some(dir) = self.cached(release, &rel, present)? {
            return Ok((dir.clone(), dir.join(chart)));
        }
        let staging = in_cache(&self.cache, &format!("{rel}.tmp{}", std::process::id()))?;
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging).map_err(|e| GitFailure::Other(format!("{}: {e}", staging.display())))?;
        options.push("--untar".into());
        let mut untardir = std::ffi::OsString::from("--untardir=");
        untardir.push(&staging);
        let out = self
            .helm
            .command()
            .arg("pull")
            .args(&options)
            .arg(untardir)
            .arg("--")
            .arg(chart_ref)
            .output()
            .map_err(|e| GitFailure::Other(format!("helm pull: {e}")))?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(GitFailure::Other(format!("helm pull: {}", String::from_utf8_lossy(&out.stderr).trim())));
        }
        // What helm unpacked is read by helm template and osbx: only directories and files.
        if let Err(reason) = crate::refs::plain_tree(&staging) {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(GitFailure::Chart(ChartError::Refused {
                object: format!("the chart of {release}"),
                field: "what helm pull unpacked".into(),
                reason,
            }));
        }
        if !staging.join(chart).join("Chart.yaml").is_file() {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(GitFailure::Other(format!("helm pull unpacked no chart named {chart}")));
        }
        let _ = std::fs::remove_dir_all(&target);
        std::fs::rename(&staging, &target).map_err(|e| GitFailure::Other(format!("{}: {e}", target.display())))?;
        Ok((target.clone(), target.join(chart)))
    }

    /// Build a chart's dependencies once (a marker file says it was done); a `file://`
    /// dependency must stay inside `root`, the cache entry the chart was fetched into (helm
    /// would read it from wherever it points).
    pub(super) fn dependencies(&self, release: &str, root: &Path, dir: &Path) -> Result<(), ChartError> {
        let marker = dir.join(".osbx-dependencies");
        let meta: Value = std::fs::read_to_string(dir.join("Chart.yaml"))
            .ok()
            .and_then(|t| serde_saphyr::from_str(&t).ok())
            .unwrap_or(Value::Null);
        let inside = dir.strip_prefix(root).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        for dep in meta["dependencies"].as_array().into_iter().flatten() {
            if let Some(rel) = dep["repository"].as_str().and_then(|r| r.strip_prefix("file://"))
                && crate::refs::join_within(&inside, rel).is_none()
            {
                return Err(ChartError::Refused {
                    object: format!("the chart of {release}"),
                    field: "Chart.yaml dependencies[].repository".into(),
                    reason: format!("file://{rel} points outside the chart's source"),
                });
            }
        }
        let names: Vec<&str> =
            meta["dependencies"].as_array().into_iter().flatten().filter_map(|d| d["name"].as_str()).collect();
        // Built when `charts/` holds each one, unpacked or as the archive `helm package` and
        // `helm dependency build` leave (a chart pulled from a repository comes so).
        let vendored: Vec<String> = dir
            .join("charts")
            .read_dir()
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let built = |name: &str| {
            dir.join("charts").join(name).join("Chart.yaml").is_file()
                || vendored.iter().any(|f| {
                    f.strip_prefix(name).and_then(|rest| rest.strip_prefix('-')).is_some_and(|rest| {
                        rest.starts_with(|c: char| c.is_ascii_digit())
                            && Path::new(rest).extension().is_some_and(|e| e.eq_ignore_ascii_case("tgz"))
                    })
                })
        };
        if marker.is_file() || names.iter().all(|n| built(n)) {
            return Ok(());
        }
        if self.air_gapped {
            return Err(ChartError::NotCached {
                release: release.to_owned(),
                dir: self.cache.display().to_string(),
                want: format!("{} with its dependencies built", dir.display()),
            });
        }
        let run = |verb: &str| self.helm.command().args(["dependency", verb, "--skip-refresh", "--"]).arg(dir).output();
        let fail = |step: &str, message: String| ChartError::Helm {
            release: release.to_owned(),
            step: format!("dependency {step}"),
            chart: dir.display().to_string(),
            message,
        };
        let out = run("build").map_err(|e| fail("build", e.to_string()))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            if !stderr.contains("out of sync") {
                return Err(fail("build", stderr));
            }
            // The chart ships a Chart.lock that does not match its Chart.yaml: resolve again.
            let out = run("update").map_err(|e| fail("update", e.to_string()))?;
            if !out.status.success() {
                return Err(fail("update", String::from_utf8_lossy(&out.stderr).trim().to_owned()));
            }
        }
        let _ = std::fs::write(marker, "");
        Ok(())
    }
}

/// A directory name for `text` (a URL, a ref): its letters, digits, `.` and `-` kept, the rest
/// `_`, and a leading `.` made `_` (never `.`, `..` or a hidden name).
pub(super) fn slug(text: &str) -> String {
    let text = text.split("://").last().unwrap_or(text);
    let mut out: String =
        text.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect();
    if out.starts_with('.') || out.is_empty() {
        out.replace_range(0..usize::from(!out.is_empty()), "_");
    }
    out
}

/// The first 16 hex digits of `text`'s SHA-256: what tells apart cache entries whose [`slug`]s
/// are alike.
fn short_digest(text: &str) -> String {
    crate::hash::sha256_hex(text.as_bytes())[..16].to_owned()
}

/// `rel` under the cache, refused (as a fetch failure) if it would leave it.
pub(super) fn in_cache(cache: &Path, rel: &str) -> Result<PathBuf, GitFailure> {
    crate::refs::under(cache, rel).map_err(GitFailure::Other)
}

pub(super) enum GitFailure {
    Chart(ChartError),
    Other(String),
}

/// The tag of `repo` Flux resolves the range to (`spec.ref.semver`, with Flux's rules:
/// [`crate::flux::versions`]).
pub(super) fn highest_tag(repo: &git2::Repository, range: &str) -> Result<String, git2::Error> {
    let constraint = crate::flux::versions::Constraint::parse(range)
        .map_err(|e| git2::Error::from_str(&format!("semver {range}: {e}")))?;
    let tags = repo.tag_names(None)?;
    let names: Vec<&str> = tags.iter().filter_map(|t| t.ok().flatten()).collect();
    crate::flux::versions::highest(&constraint, names)
        .map(str::to_owned)
        .ok_or_else(|| git2::Error::from_str(&format!("no tag matches semver {range}")))
}

/// Why a chart's tree cannot be exported.
pub(super) enum Export {
    /// The tree holds what must not be written (a `..` entry, a symbolic link, a dependency
    /// outside the repository).
    Refused(String),
    /// git or the file system failed.
    Other(String),
}

/// Export the directory `path` of `tree` into `to` (keeping its place in the tree), and, for each
/// `file://` dependency its `Chart.yaml` names, that directory too. The tree is the change's:
/// every entry name is checked before it becomes a path, symbolic links are refused, files are
/// created new (never through what is already there), and a dependency may not climb out of the
/// repository.
pub(super) fn export(repo: &git2::Repository, tree: &git2::Tree<'_>, path: &str, to: &Path) -> Result<(), Export> {
    let mut pending = vec![path.to_owned()];
    let mut done = Vec::new();
    while let Some(dir) = pending.pop() {
        if done.contains(&dir) {
            continue;
        }
        let entry = tree.get_path(Path::new(&dir)).map_err(|e| Export::Other(format!("{dir}: {}", e.message())))?;
        let sub = entry
            .to_object(repo)
            .and_then(|o| o.peel_to_tree())
            .map_err(|e| Export::Other(format!("{dir}: {}", e.message())))?;
        let target = crate::refs::under(to, &dir).map_err(Export::Refused)?;
        write_tree(repo, &sub, &target, &dir)?;
        let meta: Value = std::fs::read_to_string(target.join("Chart.yaml"))
            .ok()
            .and_then(|t| serde_saphyr::from_str(&t).ok())
            .unwrap_or(Value::Null);
        for dep in meta["dependencies"].as_array().into_iter().flatten() {
            if let Some(rel) = dep["repository"].as_str().and_then(|r| r.strip_prefix("file://")) {
                let joined = crate::refs::join_within(&dir, rel).ok_or_else(|| {
                    Export::Refused(format!(
                        "{dir}/Chart.yaml: the dependency file://{rel} points outside the repository"
                    ))
                })?;
                pending.push(joined);
            }
        }
        done.push(dir);
    }
    Ok(())
}

pub(super) fn write_tree(repo: &git2::Repository, tree: &git2::Tree<'_>, to: &Path, shown: &str) -> Result<(), Export> {
    let other = |e: git2::Error| Export::Other(e.message().to_owned());
    std::fs::create_dir_all(to).map_err(|e| Export::Other(format!("{}: {e}", to.display())))?;
    for entry in tree {
        let name = std::str::from_utf8(entry.name_bytes())
            .map_err(|_| Export::Refused(format!("{shown}: a tree entry's name is not UTF-8")))?;
        crate::refs::tree_entry(name).map_err(|why| Export::Refused(format!("{shown}: {why}")))?;
        let target = to.join(name);
        let at = format!("{shown}/{name}");
        if entry.filemode() == i32::from(git2::FileMode::Link) {
            return Err(Export::Refused(format!("{at} is a symbolic link")));
        }
        match entry.kind() {
            Some(git2::ObjectType::Tree) => {
                let sub = entry.to_object(repo).and_then(|o| o.peel_to_tree()).map_err(other)?;
                write_tree(repo, &sub, &target, &at)?;
            }
            Some(git2::ObjectType::Blob) => {
                let blob = entry.to_object(repo).and_then(|o| o.peel_to_blob()).map_err(other)?;
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&target)
                    .map_err(|e| Export::Refused(format!("{at}: {e} (a tree entry written twice?)")))?;
                std::io::Write::write_all(&mut file, blob.content())
                    .map_err(|e| Export::Other(format!("{}: {e}", target.display())))?;
            }
            // A submodule (a commit) holds nothing of the chart.
            _ => {}
        }
    }
    Ok(())
}
