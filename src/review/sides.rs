//! The two sides of a review, each read from git: the head rendered over the work tree, the base
//! as committed (or rendered from the profile that commit holds), and each side's clusters with
//! their HelmReleases expanded.

use std::collections::BTreeMap;
use std::path::Path;

use super::charts::{ChartError, Charts, Expansion};
use crate::deploy::Layer;
use crate::fleet;
use crate::object::{Object, ObjectRef};
use crate::profile::{self, ProfileSource};
use crate::progress::{Progress, Silent};
use crate::render::{RenderError, Rendered, Renderer, Source as RenderSource};
use crate::repo::{self, Snapshot};

use super::{ReviewError, Settings, Subject};

/// A side's render: what the subject renders to, and the profile of each cluster.
pub(super) struct Render {
    pub(super) rendered: Rendered,
    pub(super) profiles: BTreeMap<String, profile::LoadedProfile>,
}

/// The cluster directory of each cluster a render writes (`clusters/<name>`).
pub(super) fn cluster_dirs(rendered: &Rendered) -> BTreeMap<String, String> {
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

pub(super) fn render_profile(loaded: profile::LoadedProfile, renderer: &Renderer) -> Result<Render, RenderError> {
    let rendered = renderer.render(&loaded)?;
    let mut profiles = BTreeMap::new();
    profiles.insert(loaded.profile.cluster.name.clone(), loaded);
    Ok(Render { rendered, profiles })
}

pub(super) fn render_fleet(
    fleet: fleet::Fleet,
    renderer: &Renderer,
    current: &fleet::Current,
) -> Result<Render, RenderError> {
    let rendered = fleet::render_over(&fleet, renderer, current, None)?;
    let profiles = fleet.members.into_iter().map(|m| (m.profile.cluster.name.clone(), m)).collect();
    Ok(Render { rendered, profiles })
}

/// The head: the subject as the work tree has it, rendered (fleet layers where the repository
/// keeps them).
pub(super) fn head(settings: &Settings, renderer: &Renderer, progress: &dyn Progress) -> Result<Render, ReviewError> {
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

/// Why the base's render of the subject failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum BaseRenderError {
    /// The subject's file is not in the repository.
    #[error("{} is outside the repository {}", path.display(), repo.display())]
    Outside {
        /// The file.
        path: std::path::PathBuf,
        /// The repository.
        repo: std::path::PathBuf,
    },
    /// A fleet names a base profile outside the repository.
    #[error("{at}:{rel}: base {base:?} is outside the repository")]
    BaseOutside {
        /// `REF` as given.
        at: String,
        /// The fleet file.
        rel: String,
        /// The base it names.
        base: String,
    },
    /// The commit cannot be read.
    #[error(transparent)]
    Git(#[from] repo::GitError),
    /// The profile or fleet does not load.
    #[error(transparent)]
    Profile(#[from] crate::profile::ProfileError),
    /// It does not render.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// A scratch directory for the fleet file cannot be made.
    #[error("a scratch directory for the base's fleet file: {0}")]
    Scratch(#[source] std::io::Error),
    /// A path the commit names would leave the scratch directory.
    #[error("{0}")]
    Refused(String),
    /// A file cannot be written into the scratch directory.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The base's render of the subject as `commit` holds it: a profile file (or fleet file, and the
/// base profile it names) read from that commit; an embedded profile as this osbx has it.
pub(super) fn base_render(
    settings: &Settings,
    renderer: &Renderer,
    commit: git2::Oid,
    at: &str,
) -> Result<Option<Render>, BaseRenderError> {
    let read = |path: &Path| -> Result<Option<(String, String)>, BaseRenderError> {
        let Some(rel) = repo::relative(&settings.repo, path) else {
            return Err(BaseRenderError::Outside { path: path.to_owned(), repo: settings.repo.clone() });
        };
        let bytes = repo::file_at(&settings.repo, commit, &rel)?;
        Ok(bytes.map(|b| (rel, String::from_utf8_lossy(&b).into_owned())))
    };
    match &settings.subject {
        Subject::Profile(ProfileSource::Embedded(name)) => {
            let loaded = profile::load(&ProfileSource::Embedded(name.clone()))?;
            Ok(Some(render_profile(loaded, renderer)?))
        }
        Subject::Profile(ProfileSource::File(path)) => {
            let Some((rel, text)) = read(path)? else { return Ok(None) };
            let mut loaded = profile::parse(&format!("{at}:{rel}"), text)?;
            // Sealed Secrets (secrets.sops) as the commit holds them.
            loaded.sealed = crate::secrets::read_with(&loaded.profile, |rel| {
                let bytes = repo::file_at(&settings.repo, commit, rel)?;
                Ok::<_, BaseRenderError>(bytes.map(|b| String::from_utf8_lossy(&b).into_owned()))
            })?;
            Ok(Some(render_profile(loaded, renderer)?))
        }
        Subject::Fleet(path) => {
            let Some((rel, text)) = read(path)? else { return Ok(None) };
            // The fleet file and the base profile it names, as the commit holds them, in a
            // scratch directory of their own (the fleet names its base relative to itself).
            // (A directory of its own, made new with a random name: never a predictable path in a
            // shared temporary directory, and gone when dropped.)
            let scratch =
                tempfile::Builder::new().prefix("osbx-review-").tempdir().map_err(BaseRenderError::Scratch)?;
            let scratch = scratch.path();
            let file = crate::refs::under(scratch, &rel).map_err(BaseRenderError::Refused)?;
            let result = (|| {
                std::fs::create_dir_all(file.parent().unwrap_or(scratch))?;
                std::fs::write(&file, &text)?;
                let doc: serde_json::Value = serde_saphyr::from_str(&text).unwrap_or_default();
                if let Some(base) = doc["base"].as_str()
                    && (base.contains('/')
                        || Path::new(base)
                            .extension()
                            .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml")))
                {
                    let dir = Path::new(&rel).parent().unwrap_or(Path::new("")).to_string_lossy().into_owned();
                    let base_rel = crate::refs::join_within(&dir, base).ok_or_else(|| {
                        BaseRenderError::BaseOutside { at: at.to_owned(), rel: rel.clone(), base: base.to_owned() }
                    })?;
                    if let Some(bytes) = repo::file_at(&settings.repo, commit, &base_rel)? {
                        let target = crate::refs::under(scratch, &base_rel).map_err(BaseRenderError::Refused)?;
                        std::fs::create_dir_all(target.parent().unwrap_or(scratch))?;
                        std::fs::write(target, bytes)?;
                    }
                }
                let fleet = fleet::load(&file, &Silent)?;
                Ok(render_fleet(fleet, renderer, &fleet::Current::default())?)
            })();
            result.map(Some)
        }
    }
}

/// A render's files as a tree (its cluster kustomizations written with osbx's entries), with the
/// sealed Secret files it lists.
pub(super) fn tree_of(
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
pub(super) struct ClusterSide {
    pub(super) layers: Vec<Layer>,
    /// For each chart-rendered object, its HelmRelease.
    pub(super) origin: BTreeMap<(String, ObjectRef), ObjectRef>,
    pub(super) charts: Vec<(ObjectRef, Expansion)>,
}

/// Expand every HelmRelease of `layers` (in parallel, on every core).
pub(super) fn expand(
    charts: &Charts,
    side: &'static str,
    layers: Vec<Layer>,
    files: &super::flux::Files,
) -> Result<ClusterSide, ReviewError> {
    let all: Vec<&Object> = layers.iter().flat_map(|l| &l.objects).collect();
    let releases: Vec<(usize, &Object)> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.objects.iter().filter(|o| crate::flux::HELM_RELEASE.is(&o.id.gvk)).map(move |o| (i, o)))
        .collect();
    let expanded: Vec<Result<Expansion, ChartError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = releases.iter().map(|(_, r)| scope.spawn(|| charts.expand(r, &all))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    let releases: Vec<(usize, ObjectRef)> = releases.into_iter().map(|(i, r)| (i, r.id.clone())).collect();
    let mut out = ClusterSide { layers, ..ClusterSide::default() };
    for ((i, release), expansion) in releases.into_iter().zip(expanded) {
        let expansion = expansion.map_err(|source| ReviewError::Chart {
            side,
            file: files.get(&release).cloned(),
            source: Box::new(source),
        })?;
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
pub(super) type BaseTrees = (Vec<(String, Snapshot)>, BTreeMap<String, String>, Option<String>);

/// The base of each cluster: the commit's tree where it holds the cluster's directory, else the
/// subject as the commit holds it, rendered (once).
pub(super) struct Bases<'a> {
    pub(super) settings: &'a Settings,
    pub(super) renderer: &'a Renderer,
    pub(super) base: &'a repo::Base,
    /// `REF` as given, for messages.
    pub(super) at: String,
    pub(super) render: std::cell::OnceCell<Result<Option<Snapshot>, String>>,
}

impl<'a> Bases<'a> {
    /// For a fleet, the clusters the base's render has that the head's does not (a cluster
    /// leaving the fleet) are added to `dirs`.
    pub(super) fn new(
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

    pub(super) fn tree(&self, rendered: Result<Option<Render>, BaseRenderError>) -> Result<Option<Snapshot>, String> {
        // Why the base is unrenderable, as the review shows it.
        match rendered.map_err(|e| e.to_string())? {
            Some(render) => {
                let sealed = render.profiles.values().flat_map(|p| p.sealed.0.clone());
                tree_of(&render.rendered, sealed, self.renderer).map(Some).map_err(|e| e.to_string())
            }
            None => Ok(None),
        }
    }

    /// Each cluster's base tree, how it was found, and why the base's render failed (if it did).
    pub(super) fn trees(&self, committed: &Snapshot, dirs: &BTreeMap<String, String>) -> BaseTrees {
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
