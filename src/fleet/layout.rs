//! Where a fleet's layers are written, and a render of part of a fleet.
//!
//! Every cluster gets `clusters/<name>/…`. A layer whose files are identical for several
//! clusters is written once. A variant of a layer keeps the directory that holds exactly its
//! files now, so a render that changes some clusters moves nobody else; among the variants that
//! have no such directory, the largest takes the layer's own path when it is free and every
//! other gets `<path>-<its first cluster>`.
//!
//! [`render_wave`] renders the clusters a rollout has reached and keeps every other cluster as
//! it is in the repository, byte for byte: its files are carried over from [`Current`], and no
//! variant of the reached clusters takes a directory one of them uses, unless its files are the
//! same.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::{Fleet, par_map_counted};
use crate::profile::{LoadedProfile, Locations};
use crate::progress::{Progress, Silent};
use crate::render::{ClusterIndex, RenderError, Rendered, RenderedFile, Renderer, Source};

/// The files a fleet's earlier render left in the repository (path → content), as the
/// repository holds them now.
#[derive(Debug, Clone, Default)]
pub(crate) struct Current {
    files: BTreeMap<String, String>,
}

impl Current {
    /// From the files the fleet rendered before and their content now.
    pub(crate) fn new(files: BTreeMap<String, String>) -> Self {
        Self { files }
    }

    /// The files of each directory, relative to it, sorted.
    fn dirs(&self) -> BTreeMap<&str, Vec<(&str, &str)>> {
        let mut out: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::new();
        for (path, content) in &self.files {
            if let Some((dir, name)) = path.rsplit_once('/') {
                out.entry(dir).or_default().push((name, content));
            }
        }
        out
    }

    /// What `cluster` has in the repository: its layer files (`clusters/<c>/apps/<layer>.yaml`)
    /// and the directories they point Flux at, each file with its layer.
    fn cluster(&self, cluster: &str) -> Vec<KeptFile> {
        let apps = format!("clusters/{cluster}/apps/");
        let mut out = Vec::new();
        for (path, content) in self.files.range(apps.clone()..).take_while(|(p, _)| p.starts_with(&apps)) {
            let Some(layer) = path[apps.len()..].strip_suffix(".yaml") else { continue };
            out.push((path.clone(), layer.to_owned(), content.clone()));
            let Some(dir) = flux_path(content) else { continue };
            let prefix = format!("{dir}/");
            for (p, c) in self.files.range(prefix.clone()..).take_while(|(p, _)| p.starts_with(&prefix)) {
                if !p[prefix.len()..].contains('/') {
                    out.push((p.clone(), layer.to_owned(), c.clone()));
                }
            }
        }
        out
    }
}

/// For each of `clusters`, the directories of `rendered` that hold what Flux applies to it:
/// `clusters/<c>/apps`, where its layer files are, and each directory they point Flux at.
pub(crate) fn cluster_dirs<'c>(
    rendered: &Rendered,
    clusters: impl IntoIterator<Item = &'c String>,
) -> BTreeMap<String, Vec<String>> {
    let files: BTreeMap<&str, &str> = rendered.files.iter().map(|f| (f.path.as_str(), f.content.as_str())).collect();
    clusters
        .into_iter()
        .map(|cluster| {
            let apps = format!("clusters/{cluster}/apps");
            let prefix = format!("{apps}/");
            let mut dirs: Vec<String> = files
                .range(prefix.as_str()..)
                .take_while(|(p, _)| p.starts_with(&prefix))
                .filter_map(|(_, content)| flux_path(content))
                .collect();
            dirs.push(apps);
            dirs.sort();
            dirs.dedup();
            (cluster.clone(), dirs)
        })
        .collect()
}

/// The `spec.path` of a Flux Kustomization file, normalised (`./platform/x` → `platform/x`).
fn flux_path(text: &str) -> Option<String> {
    let doc: serde_json::Value = serde_saphyr::from_str(crate::render::strip_marker(text)).ok()?;
    let path = doc["spec"]["path"].as_str()?;
    crate::spec::syntax::normalize_repo_path(path).ok()
}

/// Render every cluster, sharing identical layers.
///
/// # Errors
/// [`RenderError`] when a template fails.
pub fn render(fleet: &Fleet, renderer: &Renderer) -> Result<Rendered, RenderError> {
    render_over(fleet, renderer, &Current::default(), None)
}

/// [`render`] over what the repository holds now (`current`: layers keep their directories),
/// of the clusters in `reached` (all when `None`; see [`render_wave`]), unchecked and silent.
///
/// # Errors
/// [`RenderError`] when a template fails.
pub(crate) fn render_over(
    fleet: &Fleet,
    renderer: &Renderer,
    current: &Current,
    reached: Option<&BTreeSet<String>>,
) -> Result<Rendered, RenderError> {
    Ok(render_part(fleet, renderer, current, reached, &Silent, |_, _| Ok::<_, RenderError>(()))?.0)
}

/// [`render`] over what the repository holds now (`current`: layers keep their directories),
/// with `check` run on each cluster's own render (at its layers' usual paths) as it is made;
/// the first error, in fleet order, stops the render. Returns what `check` found for each
/// cluster, in fleet order. Counts the clusters rendered and checked on `progress`.
///
/// # Errors
/// A [`RenderError`] when a template fails, or what `check` returns.
pub(crate) fn render_checked<C: Send, E: From<RenderError> + Send>(
    fleet: &Fleet,
    renderer: &Renderer,
    current: &Current,
    progress: &dyn Progress,
    check: impl Fn(&LoadedProfile, &Rendered) -> Result<C, E> + Sync,
) -> Result<(Rendered, Vec<C>), E> {
    render_part(fleet, renderer, current, None, progress, check)
}

/// The render of a rollout's wave: the clusters in `reached` as `fleet` says, every other
/// cluster as the repository holds it now (`current`), untouched.
///
/// # Errors
/// A [`RenderError`] when a template fails.
pub(crate) fn render_wave(
    fleet: &Fleet,
    renderer: &Renderer,
    current: &Current,
    reached: &BTreeSet<String>,
) -> Result<Rendered, RenderError> {
    render_over(fleet, renderer, current, Some(reached))
}

fn render_part<C: Send, E: From<RenderError> + Send>(
    fleet: &Fleet,
    renderer: &Renderer,
    current: &Current,
    reached: Option<&BTreeSet<String>>,
    progress: &dyn Progress,
    check: impl Fn(&LoadedProfile, &Rendered) -> Result<C, E> + Sync,
) -> Result<(Rendered, Vec<C>), E> {
    let rendered: Vec<&LoadedProfile> =
        fleet.members.iter().filter(|m| reached.is_none_or(|r| r.contains(&m.profile.cluster.name))).collect();
    // First pass: what each cluster's layers contain, independent of where they are written,
    // each checked as it is made.
    let (first_pass, found): (Vec<Rendered>, Vec<C>) =
        par_map_counted(&rendered, "rendering and checking clusters", progress, |m| {
            let r = renderer.render(m)?;
            let c = check(m, &r)?;
            Ok::<_, E>((r, c))
        })
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .unzip();
    // The clusters a rollout has not reached, as they are.
    let kept: Vec<(String, Vec<KeptFile>)> = fleet
        .members
        .iter()
        .map(|m| m.profile.cluster.name.clone())
        .filter(|c| reached.is_some_and(|r| !r.contains(c)))
        .map(|c| {
            let files = current.cluster(&c);
            (c, files)
        })
        .collect();
    let kept_dirs: BTreeSet<String> = kept
        .iter()
        .flat_map(|(_, files)| files.iter().filter_map(|(p, _, _)| p.rsplit_once('/').map(|(d, _)| d.to_owned())))
        .collect();
    let chosen = layer_paths(&rendered, &first_pass, current, &kept_dirs);
    let base_paths: BTreeMap<&str, String> = rendered
        .iter()
        .flat_map(|m| m.profile.layers.iter().filter(|l| !l.external))
        .map(|l| (l.name.as_str(), l.repo_path()))
        .collect();
    // Second pass: clusters whose layers moved render again at their paths.
    let moved: Vec<usize> = (0..rendered.len())
        .filter(|&i| {
            let m = rendered[i];
            m.profile.layers.iter().filter(|l| !l.external).any(|l| {
                chosen.get(&(l.name.clone(), m.profile.cluster.name.clone())).map(String::as_str)
                    != base_paths.get(l.name.as_str()).map(String::as_str)
            })
        })
        .collect();
    let mut again: BTreeMap<usize, Rendered> = moved
        .iter()
        .copied()
        .zip(par_map_counted(&moved, "rendering layer variants", progress, |&i| {
            renderer.render(&rendered[i].clone_with_layer_paths(&chosen))
        }))
        .map(|(i, r)| r.map(|r| (i, r)))
        .collect::<Result<_, _>>()?;
    // Shared files are written once.
    let source = Source { kind: "fleet", name: fleet.name.clone() };
    let mut out = Rendered { source, files: Vec::new(), clusters: Vec::new() };
    let mut written: BTreeMap<String, usize> = BTreeMap::new();
    let mut add = |out: &mut Rendered, f: RenderedFile| {
        if let Some(&i) = written.get(&f.path) {
            debug_assert_eq!(out.files[i].content, f.content, "shared layer file {} differs", f.path);
            return;
        }
        written.insert(f.path.clone(), out.files.len());
        out.files.push(f);
    };
    for (i, first) in first_pass.into_iter().enumerate() {
        // A cluster whose layers all stay at their paths renders exactly as in the first pass.
        let r = again.remove(&i).unwrap_or(first);
        for f in r.files {
            add(&mut out, f);
        }
        out.clusters.extend(r.clusters);
    }
    for (cluster, files) in kept {
        let mut entries = Vec::new();
        for (path, layer, content) in files {
            if let Some(app) = path.strip_prefix(&format!("clusters/{cluster}/")) {
                entries.push(app.to_owned());
            }
            add(&mut out, RenderedFile { path, layer, content, objects: Arc::from([]) });
        }
        if !entries.is_empty() {
            out.clusters.push(ClusterIndex { path: format!("clusters/{cluster}/kustomization.yaml"), entries });
        }
    }
    Ok((out, found))
}

/// A file of a cluster the render keeps as it is: path, layer, content.
type KeptFile = (String, String, String);

/// A layer's path and its variants: the clusters of each distinct content, in order of first
/// appearance, each variant's content, and an index from content to variant.
type Variants<'a> = (String, Vec<Vec<&'a str>>, Vec<Vec<(&'a str, &'a str)>>, HashMap<Vec<(&'a str, &'a str)>, usize>);

/// Where each (layer, cluster) is written: clusters whose layer files are identical share a
/// directory. A variant keeps a directory of its layer that holds exactly its files now; of the
/// others, the largest takes the layer's path when it is free, and every other gets
/// `<path>-<first cluster of the variant>`. A directory a cluster outside the render uses
/// (`kept`) is free only for the variant with its files.
fn layer_paths(
    members: &[&LoadedProfile],
    first_pass: &[Rendered],
    current: &Current,
    kept: &BTreeSet<String>,
) -> BTreeMap<(String, String), String> {
    let mut variants: BTreeMap<&str, Variants<'_>> = BTreeMap::new();
    for (m, rendered) in members.iter().zip(first_pass) {
        for layer in m.profile.layers.iter().filter(|l| !l.external) {
            let path = layer.repo_path();
            let prefix = format!("{path}/");
            let mut files: Vec<(&str, &str)> = rendered
                .files
                .iter()
                .filter_map(|f| f.path.strip_prefix(&prefix).map(|rel| (rel, f.content.as_str())))
                .collect();
            files.sort_unstable();
            let (_, groups, contents, index) =
                variants.entry(layer.name.as_str()).or_insert_with(|| (path, Vec::new(), Vec::new(), HashMap::new()));
            let at = *index.entry(files.clone()).or_insert_with(|| {
                groups.push(Vec::new());
                contents.push(files);
                groups.len() - 1
            });
            groups[at].push(m.profile.cluster.name.as_str());
        }
    }
    let now = current.dirs();
    // No variant takes another layer's own path.
    let bases: BTreeSet<String> = variants.values().map(|(base, ..)| base.clone()).collect();
    let mut chosen = BTreeMap::new();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    for (layer, (base, groups, contents, _)) in variants {
        let mut path_of: Vec<Option<String>> = vec![None; groups.len()];
        // A variant whose files are where they are now stays there.
        for (i, files) in contents.iter().enumerate() {
            let here = now.iter().find(|(dir, held)| {
                (**dir == base || dir.starts_with(&format!("{base}-"))) && *held == files && !taken.contains(**dir)
            });
            if let Some((dir, _)) = here {
                taken.insert((*dir).to_owned());
                path_of[i] = Some((*dir).to_owned());
            }
        }
        // The others, largest first: the layer's path if free, else a path of their own.
        let mut rest: Vec<usize> = (0..groups.len()).filter(|i| path_of[*i].is_none()).collect();
        rest.sort_by_key(|i| (std::cmp::Reverse(groups[*i].len()), groups[*i].iter().min().copied()));
        for i in rest {
            let first = groups[i].iter().min().copied().unwrap_or_default();
            let free = |p: &str| !taken.contains(p) && !kept.contains(p) && (p == base || !bases.contains(p));
            let path = if free(&base) {
                base.clone()
            } else {
                let own = format!("{base}-{first}");
                // At most one candidate per directory in use is taken.
                let bound = taken.len() + kept.len() + 2;
                (1..bound)
                    .map(|n| if n == 1 { own.clone() } else { format!("{own}-{n}") })
                    .find(|p| free(p))
                    .unwrap_or(own)
            };
            taken.insert(path.clone());
            path_of[i] = Some(path);
        }
        for (i, group) in groups.iter().enumerate() {
            for cluster in group {
                chosen.insert(
                    (layer.to_owned(), (*cluster).to_owned()),
                    path_of[i].clone().unwrap_or_else(|| base.clone()),
                );
            }
        }
    }
    chosen
}

impl LoadedProfile {
    /// A copy whose rendered layers are written at the paths chosen for this cluster.
    fn clone_with_layer_paths(&self, chosen: &BTreeMap<(String, String), String>) -> LoadedProfile {
        let mut profile = self.profile.clone();
        for layer in profile.layers.iter_mut().filter(|l| !l.external) {
            if let Some(path) = chosen.get(&(layer.name.clone(), self.profile.cluster.name.clone())) {
                layer.path = Some(path.clone());
            }
        }
        LoadedProfile {
            profile,
            origin: self.origin.clone(),
            text: self.text.clone(),
            locations: Locations::default(),
            sealed: self.sealed.clone(),
        }
    }
}
