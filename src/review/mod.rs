//! `osbx diff --base REF`: what a change to the profile (or fleet) does to the clusters, before it
//! merges and without a cluster.
//!
//! Two sides, both read from git and neither written anywhere:
//!
//! - **base**: what Flux applies today, the tree as committed at `REF` (default: the merge base
//!   of the checked-out branch with its upstream); for a cluster whose tree is not committed
//!   there, the profile (or fleet file) as that commit holds it, rendered.
//! - **head**: the profile (or fleet) as it is now in the work tree, rendered and staged over the
//!   work tree as `osbx render` would write it ([`crate::repo::work_tree`]).
//!
//! Each side is read as Flux reads it ([`flux`]: the cluster's directory, its Kustomizations
//! followed to their paths), every HelmRelease expanded with the chart its source pins
//! ([`charts`], unless `--no-charts`), and the two compared layer by layer by
//! [`crate::deploy::compare`]'s comparison of two renders, with notes on what each change means
//! for the sandboxes ([`notes`]). A fleet's identical changes are folded into one entry naming
//! its clusters.

pub(crate) mod charts;
mod compare;
mod flux;
mod markdown;
mod notes;
mod sides;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use self::charts::{ChartError, Expanders};
use self::compare::{compare_cluster, fold};
use self::flux::FluxError;
pub(crate) use self::markdown::markdown;
use self::sides::{Bases, ClusterSide, cluster_dirs, expand, head};
use crate::changeset::Action;
use crate::object::ObjectRef;
use crate::profile::{ProfileError, ProfileSource};
use crate::progress::Progress;
use crate::render::{RenderError, Renderer};
use crate::repo::{self, RepoError, Snapshot};

/// What to review.
#[derive(Debug, Clone)]
pub(crate) enum Subject {
    /// One profile.
    Profile(ProfileSource),
    /// Every cluster of a fleet file.
    Fleet(PathBuf),
}

/// How charts are expanded.
#[derive(Debug, Clone)]
pub(crate) enum ChartMode {
    /// Not at all (`--no-charts`): the Flux objects only.
    Off,
    /// With the `helm` on PATH, from the cache `cache` (`air_gapped`: `--charts DIR`, never
    /// fetch).
    Expand {
        /// The chart cache.
        cache: charts::CacheRoot,
        /// Read only from the cache.
        air_gapped: bool,
    },
}

/// A review's settings.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The Flux repository (its git work tree).
    pub repo: PathBuf,
    /// `--base REF` (`None`: the merge base with the upstream).
    pub base: Option<String>,
    /// The profile or fleet.
    pub subject: Subject,
    /// Chart expansion.
    pub charts: ChartMode,
}

impl ChartMode {
    /// As `--charts DIR` and `--no-charts` say: off, from that copy of the cache (never
    /// fetching), or from the default cache.
    ///
    /// # Errors
    /// `--charts` names no directory.
    pub(crate) fn of(charts: Option<&std::path::Path>, off: bool) -> anyhow::Result<Self> {
        Ok(match (charts, off) {
            (_, true) => Self::Off,
            (Some(dir), false) => {
                anyhow::ensure!(dir.is_dir(), "--charts {}: no such directory", dir.display());
                Self::Expand { cache: charts::CacheRoot::Dir(dir.to_path_buf()), air_gapped: true }
            }
            (None, false) => Self::Expand { cache: charts::default_cache(), air_gapped: false },
        })
    }
}

/// Why a review could not be made (exit 2).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReviewError {
    /// The base commit cannot be found.
    #[error(transparent)]
    Base(#[from] repo::BaseError),
    /// The repository cannot be read.
    #[error(transparent)]
    Git(#[from] repo::GitError),
    /// The head cannot be staged (a foreign file in the way, an unreadable state).
    #[error(transparent)]
    Repo(#[from] RepoError),
    /// The head profile does not load.
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// The head does not render.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// A side cannot be read as Flux reads it.
    #[error("{side}: {source}")]
    Flux {
        /// `base` or `head`.
        side: &'static str,
        /// Why.
        #[source]
        source: FluxError,
    },
    /// A chart cannot be expanded.
    #[error("{side}: {}{source}", file.as_deref().map_or_else(String::new, |f| format!("{f}: ")))]
    Chart {
        /// `base` or `head`.
        side: &'static str,
        /// The file of the repository that holds the HelmRelease, when one does.
        file: Option<String>,
        /// Why.
        #[source]
        source: Box<ChartError>,
    },
}

/// One side, for people.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SideInfo {
    /// `origin/main (1a2b3c4)`, `the work tree`.
    pub label: String,
    /// How each cluster's objects were found: `committed tree`, `rendered from <file> at <ref>`.
    pub how: BTreeMap<String, String>,
    /// Why it could not be rendered, when it could not (the other side is still shown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unrenderable: Option<String>,
}

/// One change, for every cluster it happens on.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Entry {
    /// The clusters (one unless a fleet's clusters change alike).
    pub clusters: Vec<String>,
    /// The layer (its Flux Kustomization).
    pub layer: String,
    /// `Kind/namespace/name`.
    pub object: String,
    /// The object's identity.
    #[serde(rename = "ref")]
    pub id: ObjectRef,
    /// `created`, `configured`, `deleted`.
    pub action: Action,
    /// The HelmRelease whose chart renders it (`None`: a Flux object of the repository).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// What it means for sandboxes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Unified diff `before/…` → `after/…`, Secret values masked.
    pub diff: String,
}

/// The counts of one cluster's layer.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub(crate) struct Count {
    /// The cluster these counts are of.
    pub cluster: String,
    /// The layer (its Flux Kustomization) these counts are of.
    pub layer: String,
    /// Objects created.
    pub created: usize,
    /// Objects changed.
    pub configured: usize,
    /// Objects deleted.
    pub deleted: usize,
    /// Objects unchanged.
    pub unchanged: usize,
}

impl Count {
    fn changed(&self) -> bool {
        self.created + self.configured + self.deleted > 0
    }
}

/// What a review found.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Review {
    /// What the head is compared with.
    pub base: SideInfo,
    /// What is compared.
    pub head: SideInfo,
    /// The clusters compared.
    pub clusters: Vec<String>,
    /// `helm` and its version, when charts were expanded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub helm: Option<String>,
    /// Per cluster and layer, what changes.
    pub summary: Vec<Count>,
    /// Every change (unchanged objects left out), identical ones of several clusters folded.
    pub changes: Vec<Entry>,
}

impl Review {
    /// Whether anything changes.
    #[must_use]
    pub(crate) fn has_changes(&self) -> bool {
        !self.changes.is_empty()
    }
}

/// The review of `settings` (nothing is written; the chart cache aside).
///
/// # Errors
/// [`ReviewError`] (exit 2): no base commit, a head that does not render or stage, a side Flux
/// could not read, a chart that cannot be fetched or templated. A base that does not render is
/// not an error: it is reported, and the head is shown whole.
pub(crate) fn review(settings: &Settings, renderer: &Renderer, progress: &dyn Progress) -> Result<Review, ReviewError> {
    // `helm version` (a process start) runs while the sides are rendered.
    let finding = matches!(settings.charts, ChartMode::Expand { .. }).then(|| std::thread::spawn(charts::Helm::find));
    // The base commit's tree is read while the head renders; a base that cannot be found is said
    // first.
    let (base, committed, head) = std::thread::scope(|scope| {
        let git = scope.spawn(|| -> Result<_, ReviewError> {
            let base = repo::base(&settings.repo, settings.base.as_deref())?;
            let committed = repo::at_commit(&settings.repo, base.commit)?;
            Ok((base, committed))
        });
        progress.step("rendering the head");
        let rendered = head(settings, renderer, progress);
        let (base, committed) = git.join().unwrap_or_else(|e| std::panic::resume_unwind(e))?;
        Ok::<_, ReviewError>((base, committed, rendered?))
    })?;
    progress.step(&format!("the base is {}", base.label));
    let staged = repo::stage(&settings.repo, &head.rendered, renderer, false)?;
    let head_tree = repo::work_tree(&settings.repo, &staged)?;
    let mut dirs = cluster_dirs(&head.rendered);
    let bases = Bases::new(settings, renderer, &base, &mut dirs);
    let (base_trees, base_how, unrenderable) = bases.trees(&committed, &dirs);
    let head_how: BTreeMap<String, String> =
        dirs.keys().map(|c| (c.clone(), "rendered from the work tree".to_owned())).collect();
    // Every cluster of one run renders for its own Kubernetes version; charts are keyed by it.
    let mut charts = match &settings.charts {
        ChartMode::Off => None,
        ChartMode::Expand { cache, air_gapped } => Some(
            Expanders::open(cache, *air_gapped, || {
                finding.map_or_else(charts::Helm::find, |f| f.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            })
            .map_err(|source| ReviewError::Chart {
                side: "head",
                file: None,
                source: Box::new(source),
            })?,
        ),
    };
    let helm = charts.as_ref().map(|c| format!("helm {}", c.helm().version));
    let mut counts = Vec::new();
    let mut entries: Vec<Entry> = Vec::new();
    for (cluster, base_tree) in &base_trees {
        progress.step(&format!("cluster {cluster}: reading both sides"));
        let dir = &dirs[cluster];
        // The repository under review, as the cluster's Kustomizations name it.
        let cluster_spec = head.profiles.get(cluster).map(|p| &p.profile.cluster);
        let repository = flux::Repository {
            namespace: cluster_spec.map_or("flux-system", |c| c.flux_namespace.as_str()),
            name: cluster_spec.map_or("flux-system", |c| c.source_ref.as_str()),
        };
        let read = |tree: &Snapshot, side: &'static str| {
            if tree.has_dir(dir) {
                flux::layers(tree, dir, repository).map_err(|source| ReviewError::Flux { side, source })
            } else {
                Ok((Vec::new(), flux::Files::new()))
            }
        };
        let ((before, base_files), (after, head_files)) = (read(base_tree, "base")?, read(&head_tree, "head")?);
        let kube_version = head.profiles.get(cluster).map_or_else(
            || crate::spec::KUBERNETES_VERSION.to_owned(),
            |p| p.profile.cluster.kubernetes_version.clone(),
        );
        let (before, after) = match &mut charts {
            None => (
                ClusterSide { layers: before, ..ClusterSide::default() },
                ClusterSide { layers: after, ..ClusterSide::default() },
            ),
            Some(charts) => {
                progress.step(&format!(
                    "cluster {cluster}: expanding charts (helm {}, Kubernetes {kube_version})",
                    charts.helm().version
                ));
                let expander = charts.for_version(&kube_version);
                (expand(expander, "base", before, &base_files)?, expand(expander, "head", after, &head_files)?)
            }
        };
        let acceptance = head.profiles.get(cluster).and_then(|p| notes::AcceptanceJob::of(&p.profile));
        compare_cluster(cluster, (&before, &after), acceptance.as_ref(), &mut counts, &mut entries);
    }
    let clusters: Vec<String> = dirs.keys().cloned().collect();
    Ok(Review {
        base: SideInfo { label: base.label.clone(), how: base_how, unrenderable },
        head: SideInfo {
            label: format!("the work tree of {}", settings.repo.display()),
            how: head_how,
            unrenderable: None,
        },
        clusters,
        helm,
        summary: counts,
        changes: fold(entries),
    })
}

/// The counts that changed, for a summary (every cluster's layer with a change).
#[must_use]
pub(crate) fn changed_counts(review: &Review) -> Vec<&Count> {
    review.summary.iter().filter(|c| c.changed()).collect()
}
