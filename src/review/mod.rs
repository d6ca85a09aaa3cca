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
mod flux;
mod markdown;
mod notes;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use self::charts::{ChartError, Charts, Expansion};
use self::flux::FluxError;
pub(crate) use self::markdown::markdown;
use crate::changeset::Action;
use crate::deploy::{self, Layer};
use crate::fleet;
use crate::object::{Object, ObjectRef};
use crate::profile::{self, ProfileError, ProfileSource};
use crate::progress::{Progress, Silent};
use crate::render::{RenderError, Rendered, Renderer, Source as RenderSource};
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
        cache: PathBuf,
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
    /// Templates that replace the embedded ones.
    pub templates: Option<PathBuf>,
    /// Chart expansion.
    pub charts: ChartMode,
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
    #[error("{side}: {source}")]
    Chart {
        /// `base` or `head`.
        side: &'static str,
        /// Why.
        #[source]
        source: ChartError,
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

/// A side's render: what the subject renders to, and the profile of each cluster.
struct Render {
    rendered: Rendered,
    profiles: BTreeMap<String, profile::LoadedProfile>,
}

/// The cluster directory of each cluster a render writes (`clusters/<name>`).
fn cluster_dirs(rendered: &Rendered) -> BTreeMap<String, String> {
    rendered
        .clusters
        .iter()
        .filter_map(|c| {
            let dir = c.path.trim_end_matches("/kustomization.yaml");
            let name = dir.rsplit('/').next()?;
            Some((name.to_owned(), dir.to_owned()))
        })
        .collect()
}

fn render_profile(loaded: profile::LoadedProfile, renderer: &Renderer) -> Result<Render, RenderError> {
    let rendered = renderer.render(&loaded)?;
    let mut profiles = BTreeMap::new();
    profiles.insert(loaded.profile.cluster.name.clone(), loaded);
    Ok(Render { rendered, profiles })
}

fn render_fleet(fleet: fleet::Fleet, renderer: &Renderer, current: &fleet::Current) -> Result<Render, RenderError> {
    let rendered = fleet::render_over(&fleet, renderer, current, None)?;
    let profiles = fleet.members.into_iter().map(|m| (m.profile.cluster.name.clone(), m)).collect();
    Ok(Render { rendered, profiles })
}

/// The head: the subject as the work tree has it, rendered (fleet layers where the repository
/// keeps them).
fn head(settings: &Settings, renderer: &Renderer, progress: &dyn Progress) -> Result<Render, ReviewError> {
    Ok(match &settings.subject {
        Subject::Profile(source) => {
            let mut loaded = profile::load(source)?;
            // Sealed Secrets (secrets.sops) as the work tree holds them.
            crate::secrets::attach(&mut loaded, &settings.repo).map_err(|e| RenderError::Sealed(e.to_string()))?;
            render_profile(loaded, renderer)?
        }
        Subject::Fleet(path) => {
            let fleet = fleet::load(path, progress)?;
            let source = RenderSource { kind: "fleet", name: fleet.name.clone() };
            let current = fleet::Current::new(repo::rendered_before(&settings.repo, &source)?);
            render_fleet(fleet, renderer, &current)?
        }
    })
}

/// The base's render of the subject as `commit` holds it: a profile file (or fleet file, and the
/// base profile it names) read from that commit; an embedded profile as this osbx has it.
fn base_render(
    settings: &Settings,
    renderer: &Renderer,
    commit: git2::Oid,
    at: &str,
) -> Result<Option<Render>, String> {
    let read = |path: &Path| -> Result<Option<(String, String)>, String> {
        let Some(rel) = repo::relative(&settings.repo, path) else {
            return Err(format!("{} is outside the repository {}", path.display(), settings.repo.display()));
        };
        let bytes = repo::file_at(&settings.repo, commit, &rel).map_err(|e| e.to_string())?;
        Ok(bytes.map(|b| (rel, String::from_utf8_lossy(&b).into_owned())))
    };
    match &settings.subject {
        Subject::Profile(ProfileSource::Embedded(name)) => {
            let loaded = profile::load(&ProfileSource::Embedded(name.clone())).map_err(|e| e.to_string())?;
            Ok(Some(render_profile(loaded, renderer).map_err(|e| e.to_string())?))
        }
        Subject::Profile(ProfileSource::File(path)) => {
            let Some((rel, text)) = read(path)? else { return Ok(None) };
            let mut loaded = profile::parse(&format!("{at}:{rel}"), text).map_err(|e| e.to_string())?;
            // Sealed Secrets (secrets.sops) as the commit holds them.
            loaded.sealed = crate::secrets::read_with(&loaded.profile, |rel| {
                let bytes = repo::file_at(&settings.repo, commit, rel).map_err(|e| e.to_string())?;
                Ok::<_, String>(bytes.map(|b| String::from_utf8_lossy(&b).into_owned()))
            })?;
            Ok(Some(render_profile(loaded, renderer).map_err(|e| e.to_string())?))
        }
        Subject::Fleet(path) => {
            let Some((rel, text)) = read(path)? else { return Ok(None) };
            // The fleet file and the base profile it names, as the commit holds them, in a
            // scratch directory of their own (the fleet names its base relative to itself).
            // (A directory of its own, made new with a random name: never a predictable path in a
            // shared temporary directory, and gone when dropped.)
            let scratch = tempfile::Builder::new()
                .prefix("osbx-review-")
                .tempdir()
                .map_err(|e| format!("a scratch directory for the base's fleet file: {e}"))?;
            let scratch = scratch.path();
            let file = crate::refs::under(scratch, &rel)?;
            let result = (|| {
                std::fs::create_dir_all(file.parent().unwrap_or(scratch)).map_err(|e| e.to_string())?;
                std::fs::write(&file, &text).map_err(|e| e.to_string())?;
                let doc: serde_json::Value = serde_saphyr::from_str(&text).unwrap_or_default();
                if let Some(base) = doc["base"].as_str()
                    && (base.contains('/')
                        || Path::new(base)
                            .extension()
                            .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml")))
                {
                    let dir = Path::new(&rel).parent().unwrap_or(Path::new("")).to_string_lossy().into_owned();
                    let base_rel = crate::refs::join_within(&dir, base)
                        .ok_or_else(|| format!("{at}:{rel}: base {base:?} is outside the repository"))?;
                    if let Some(bytes) = repo::file_at(&settings.repo, commit, &base_rel).map_err(|e| e.to_string())? {
                        let target = crate::refs::under(scratch, &base_rel)?;
                        std::fs::create_dir_all(target.parent().unwrap_or(scratch)).map_err(|e| e.to_string())?;
                        std::fs::write(target, bytes).map_err(|e| e.to_string())?;
                    }
                }
                let fleet = fleet::load(&file, &Silent).map_err(|e| e.to_string())?;
                render_fleet(fleet, renderer, &fleet::Current::default()).map_err(|e| e.to_string())
            })();
            result.map(Some)
        }
    }
}

/// A render's files as a tree (its cluster kustomizations written with osbx's entries), with the
/// sealed Secret files it lists.
fn tree_of(
    rendered: &Rendered,
    sealed: impl IntoIterator<Item = (String, String)>,
    renderer: &Renderer,
) -> Result<Snapshot, RenderError> {
    let mut files: Vec<(String, Vec<u8>)> =
        rendered.files.iter().map(|f| (f.path.clone(), f.content.as_bytes().to_vec())).collect();
    files.extend(sealed.into_iter().map(|(path, text)| (path, text.into_bytes())));
    for c in &rendered.clusters {
        files.push((c.path.clone(), renderer.cluster_kustomization(&c.entries)?.into_bytes()));
    }
    Ok(Snapshot::of(files))
}

/// One side of one cluster: its layers (charts expanded into the layer of their HelmRelease),
/// and the charts.
#[derive(Default)]
struct ClusterSide {
    layers: Vec<Layer>,
    /// For each chart-rendered object, its HelmRelease.
    origin: BTreeMap<(String, ObjectRef), ObjectRef>,
    charts: Vec<(ObjectRef, Expansion)>,
}

/// Expand every HelmRelease of `layers` (in parallel, on every core).
fn expand(charts: &Charts, side: &'static str, layers: Vec<Layer>) -> Result<ClusterSide, ReviewError> {
    let all: Vec<&Object> = layers.iter().flat_map(|l| &l.objects).collect();
    let releases: Vec<(usize, &Object)> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.objects.iter().filter(|o| o.id.kind() == "HelmRelease").map(move |o| (i, o)))
        .collect();
    let expanded: Vec<Result<Expansion, ChartError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = releases.iter().map(|(_, r)| scope.spawn(|| charts.expand(r, &all))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    let releases: Vec<(usize, ObjectRef)> = releases.into_iter().map(|(i, r)| (i, r.id.clone())).collect();
    let mut out = ClusterSide { layers, ..ClusterSide::default() };
    for ((i, release), expansion) in releases.into_iter().zip(expanded) {
        let expansion = expansion.map_err(|source| ReviewError::Chart { side, source })?;
        let layer = &mut out.layers[i];
        for (o, _) in &expansion.objects {
            out.origin.insert((layer.name.clone(), o.id.clone()), release.clone());
            if !layer.objects.iter().any(|x| x.id == o.id) {
                layer.objects.push(o.clone());
            }
        }
        out.charts.push((release, expansion));
    }
    Ok(out)
}

/// Each cluster's base tree, how it was found, and why the base's render failed (if it did).
type BaseTrees = (Vec<(String, Snapshot)>, BTreeMap<String, String>, Option<String>);

/// The base of each cluster: the commit's tree where it holds the cluster's directory, else the
/// subject as the commit holds it, rendered (once).
struct Bases<'a> {
    settings: &'a Settings,
    renderer: &'a Renderer,
    base: &'a repo::Base,
    /// `REF` as given, for messages.
    at: String,
    render: std::cell::OnceCell<Result<Option<Snapshot>, String>>,
}

impl<'a> Bases<'a> {
    /// For a fleet, the clusters the base's render has that the head's does not (a cluster
    /// leaving the fleet) are added to `dirs`.
    fn new(
        settings: &'a Settings,
        renderer: &'a Renderer,
        base: &'a repo::Base,
        dirs: &mut BTreeMap<String, String>,
    ) -> Self {
        let at = base.label.split(' ').next().unwrap_or_default().to_owned();
        let bases = Self { settings, renderer, base, at, render: std::cell::OnceCell::new() };
        if matches!(settings.subject, Subject::Fleet(_)) {
            let rendered = base_render(settings, renderer, base.commit, &bases.at);
            if let Ok(Some(render)) = &rendered {
                for (name, dir) in cluster_dirs(&render.rendered) {
                    dirs.entry(name).or_insert(dir);
                }
            }
            let _ = bases.render.set(bases.tree(rendered));
        }
        bases
    }

    fn tree(&self, rendered: Result<Option<Render>, String>) -> Result<Option<Snapshot>, String> {
        match rendered? {
            Some(render) => {
                let sealed = render.profiles.values().flat_map(|p| p.sealed.0.clone());
                tree_of(&render.rendered, sealed, self.renderer).map(Some).map_err(|e| e.to_string())
            }
            None => Ok(None),
        }
    }

    /// Each cluster's base tree, how it was found, and why the base's render failed (if it did).
    fn trees(&self, committed: &Snapshot, dirs: &BTreeMap<String, String>) -> BaseTrees {
        let (mut trees, mut how, mut unrenderable) = (Vec::new(), BTreeMap::new(), None);
        for (cluster, dir) in dirs {
            let (tree, said) = if committed.has_dir(dir) {
                (committed.clone(), "committed tree".to_owned())
            } else {
                let rendered = self
                    .render
                    .get_or_init(|| self.tree(base_render(self.settings, self.renderer, self.base.commit, &self.at)));
                match rendered {
                    Ok(Some(tree)) => (tree.clone(), format!("rendered from the profile as {} holds it", self.at)),
                    Ok(None) => {
                        (Snapshot::default(), format!("nothing: {} holds neither its tree nor the profile", self.at))
                    }
                    Err(e) => {
                        unrenderable = Some(e.clone());
                        (Snapshot::default(), "unrenderable".to_owned())
                    }
                }
            };
            how.insert(cluster.clone(), said);
            trees.push((cluster.clone(), tree));
        }
        (trees, how, unrenderable)
    }
}

/// The review of `settings` (nothing is written; the chart cache aside).
///
/// # Errors
/// [`ReviewError`] (exit 2): no base commit, a head that does not render or stage, a side Flux
/// could not read, a chart that cannot be fetched or templated. A base that does not render is
/// not an error: it is reported, and the head is shown whole.
pub(crate) fn review(settings: &Settings, progress: &dyn Progress) -> Result<Review, ReviewError> {
    // `helm version` (a process start) runs while the sides are rendered.
    let finding = matches!(settings.charts, ChartMode::Expand { .. }).then(|| std::thread::spawn(charts::Helm::find));
    // The base commit's tree is read while the head renders; a base that cannot be found is said
    // first.
    let (base, committed, renderer, head) = std::thread::scope(|scope| {
        let git = scope.spawn(|| -> Result<_, ReviewError> {
            let base = repo::base(&settings.repo, settings.base.as_deref())?;
            let committed = repo::at_commit(&settings.repo, base.commit)?;
            Ok((base, committed))
        });
        progress.step("rendering the head");
        let rendered = Renderer::new(settings.templates.as_deref())
            .map_err(ReviewError::from)
            .and_then(|renderer| Ok((head(settings, &renderer, progress)?, renderer)));
        let (base, committed) = git.join().unwrap_or_else(|e| std::panic::resume_unwind(e))?;
        let (head, renderer) = rendered?;
        Ok::<_, ReviewError>((base, committed, renderer, head))
    })?;
    progress.step(&format!("the base is {}", base.label));
    let staged = repo::stage(&settings.repo, &head.rendered, &renderer, false)?;
    let head_tree = repo::work_tree(&settings.repo, &staged)?;
    let mut dirs = cluster_dirs(&head.rendered);
    let bases = Bases::new(settings, &renderer, &base, &mut dirs);
    let (base_trees, base_how, unrenderable) = bases.trees(&committed, &dirs);
    let head_how: BTreeMap<String, String> =
        dirs.keys().map(|c| (c.clone(), "rendered from the work tree".to_owned())).collect();
    let charts = match &settings.charts {
        ChartMode::Off => None,
        ChartMode::Expand { cache, air_gapped } => {
            let found =
                finding.map_or_else(charts::Helm::find, |f| f.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
            let helm = found.map_err(|source| ReviewError::Chart { side: "head", source })?;
            // Every cluster of one run renders for its own Kubernetes version; charts are
            // keyed by it.
            Some((helm, cache.clone(), *air_gapped))
        }
    };
    let helm = charts.as_ref().map(|(h, _, _)| format!("helm {}", h.version));
    let mut counts = Vec::new();
    let mut entries: Vec<Entry> = Vec::new();
    // One expander per Kubernetes version: a fleet's clusters share fetched charts and templates.
    let mut expanders: BTreeMap<String, Charts> = BTreeMap::new();
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
                Ok(Vec::new())
            }
        };
        let (before, after) = (read(base_tree, "base")?, read(&head_tree, "head")?);
        let kube_version = head.profiles.get(cluster).map_or_else(
            || crate::spec::KUBERNETES_VERSION.to_owned(),
            |p| p.profile.cluster.kubernetes_version.clone(),
        );
        let (before, after) = match &charts {
            None => (
                ClusterSide { layers: before, ..ClusterSide::default() },
                ClusterSide { layers: after, ..ClusterSide::default() },
            ),
            Some((helm, cache, air_gapped)) => {
                progress.step(&format!(
                    "cluster {cluster}: expanding charts (helm {}, Kubernetes {kube_version})",
                    helm.version
                ));
                let expander = expanders
                    .entry(kube_version.clone())
                    .or_insert_with(|| Charts::new(helm.clone(), cache.clone(), *air_gapped, kube_version));
                (expand(expander, "base", before)?, expand(expander, "head", after)?)
            }
        };
        compare_cluster(cluster, &before, &after, &mut counts, &mut entries);
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

/// Compare one cluster's two sides layer by layer and note what each change means.
fn compare_cluster(
    cluster: &str,
    before: &ClusterSide,
    after: &ClusterSide,
    counts: &mut Vec<Count>,
    out: &mut Vec<Entry>,
) {
    let all_before: Vec<&Object> = before.layers.iter().flat_map(|l| &l.objects).collect();
    let all_after: Vec<&Object> = after.layers.iter().flat_map(|l| &l.objects).collect();
    let sides = notes::Sides {
        before: all_before,
        after: all_after,
        charts_before: &before.charts,
        charts_after: &after.charts,
    };
    let mut names: Vec<&str> = after.layers.iter().map(|l| l.name.as_str()).collect();
    names.extend(before.layers.iter().map(|l| l.name.as_str()).filter(|n| !after.layers.iter().any(|l| l.name == *n)));
    for name in names {
        let pick = |s: &ClusterSide| s.layers.iter().filter(|l| l.name == name).cloned().collect::<Vec<Layer>>();
        // Two renders compared: deploy's comparison, as a live diff compares with a cluster.
        let old = pick(before);
        let changes = futures::executor::block_on(deploy::compare(deploy::Before::Render(&old), &pick(after)))
            .unwrap_or_default();
        let mut count = Count { cluster: cluster.to_owned(), layer: name.to_owned(), ..Count::default() };
        for mut c in changes.0 {
            let notes = notes::notes(&c, &sides);
            // A HelmRelease the same in git whose chart changes (a bump pinned by its source)
            // is upgraded by helm-controller: it is a change, shown with what changes in it.
            if matches!(c.action, Action::Unchanged) && c.id.kind() == "HelmRelease" && !notes.is_empty() {
                c.action = Action::Configured;
            }
            match c.action {
                Action::Created => count.created += 1,
                Action::Configured => count.configured += 1,
                Action::Deleted => count.deleted += 1,
                Action::Unchanged | Action::Skipped => {
                    count.unchanged += 1;
                    continue;
                }
            }
            let key = (name.to_owned(), c.id.clone());
            let release = after.origin.get(&key).or_else(|| before.origin.get(&key)).map(ToString::to_string);
            out.push(Entry {
                clusters: vec![cluster.to_owned()],
                layer: name.to_owned(),
                object: c.id.to_string(),
                id: c.id.clone(),
                action: c.action,
                release,
                notes,
                diff: c.diff.unwrap_or_default(),
            });
        }
        counts.push(count);
    }
}

/// Fold entries that are the same change on several clusters into one naming them, in the order
/// they first appear.
fn fold(entries: Vec<Entry>) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    let mut index: BTreeMap<(String, String, String, String, Vec<String>), usize> = BTreeMap::new();
    for e in entries {
        let key =
            (e.layer.clone(), e.object.clone(), e.diff.clone(), e.release.clone().unwrap_or_default(), e.notes.clone());
        if let Some(&i) = index.get(&key) {
            let clusters: BTreeSet<String> = out[i].clusters.iter().chain(&e.clusters).cloned().collect();
            out[i].clusters = clusters.into_iter().collect();
        } else {
            index.insert(key, out.len());
            out.push(e);
        }
    }
    out
}

/// The counts that changed, for a summary (every cluster's layer with a change).
#[must_use]
pub(crate) fn changed_counts(review: &Review) -> Vec<&Count> {
    review.summary.iter().filter(|c| c.changed()).collect()
}
