//! A HelmRelease expanded to the objects helm-controller would install: the chart its source
//! pins, fetched once into a cache, templated by the `helm` on PATH with the values
//! helm-controller would pass ([`crate::chart::release_values`]).
//!
//! Sources, as Flux reads them: a `GitRepository` (`spec.url`, `spec.ref`: tag, branch, commit,
//! semver or name; fetched with git2 into a bare repository, and the chart's directory with its
//! `file://` dependencies exported from the commit), a `HelmRepository` (`helm pull --repo`, or
//! `oci://` for `type: oci`) and an `OCIRepository` (`helm pull oci://…`; `spec.insecure` is
//! plain HTTP). The cache (default `$XDG_CACHE_HOME/osbx/charts`, else `~/.cache/osbx/charts`)
//! holds one directory per chart and pin: `git/<url>@<ref>/<path>`, `helm/<url>/<chart>-<version>/`,
//! `oci/<url>-<tag>/`; a cache copied to an air-gapped machine is read with `--charts DIR`,
//! which never fetches. A chart whose dependencies are not built is built with `helm dependency
//! build` (offline: `file://` dependencies), or `helm dependency update` when the chart ships a
//! `Chart.lock` out of sync with its `Chart.yaml` (as OpenSandbox's `helm/opensandbox/0.2.0`
//! does).
//!
//! The release as helm-controller names it: `spec.releaseName`, else `[targetNamespace-]name`
//! shortened to 53 characters with a hash; its namespace `spec.targetNamespace`, else the
//! HelmRelease's; `helm template --kube-version` the profile's (`cluster.kubernetesVersion`);
//! the chart's `crds/` included and marked (helm-controller installs them, `install.crds:
//! Create`, and leaves them alone on upgrade unless `upgrade.crds` says otherwise); tests left
//! out unless `spec.test.enable`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

use super::flux;
use crate::chart::{Chart, release_values};
use crate::object::Object;

/// Why a chart cannot be expanded.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum ChartError {
    /// No `helm` on PATH.
    #[error(
        "charts are expanded with helm, and there is no `helm` on PATH: install helm ≥ 3.13 (https://helm.sh/docs/intro/install/), or pass --no-charts to compare the Flux objects only"
    )]
    HelmMissing,
    /// A `helm` too old (or not helm).
    #[error("{0}: helm ≥ 3.13 is needed (OCI and plain-HTTP pulls), or pass --no-charts")]
    HelmTooOld(String),
    /// A source cannot be fetched.
    #[error("{release}: cannot fetch the chart from {from} at {reference}: {reason}")]
    Fetch {
        /// The HelmRelease.
        release: String,
        /// The source (`GitRepository flux-system/opensandbox https://…`).
        from: String,
        /// The pin (tag, version, commit).
        reference: String,
        /// Why.
        reason: String,
    },
    /// An air-gapped run lacks a chart.
    #[error(
        "{release}: --charts {dir}: no {want} there (it holds a chart cache made by an online run: `osbx diff --base` fills ~/.cache/osbx/charts)"
    )]
    NotCached {
        /// The HelmRelease.
        release: String,
        /// The directory given.
        dir: String,
        /// The cache entry it needs.
        want: String,
    },
    /// What the HelmRelease names cannot be expanded.
    #[error("{release}: {reason}")]
    Release {
        /// The HelmRelease.
        release: String,
        /// Why.
        reason: String,
    },
    /// A name the change gives (a chart, a version, a URL, a reference, a path, a tree entry)
    /// that would reach outside the review's cache, or is not of its kind's form.
    #[error("{object}: {field} is refused: {reason}")]
    Refused {
        /// The object that names it (`HelmRelease flux-system/opensandbox`).
        object: String,
        /// Its field (`spec.chart.spec.chart`), or what holds it (a tree entry of a commit).
        field: String,
        /// Why.
        reason: String,
    },
    /// helm refused the chart.
    #[error("{release}: helm {step} of chart {chart} failed: {message}")]
    Helm {
        /// The HelmRelease.
        release: String,
        /// `template`, `dependency build`.
        step: String,
        /// The chart directory.
        chart: String,
        /// helm's own message.
        message: String,
    },
}

/// The `helm` on PATH (or `$OSBX_HELM`), checked to be new enough.
#[derive(Debug, Clone)]
pub(crate) struct Helm {
    program: PathBuf,
    /// `v3.22.0`.
    pub version: String,
}

impl Helm {
    /// Find helm and read its version.
    ///
    /// # Errors
    /// [`ChartError::HelmMissing`], [`ChartError::HelmTooOld`].
    pub(crate) fn find() -> Result<Self, ChartError> {
        let program = std::env::var_os("OSBX_HELM").map_or_else(|| PathBuf::from("helm"), PathBuf::from);
        let out = Command::new(&program)
            .args(["version", "--template", "{{.Version}}"])
            .output()
            .map_err(|_| ChartError::HelmMissing)?;
        let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let numbers: Vec<u64> =
            version.trim_start_matches('v').split(['.', '-', '+']).take(2).filter_map(|p| p.parse().ok()).collect();
        let shown = format!("{} {}", program.display(), if version.is_empty() { "(no version)" } else { &version });
        match numbers[..] {
            [3, minor] if minor >= 13 => {}
            [major, _] if major >= 4 => {}
            _ => return Err(ChartError::HelmTooOld(shown)),
        }
        if !out.status.success() {
            return Err(ChartError::HelmTooOld(shown));
        }
        Ok(Self { program, version })
    }

    fn command(&self) -> Command {
        Command::new(&self.program)
    }
}

/// Where a chart comes from, as its Flux source pins it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fetch {
    /// A path in a git repository at a reference.
    Git { url: String, reference: GitRef, path: String },
    /// A chart of a Helm repository (`oci`: an OCI Helm repository).
    Repo { url: String, chart: String, version: Option<String>, oci: bool, plain_http: bool },
    /// An OCI artifact.
    Oci { url: String, reference: String, plain_http: bool },
}

/// A `GitRepository`'s `spec.ref`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum GitRef {
    Tag(String),
    Branch(String),
    Commit(String),
    Semver(String),
    Name(String),
}

impl std::fmt::Display for GitRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GitRef::Tag(t) => write!(f, "tag {t}"),
            GitRef::Branch(b) => write!(f, "branch {b}"),
            GitRef::Commit(c) => write!(f, "commit {c}"),
            GitRef::Semver(s) => write!(f, "semver {s}"),
            GitRef::Name(n) => write!(f, "{n}"),
        }
    }
}

impl Fetch {
    /// The pin, for people.
    fn reference(&self) -> String {
        match self {
            Fetch::Git { reference, .. } => reference.to_string(),
            Fetch::Repo { version, .. } => format!("version {}", version.as_deref().unwrap_or("*")),
            Fetch::Oci { reference, .. } => reference.clone(),
        }
    }
}

/// A chart's identity once fetched, and how it was pinned.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct ChartId {
    /// `Chart.yaml` `name`.
    pub name: String,
    /// `Chart.yaml` `version`.
    pub version: String,
    /// `Chart.yaml` `appVersion`, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_version: Option<String>,
    /// Where it came from: `GitRepository flux-system/opensandbox (https://…) tag helm/opensandbox/0.2.2`.
    pub source: String,
}

/// A HelmRelease expanded.
#[derive(Debug, Clone)]
pub(crate) struct Expansion {
    /// The chart's name, version and app version, read from its Chart.yaml.
    pub chart: ChartId,
    /// What helm-controller would install, each with whether it comes from the chart's `crds/`.
    pub objects: Vec<(Object, bool)>,
    /// The key paths of the release's values that the chart does not read.
    pub unread: Vec<Vec<String>>,
    /// `spec.upgrade.crds` (`Skip` unless set): what an upgrade does to the chart's `crds/`.
    pub upgrade_crds: String,
}

/// Results computed once per key by whichever caller comes first (the others wait for it).
type Memo<T> = Mutex<BTreeMap<String, Arc<OnceLock<Result<T, ChartError>>>>>;

/// Chart expansion for a review: the helm, the cache, whether it may fetch.
pub(crate) struct Charts {
    helm: Helm,
    cache: PathBuf,
    /// `--charts DIR`: read only from the cache, never fetch.
    air_gapped: bool,
    kube_version: String,
    fetched: Memo<PathBuf>,
    templated: Memo<String>,
}

/// The default chart cache: `$OSBX_CHART_CACHE`, `$XDG_CACHE_HOME/osbx/charts`, `~/.cache/osbx/charts`.
#[must_use]
pub(crate) fn default_cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("OSBX_CHART_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("osbx").join("charts")
}

/// A directory name for `text` (a URL, a ref): its letters, digits, `.` and `-` kept, the rest
/// `_`, and a leading `.` made `_` (never `.`, `..` or a hidden name).
fn slug(text: &str) -> String {
    let text = text.split("://").last().unwrap_or(text);
    let mut out: String =
        text.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect();
    if out.starts_with('.') || out.is_empty() {
        out.replace_range(0..usize::from(!out.is_empty()), "_");
    }
    out
}

/// `rel` under the cache, refused (as a fetch failure) if it would leave it.
fn in_cache(cache: &Path, rel: &str) -> Result<PathBuf, GitFailure> {
    crate::refs::under(cache, rel).map_err(GitFailure::Other)
}

fn exact(version: &str) -> bool {
    semver::Version::parse(version.trim_start_matches('v')).is_ok()
}

/// helm-controller's release name: `spec.releaseName`, else `[targetNamespace-]name`, shortened
/// to 53 characters (the first 40, `-`, 12 hex digits of its SHA-256).
#[must_use]
pub(crate) fn release_name(release: &Value) -> String {
    if let Some(name) = release["spec"]["releaseName"].as_str().filter(|n| !n.is_empty()) {
        return name.to_owned();
    }
    let name = release["metadata"]["name"].as_str().unwrap_or_default();
    let full = match release["spec"]["targetNamespace"].as_str().filter(|n| !n.is_empty()) {
        Some(ns) => format!("{ns}-{name}"),
        None => name.to_owned(),
    };
    if full.len() <= 53 {
        return full;
    }
    let hash = crate::hash::sha256_hex(full.as_bytes());
    format!("{}-{}", &full[..40], &hash[..12])
}

/// The release's namespace: `spec.targetNamespace`, else the HelmRelease's.
#[must_use]
pub(crate) fn release_namespace(release: &Value) -> String {
    release["spec"]["targetNamespace"]
        .as_str()
        .filter(|n| !n.is_empty())
        .or(release["metadata"]["namespace"].as_str())
        .unwrap_or("default")
        .to_owned()
}

impl Charts {
    /// Expansion with `helm`, the cache `cache` (`air_gapped`: only read from it), templates for
    /// Kubernetes `kube_version`.
    #[must_use]
    pub(crate) fn new(helm: Helm, cache: PathBuf, air_gapped: bool, kube_version: String) -> Self {
        Self {
            helm,
            cache,
            air_gapped,
            kube_version,
            fetched: Mutex::new(BTreeMap::new()),
            templated: Mutex::new(BTreeMap::new()),
        }
    }

    /// Expand `release`, its source and values looked up among `side` (the objects of the same
    /// side of the review).
    ///
    /// # Errors
    /// [`ChartError`]: the source is not among `side` or cannot be fetched, a values source is
    /// missing, helm refuses the chart.
    pub(crate) fn expand(&self, release: &Object, side: &[&Object]) -> Result<Expansion, ChartError> {
        let id = release.id.to_string();
        let (fetch, source) = locate(&id, &release.value, side)?;
        let dir = self.fetched(&id, &fetch, &source)?;
        let meta: Value = std::fs::read_to_string(dir.join("Chart.yaml"))
            .ok()
            .and_then(|t| serde_saphyr::from_str(&t).ok())
            .unwrap_or(Value::Null);
        let chart = ChartId {
            name: meta["name"].as_str().unwrap_or_default().to_owned(),
            version: meta["version"].as_str().map_or_else(|| meta["version"].to_string(), str::to_owned),
            app_version: meta["appVersion"].as_str().map(str::to_owned),
            source: format!("{source} {}", fetch.reference()),
        };
        let (values, missing) = release_values(&release.value, &side.iter().copied());
        if !missing.is_empty() {
            return Err(ChartError::Release {
                release: id,
                reason: format!("its valuesFrom names what the repository does not hold: {}", missing.join(", ")),
            });
        }
        let unread = Chart::load(&dir).map(|c| c.unread(&values)).unwrap_or_default();
        let name = release_name(&release.value);
        let namespace = release_namespace(&release.value);
        let tests = release.value["spec"]["test"]["enable"] == true;
        let text = self.template(&id, &dir, &name, &namespace, &values, tests)?;
        let objects = split(&text, &namespace, side).map_err(|message| ChartError::Helm {
            release: id.clone(),
            step: "template".into(),
            chart: dir.display().to_string(),
            message,
        })?;
        let upgrade_crds = release.value["spec"]["upgrade"]["crds"].as_str().unwrap_or("Skip").to_owned();
        Ok(Expansion { chart, objects, unread, upgrade_crds })
    }

    /// The chart directory of `fetch`, fetched (and its dependencies built) once per run.
    fn fetched(&self, release: &str, fetch: &Fetch, source: &str) -> Result<PathBuf, ChartError> {
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
                Fetch::Git { url, reference, path } => self.git(release, url, reference, path),
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

    fn cached(&self, release: &str, rel: &str, present: bool) -> Result<Option<PathBuf>, GitFailure> {
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
    fn git(&self, release: &str, url: &str, reference: &GitRef, path: &str) -> Result<(PathBuf, PathBuf), GitFailure> {
        let rel = format!("git/{}@{}", slug(url), slug(&reference.to_string()));
        let exported = in_cache(&self.cache, &rel)?;
        let present = exported.join(path).join("Chart.yaml").is_file()
            && !matches!(reference, GitRef::Branch(_) | GitRef::Semver(_));
        if let Some(dir) = self.cached(release, &rel, present)? {
            return Ok((dir.clone(), dir.join(path)));
        }
        let other = |e: git2::Error| GitFailure::Other(e.message().to_owned());
        let bare = in_cache(&self.cache, &format!("git/{}.git", slug(url)))?;
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
    fn pull(&self, release: &str, fetch: &Fetch) -> Result<(PathBuf, PathBuf), GitFailure> {
        let (rel, chart, mut args, pinned) = match fetch {
            Fetch::Repo { url, chart, version, oci, plain_http } => {
                let v = version.clone().unwrap_or_else(|| "latest".into());
                let rel = format!("helm/{}/{chart}-{}", slug(url), slug(&v));
                let mut args = if *oci {
                    vec![format!("{}/{chart}", url.trim_end_matches('/'))]
                } else {
                    vec![chart.clone(), format!("--repo={url}")]
                };
                if let Some(version) = version {
                    args.push(format!("--version={version}"));
                }
                if *plain_http {
                    args.push("--plain-http".into());
                }
                (rel, chart.clone(), args, version.as_deref().is_some_and(exact))
            }
            Fetch::Oci { url, reference, plain_http } => {
                let chart = url.trim_end_matches('/').rsplit('/').next().unwrap_or_default().to_owned();
                let rel = format!("oci/{}-{}", slug(url), slug(reference));
                let mut args = match reference.split_once(' ') {
                    Some(("digest", digest)) => vec![format!("{url}@{digest}")],
                    Some((_, version)) => vec![url.clone(), format!("--version={version}")],
                    None => vec![url.clone()],
                };
                if *plain_http {
                    args.push("--plain-http".into());
                }
                let pinned = reference.starts_with("tag ") || reference.starts_with("digest ");
                (rel, chart, args, pinned)
            }
            Fetch::Git { .. } => unreachable!("git sources are fetched with git"),
        };
        let target = in_cache(&self.cache, &rel)?;
        let present = pinned && target.join(&chart).join("Chart.yaml").is_file();
        if let Some(dir) = self.cached(release, &rel, present)? {
            return Ok((dir.clone(), dir.join(&chart)));
        }
        let staging = in_cache(&self.cache, &format!("{rel}.tmp{}", std::process::id()))?;
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging).map_err(|e| GitFailure::Other(format!("{}: {e}", staging.display())))?;
        args.splice(0..0, ["pull".to_owned()]);
        args.extend(["--untar".into(), format!("--untardir={}", staging.display())]);
        let out = self.helm.command().args(&args).output().map_err(|e| GitFailure::Other(format!("helm pull: {e}")))?;
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
        if !staging.join(&chart).join("Chart.yaml").is_file() {
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
    fn dependencies(&self, release: &str, root: &Path, dir: &Path) -> Result<(), ChartError> {
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
        let run = |verb: &str| self.helm.command().args(["dependency", verb, "--skip-refresh"]).arg(dir).output();
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

    /// `helm template`, once per chart, release, namespace and values.
    fn template(
        &self,
        release: &str,
        dir: &Path,
        name: &str,
        namespace: &str,
        values: &Value,
        tests: bool,
    ) -> Result<String, ChartError> {
        let key = format!("{}\n{name}\n{namespace}\n{tests}\n{values}", dir.display());
        let cell =
            self.templated.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(key).or_default().clone();
        cell.get_or_init(|| {
            let fail = |message: String| ChartError::Helm {
                release: release.to_owned(),
                step: "template".into(),
                chart: dir.display().to_string(),
                message,
            };
            let file = tempfile_in(&self.cache, &values.to_string()).map_err(|e| fail(e.to_string()))?;
            let mut cmd = self.helm.command();
            cmd.arg("template")
                .arg(name)
                .arg(dir)
                .args(["--namespace", namespace, "--kube-version", &self.kube_version, "--include-crds"])
                .arg("--values")
                .arg(file.path());
            if !tests {
                cmd.arg("--skip-tests");
            }
            let out = cmd.output().map_err(|e| fail(e.to_string()))?;
            if !out.status.success() {
                return Err(fail(String::from_utf8_lossy(&out.stderr).trim().to_owned()));
            }
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        })
        .clone()
    }
}

enum GitFailure {
    Chart(ChartError),
    Other(String),
}

/// A file holding `text`, deleted when dropped.
fn tempfile_in(dir: &Path, text: &str) -> std::io::Result<TempFile> {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    std::fs::create_dir_all(dir)?;
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!(".values-{}-{n}.json", std::process::id()));
    std::fs::write(&path, text)?;
    Ok(TempFile(path))
}

struct TempFile(PathBuf);

impl TempFile {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The highest tag of `repo` whose version matches `range` (Flux's `spec.ref.semver`).
fn highest_tag(repo: &git2::Repository, range: &str) -> Result<String, git2::Error> {
    let req = semver::VersionReq::parse(range).map_err(|e| git2::Error::from_str(&format!("semver {range}: {e}")))?;
    let tags = repo.tag_names(None)?;
    tags.iter()
        .filter_map(|t| t.ok().flatten())
        .filter_map(|t| semver::Version::parse(t.trim_start_matches('v')).ok().map(|v| (v, t.to_owned())))
        .filter(|(v, _)| req.matches(v))
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, t)| t)
        .ok_or_else(|| git2::Error::from_str(&format!("no tag matches semver {range}")))
}

/// Why a chart's tree cannot be exported.
enum Export {
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
fn export(repo: &git2::Repository, tree: &git2::Tree<'_>, path: &str, to: &Path) -> Result<(), Export> {
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

fn write_tree(repo: &git2::Repository, tree: &git2::Tree<'_>, to: &Path, shown: &str) -> Result<(), Export> {
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

/// Where `release`'s chart comes from: its source among `side`, and that source named. Every
/// name the HelmRelease and its source give is the change's and checked by its kind's rule
/// ([`crate::refs`]) before it becomes a path or an argument of git or helm.
fn locate(release: &str, hr: &Value, side: &[&Object]) -> Result<(Fetch, String), ChartError> {
    let spec = &hr["spec"];
    let ns = hr["metadata"]["namespace"].as_str().unwrap_or_default();
    let refusal = |reason: String| ChartError::Release { release: release.to_owned(), reason };
    let refused = |object: &str, field: &str, reason: crate::refs::Refusal| ChartError::Refused {
        object: object.to_owned(),
        field: field.to_owned(),
        reason,
    };
    let (source_ref, chart) = if spec["chartRef"].is_object() {
        (&spec["chartRef"], None)
    } else {
        (&spec["chart"]["spec"]["sourceRef"], spec["chart"]["spec"]["chart"].as_str())
    };
    let kind = source_ref["kind"].as_str().unwrap_or_default();
    let name = source_ref["name"].as_str().unwrap_or_default();
    let source_ns = source_ref["namespace"].as_str().unwrap_or(ns);
    let shown = format!("{kind} {source_ns}/{name}");
    let source = side
        .iter()
        .find(|o| o.id.kind() == kind && o.id.name == name && o.id.namespace.as_deref() == Some(source_ns))
        .ok_or_else(|| {
            refusal(format!("its chart source {shown} is not in the repository: its chart cannot be expanded"))
        })?;
    let s = &source.value["spec"];
    let url = s["url"].as_str().unwrap_or_default().to_owned();
    let schemes: &[&str] = match kind {
        "GitRepository" => &["http://", "https://", "ssh://"],
        "HelmRepository" if s["type"] != "oci" => &["http://", "https://"],
        _ => &["oci://"],
    };
    crate::refs::url(&url, schemes).map_err(|r| refused(&shown, "spec.url", r))?;
    let shown = format!("{shown} ({url})");
    let plain_http = s["insecure"] == true;
    let fetch = match kind {
        "GitRepository" => {
            let r = &s["ref"];
            let check = |field: &str, value: &str, rule: fn(&str) -> Result<(), crate::refs::Refusal>| {
                rule(value).map_err(|why| refused(&shown, &format!("spec.ref.{field}"), why))
            };
            let reference = if let Some(c) = r["commit"].as_str() {
                check("commit", c, crate::refs::commit)?;
                GitRef::Commit(c.to_owned())
            } else if let Some(n) = r["name"].as_str() {
                check("name", n, crate::refs::git_ref)?;
                if !n.starts_with("refs/") {
                    return Err(refused(&shown, "spec.ref.name", "a reference name starts with refs/".into()));
                }
                GitRef::Name(n.to_owned())
            } else if let Some(v) = r["semver"].as_str() {
                check("semver", v, crate::refs::version)?;
                GitRef::Semver(v.to_owned())
            } else if let Some(t) = r["tag"].as_str() {
                check("tag", t, crate::refs::git_ref)?;
                GitRef::Tag(t.to_owned())
            } else {
                let b = r["branch"].as_str().unwrap_or("master");
                check("branch", b, crate::refs::git_ref)?;
                GitRef::Branch(b.to_owned())
            };
            let path = chart.ok_or_else(|| refusal("names no chart path in its GitRepository".into()))?;
            let path = crate::refs::repo_path(path).map_err(|r| refused(release, "spec.chart.spec.chart", r))?;
            Fetch::Git { url, reference, path }
        }
        "HelmRepository" => {
            let chart = chart.ok_or_else(|| refusal("names no chart".into()))?.to_owned();
            crate::refs::chart_name(&chart).map_err(|r| refused(release, "spec.chart.spec.chart", r))?;
            let version = spec["chart"]["spec"]["version"].as_str().filter(|v| *v != "*").map(str::to_owned);
            if let Some(v) = &version {
                crate::refs::version(v).map_err(|r| refused(release, "spec.chart.spec.version", r))?;
            }
            Fetch::Repo { url, chart, version, oci: s["type"] == "oci", plain_http }
        }
        "OCIRepository" => {
            let chart = url.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
            crate::refs::chart_name(chart).map_err(|r| refused(&shown, "spec.url (its last segment, the chart)", r))?;
            let r = &s["ref"];
            let reference = if let Some(d) = r["digest"].as_str() {
                crate::refs::digest(d).map_err(|why| refused(&shown, "spec.ref.digest", why))?;
                format!("digest {d}")
            } else if let Some(v) = r["semver"].as_str() {
                crate::refs::version(v).map_err(|why| refused(&shown, "spec.ref.semver", why))?;
                format!("semver {v}")
            } else {
                let t = r["tag"].as_str().unwrap_or("latest");
                crate::refs::oci_tag(t).map_err(|why| refused(&shown, "spec.ref.tag", why))?;
                format!("tag {t}")
            };
            Fetch::Oci { url, reference, plain_http }
        }
        other => {
            return Err(refusal(format!(
                "its chart source kind {other} is not expanded (GitRepository, HelmRepository and OCIRepository are)"
            )));
        }
    };
    Ok((fetch, shown))
}

/// helm's output as objects: each document's `# Source:` says whether it comes from `crds/`;
/// namespaced objects without a namespace land in the release's, as helm installs them.
fn split(text: &str, namespace: &str, side: &[&Object]) -> Result<Vec<(Object, bool)>, String> {
    let mut out = Vec::new();
    for doc in text.split("\n---") {
        let from_crds = doc
            .lines()
            .find_map(|l| l.strip_prefix("# Source: "))
            .is_some_and(|s| s.contains("/crds/") && !s.contains("/templates/"));
        for o in flux::objects(doc)? {
            out.push((o, from_crds));
        }
    }
    let crds: Vec<Value> = out
        .iter()
        .map(|(o, _)| &o.value)
        .chain(side.iter().map(|o| &o.value))
        .filter(|v| v["kind"] == "CustomResourceDefinition")
        .cloned()
        .collect();
    let crds: Vec<&Value> = crds.iter().collect();
    for (o, _) in &mut out {
        if o.id.namespace.is_none() && flux::namespaced(&o.value, &crds) {
            o.value["metadata"]["namespace"] = Value::String(namespace.to_owned());
            o.id.namespace = Some(namespace.to_owned());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn release_names_are_helm_controllers() {
        let hr = |name: &str, target: Option<&str>, release: Option<&str>| json!({"metadata": {"name": name, "namespace": "n"}, "spec": {"targetNamespace": target, "releaseName": release}});
        assert_eq!(release_name(&hr("a", None, None)), "a");
        assert_eq!(release_name(&hr("a", Some("t"), None)), "t-a");
        assert_eq!(release_name(&hr("a", Some("t"), Some("r"))), "r");
        let long = release_name(&hr(&"x".repeat(50), Some("target"), None));
        assert_eq!(long.len(), 53);
        assert!(long.starts_with(&format!("target-{}", "x".repeat(33))), "{long}");
        assert_eq!(&long[40..41], "-");
        assert_eq!(release_namespace(&hr("a", None, None)), "n");
        assert_eq!(release_namespace(&hr("a", Some("t"), None)), "t");
    }

    #[test]
    fn paths_join_like_file_dependencies() {
        assert_eq!(
            crate::repo::join("kubernetes/charts/opensandbox", "../opensandbox-server"),
            "kubernetes/charts/opensandbox-server"
        );
        assert_eq!(crate::repo::join("a", "./b"), "a/b");
        assert_eq!(slug("https://github.com/a/b.git"), "github.com_a_b.git");
    }
}
