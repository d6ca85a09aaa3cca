//! A HelmRelease expanded to the objects helm-controller would install: the chart its source
//! pins, fetched once into a cache, templated by the `helm` on PATH with the values
//! helm-controller would pass ([`crate::flux::release::release_values`]).
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
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

mod cache;
mod fetch;
mod source;
mod template;

pub(crate) use cache::{CacheRoot, default_cache};

use crate::chart::Chart;
use crate::flux::release::{release_name, release_namespace, release_values};
use crate::object::Object;
use source::{Fetch, locate};

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
    /// The chart cache cannot be used.
    #[error("the chart cache {dir}: {reason}")]
    Cache {
        /// The directory.
        dir: String,
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
    /// The chart's own default values (its `values.yaml`).
    pub defaults: Arc<Value>,
    /// `spec.upgrade.crds` (`Skip` unless set): what an upgrade does to the chart's `crds/`.
    pub upgrade_crds: String,
}

/// Chart expansion for every Kubernetes version a run renders for: the helm and the cache
/// shared, one [`Charts`] per version (a fleet's clusters share fetched charts and templates);
/// a private cache of the run's own (no home to keep one in) lives as long as this.
pub(crate) struct Expanders {
    helm: Helm,
    cache: PathBuf,
    air_gapped: bool,
    by_version: BTreeMap<String, Charts>,
    _private: Option<tempfile::TempDir>,
}

impl Expanders {
    /// Open `cache` (`air_gapped`: only read from it), then find helm with `helm`.
    ///
    /// # Errors
    /// [`ChartError`]: the cache cannot be made, or helm found.
    pub(crate) fn open(
        cache: &CacheRoot,
        air_gapped: bool,
        helm: impl FnOnce() -> Result<Helm, ChartError>,
    ) -> Result<Self, ChartError> {
        let (cache, private) = cache.open()?;
        Ok(Self { helm: helm()?, cache, air_gapped, by_version: BTreeMap::new(), _private: private })
    }

    /// The helm charts are expanded with.
    #[must_use]
    pub(crate) fn helm(&self) -> &Helm {
        &self.helm
    }

    /// The expander of templates for Kubernetes `kube_version`.
    pub(crate) fn for_version(&mut self, kube_version: &str) -> &Charts {
        let (helm, cache, air_gapped) = (&self.helm, &self.cache, self.air_gapped);
        self.by_version
            .entry(kube_version.to_owned())
            .or_insert_with(|| Charts::new(helm.clone(), cache.clone(), air_gapped, kube_version.to_owned()))
    }
}

/// Results computed once per key by whichever caller comes first (the others wait for it).
type Memo<T> = Mutex<BTreeMap<String, Arc<OnceLock<Result<T, ChartError>>>>>;
/// A chart's identity and the keys of the given values it does not read.
/// A chart's identity, the release values it does not read, and its default values.
type Described = (ChartId, Vec<Vec<String>>, Arc<Value>);
/// The objects of helm's output, each with whether it comes from the chart's `crds/`.
type Parsed = Arc<Vec<(Object, bool)>>;

/// Chart expansion for a review: the helm, the cache, whether it may fetch.
pub(crate) struct Charts {
    helm: Helm,
    cache: PathBuf,
    /// `--charts DIR`: read only from the cache, never fetch.
    air_gapped: bool,
    kube_version: String,
    fetched: Memo<PathBuf>,
    templated: Memo<String>,
    /// A fetched chart's identity and the keys of given values it does not read, by chart
    /// directory and values (a fleet's clusters mostly share both; reading a chart's templates
    /// for each would cost more than the render).
    described: Mutex<BTreeMap<String, Described>>,
    /// helm's output → its objects, before the release namespace is given (the same output is
    /// parsed once per run).
    parsed: Mutex<std::collections::HashMap<String, Parsed>>,
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
            described: Mutex::new(BTreeMap::new()),
            parsed: Mutex::default(),
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
        // The release's name and namespace are checked first: nothing is fetched for a release
        // helm could not be given.
        let (name, namespace) = release_identity(&id, &release.value)?;
        let (fetch, source) = locate(&id, &release.value, side)?;
        let dir = self.fetched(&id, &fetch, &source)?;
        let (values, missing) = release_values(&release.value, &side.iter().copied());
        if !missing.is_empty() {
            return Err(ChartError::Release {
                release: id,
                reason: format!("its valuesFrom names what the repository does not hold: {}", missing.join(", ")),
            });
        }
        let key = format!("{}\0{source} {}\0{values}", dir.display(), fetch.reference());
        let described = self.described.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key).cloned();
        let (chart, unread, defaults) = described.unwrap_or_else(|| {
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
            let loaded = Chart::load(&dir).ok();
            let unread = loaded.as_ref().map(|c| c.unread(&values)).unwrap_or_default();
            let defaults = Arc::new(loaded.map_or(Value::Null, Chart::into_values));
            let described = (chart, unread, defaults);
            self.described.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key, described.clone());
            described
        });
        let tests = release.value["spec"]["test"]["enable"] == true;
        let text = self.template(&id, &dir, &name, &namespace, &values, tests)?;
        let known = self.parsed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&text).cloned();
        let parsed = if let Some(parsed) = known {
            parsed
        } else {
            let parsed = Arc::new(template::parse(&text).map_err(|message| ChartError::Helm {
                release: id.clone(),
                step: "template".into(),
                chart: dir.display().to_string(),
                message,
            })?);
            self.parsed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(text, parsed.clone());
            parsed
        };
        let objects = template::place(parsed.as_ref().clone(), &namespace, side);
        let upgrade_crds = release.value["spec"]["upgrade"]["crds"].as_str().unwrap_or("Skip").to_owned();
        Ok(Expansion { chart, objects, unread, defaults, upgrade_crds })
    }
}

/// The release name and namespace helm-controller would use for `release`, each checked by its
/// kind's rule before it becomes an argument of helm ([`crate::refs::release_name`],
/// [`crate::refs::namespace`]); a refusal names the field the value came from.
fn release_identity(id: &str, release: &Value) -> Result<(String, String), ChartError> {
    let spec = &release["spec"];
    let set = |field: &str| spec[field].as_str().is_some_and(|v| !v.is_empty());
    let refused =
        |field: &str, reason: String| ChartError::Refused { object: id.to_owned(), field: field.to_owned(), reason };
    let name = release_name(release);
    let name_field = if set("releaseName") {
        "spec.releaseName"
    } else if set("targetNamespace") {
        "the release name helm-controller derives from spec.targetNamespace and metadata.name"
    } else {
        "the release name helm-controller derives from metadata.name"
    };
    crate::refs::release_name(&name).map_err(|why| refused(name_field, why))?;
    // Expanded as installed here only when helm-controller would install it here: not while it
    // is suspended (nothing installed, upgraded or rolled back until resumed; what the cluster
    // holds is not in git), not into another cluster (`spec.kubeConfig`).
    if let Some(why) = crate::flux::NotHere::of(spec) {
        let reason = match why {
            crate::flux::NotHere::Suspended => {
                "suspended: helm-controller installs and upgrades nothing of it until it is resumed, and what the cluster holds of it is not in git"
            }
            crate::flux::NotHere::Remote => "it installs into another cluster, not the one under review",
        };
        return Err(refused(why.field(), reason.to_owned()));
    }
    let namespace = release_namespace(release);
    let namespace_field = if set("targetNamespace") { "spec.targetNamespace" } else { "metadata.namespace" };
    crate::refs::namespace(&namespace).map_err(|why| refused(namespace_field, why))?;
    Ok((name, namespace))
}

#[cfg(test)]
mod tests;
