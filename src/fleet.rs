//! Fleets: many clusters in one repository from one base profile with per-cluster overrides.
//!
//! A fleet file (`kind: Fleet`) names a base profile and lists clusters, each with `overrides`
//! merged into the base document: mappings merge key by key, lists of named objects (pools,
//! layers) merge by `name`, anything else is replaced. The cluster's `cluster.name` is its entry's
//! name. Every cluster renders `clusters/<name>/…`; a layer whose files are the same for several
//! clusters is written once at its path and shared. When clusters differ, the largest group of
//! identical clusters keeps the layer's path and every other variant gets `<path>-<cluster>`
//! (its first cluster), so changing one cluster's overrides changes only that cluster's files.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::merge::merge;
use crate::profile::{self, Diagnostic, LoadedProfile, Locations, ProfileError, ProfileSource};
use crate::progress::{Progress, Silent};
use crate::render::{RenderError, Rendered, Renderer};

/// A fleet: many clusters from one base profile, each with its own overrides.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FleetDoc {
    /// Must be `osbx.dev/v1alpha1`.
    api_version: String,
    /// Must be `Fleet`.
    kind: String,
    /// Name and description of the fleet.
    metadata: FleetMeta,
    /// The base profile: the name of an embedded profile, or a path relative to this file.
    base: String,
    /// The clusters (at least one).
    clusters: Vec<Member>,
}

/// Fleet metadata.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FleetMeta {
    /// Fleet name.
    name: String,
    /// One-line description.
    #[serde(default)]
    description: Option<String>,
}

/// One cluster of the fleet.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Member {
    /// Cluster name (its `cluster.name`: the tree goes to `clusters/<name>/`).
    name: String,
    /// Profile fields merged into the base for this cluster: mappings key by key, lists of named
    /// objects (pools, layers) by `name`, anything else replaced.
    #[serde(default)]
    #[schemars(with = "serde_json::Map<String, Value>")]
    overrides: Value,
}

/// The JSON Schema of the fleet document (draft 2020-12).
#[must_use]
pub fn schema() -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(FleetDoc)).unwrap_or_default();
    schema["title"] = "osbx fleet".into();
    schema
}

/// A loaded fleet: every cluster's profile, validated.
#[derive(Debug)]
pub struct Fleet {
    /// Fleet name.
    pub name: String,
    /// One-line description.
    pub description: Option<String>,
    /// The clusters, in fleet order.
    pub members: Vec<LoadedProfile>,
}

/// Load a fleet file and every cluster's profile, counting them on `progress`.
///
/// # Errors
/// [`ProfileError`] with every problem found; a problem in a cluster's overrides points at the
/// fleet file, one in the base at the base profile.
pub fn load(path: &Path, progress: &dyn Progress) -> Result<Fleet, ProfileError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ProfileError::Read { path: path.to_path_buf(), source: e })?;
    let locations = Locations::index(&text);
    let doc: FleetDoc = serde_saphyr::from_str(&text)
        .map_err(|e| ProfileError::Invalid(vec![profile::serde_diagnostic(&origin, &text, &locations, &e)]))?;
    let diag = |field: &str, message: String| Diagnostic {
        file: origin.clone(),
        pos: locations.find(field),
        field: Some(field.to_owned()),
        message,
    };
    let mut problems = Vec::new();
    if doc.api_version != profile::API_VERSION {
        problems.push(diag(
            "apiVersion",
            format!("unsupported apiVersion {:?}: expected {:?}", doc.api_version, profile::API_VERSION),
        ));
    }
    if doc.kind != "Fleet" {
        problems.push(diag("kind", format!("unsupported kind {:?}: expected \"Fleet\"", doc.kind)));
    }
    if doc.clusters.is_empty() {
        problems.push(diag("clusters", "a fleet needs at least one cluster".into()));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, m) in doc.clusters.iter().enumerate() {
        if let Err(why) = crate::spec::syntax::check_dns_label(&m.name) {
            problems.push(diag(&format!("clusters[{i}].name"), format!("{:?} is not a valid name: {why}", m.name)));
        }
        if !seen.insert(&m.name) {
            problems.push(diag(&format!("clusters[{i}].name"), format!("duplicate cluster {:?}", m.name)));
        }
        if !(m.overrides.is_null() || m.overrides.is_object()) {
            problems.push(diag(&format!("clusters[{i}].overrides"), "must be a mapping of profile fields".into()));
        }
    }
    if !problems.is_empty() {
        return Err(ProfileError::Invalid(problems));
    }
    let (base_origin, base_text) = base_text(path, &doc.base)?;
    let base_locations = Locations::index(&base_text);
    let base: Value = serde_saphyr::from_str(&base_text).map_err(|e| {
        ProfileError::Invalid(vec![profile::serde_diagnostic(&base_origin, &base_text, &base_locations, &e)])
    })?;
    let loaded = par_map_counted(&doc.clusters, "loading clusters", progress, |m| {
        let mut merged = base.clone();
        merge(&mut merged, &m.overrides);
        merged["cluster"]["name"] = Value::String(m.name.clone());
        profile::from_value(&format!("{origin} (cluster {})", m.name), &merged)
    });
    let mut members = Vec::new();
    let mut all = Vec::new();
    for (i, loaded) in loaded.into_iter().enumerate() {
        match loaded {
            Ok(loaded) => members.push(loaded),
            Err(ProfileError::Invalid(diags)) => {
                let prefix = format!("clusters[{i}].overrides");
                all.extend(
                    diags.into_iter().map(|d| relocate(d, &prefix, &origin, &locations, &base_origin, &base_locations)),
                );
            }
            Err(e) => return Err(e),
        }
    }
    if !all.is_empty() {
        return Err(ProfileError::Invalid(all));
    }
    Ok(Fleet { name: doc.metadata.name, description: doc.metadata.description, members })
}

/// Point a diagnostic of a merged profile at the override that set the field, else at the base.
fn relocate(
    d: Diagnostic,
    prefix: &str,
    origin: &str,
    fleet: &Locations,
    base_origin: &str,
    base: &Locations,
) -> Diagnostic {
    let field = d.field.clone().unwrap_or_default();
    let mut probe = field.as_str();
    loop {
        if let Some(pos) = fleet.get(&format!("{prefix}.{probe}")) {
            return Diagnostic { file: format!("{origin} ({prefix}.{field})"), pos, ..d };
        }
        match probe.rfind(['.', '[']) {
            Some(cut) => probe = &probe[..cut],
            None => break,
        }
    }
    Diagnostic { file: base_origin.to_owned(), pos: base.find(&field), ..d }
}

fn base_text(fleet_path: &Path, base: &str) -> Result<(String, String), ProfileError> {
    match ProfileSource::from_arg(Some(base)) {
        ProfileSource::Embedded(name) => profile::embedded_text(&name),
        ProfileSource::File(p) => {
            let p = if p.is_relative() { fleet_path.parent().unwrap_or(Path::new(".")).join(p) } else { p };
            let text = std::fs::read_to_string(&p).map_err(|e| ProfileError::Read { path: p.clone(), source: e })?;
            Ok((p.display().to_string(), text))
        }
    }
}

/// `f` over `items` on every core (scoped threads, one contiguous chunk each), in order.
/// [`par_map`], counting the items done as `task` on `progress`.
fn par_map_counted<T: Sync, R: Send>(
    items: &[T],
    task: &str,
    progress: &dyn Progress,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let done = AtomicUsize::new(0);
    let total = items.len();
    progress.count(task, 0, total);
    par_map(items, |item| {
        let r = f(item);
        progress.count(task, done.fetch_add(1, Ordering::Relaxed) + 1, total);
        r
    })
}

fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    if threads < 2 || items.len() < 2 {
        return items.iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let f = &f;
        let handles: Vec<_> =
            items.chunks(chunk).map(|part| scope.spawn(move || part.iter().map(f).collect::<Vec<R>>())).collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    })
}

/// Render every cluster, sharing identical layers.
///
/// # Errors
/// [`RenderError`] when a template fails.
pub fn render(fleet: &Fleet, renderer: &Renderer) -> Result<Rendered, RenderError> {
    render_checked(fleet, renderer, &Silent, |_, _| Ok(()))
}

/// [`render`], calling `check` with each cluster's own render (at its layers' usual paths)
/// before anything else; the first error from `check` stops the render. Counts the clusters
/// rendered and checked on `progress`.
///
/// # Errors
/// A [`RenderError`] when a template fails, or what `check` returns.
pub(crate) fn render_checked<E: From<RenderError>>(
    fleet: &Fleet,
    renderer: &Renderer,
    progress: &dyn Progress,
    mut check: impl FnMut(&LoadedProfile, &Rendered) -> Result<(), E>,
) -> Result<Rendered, E> {
    // First pass: what each cluster's layers contain, independent of where they are written.
    let first_pass: Vec<Rendered> =
        par_map_counted(&fleet.members, "rendering clusters", progress, |m| renderer.render(m))
            .into_iter()
            .collect::<Result<_, _>>()?;
    let total = fleet.members.len();
    progress.count("checking clusters", 0, total);
    for (i, (m, rendered)) in fleet.members.iter().zip(&first_pass).enumerate() {
        check(m, rendered)?;
        progress.count("checking clusters", i + 1, total);
    }
    let chosen = layer_paths(fleet, &first_pass);
    let base_paths: BTreeMap<&str, String> = fleet
        .members
        .iter()
        .flat_map(|m| m.profile.layers.iter().filter(|l| !l.external))
        .map(|l| (l.name.as_str(), l.repo_path()))
        .collect();
    // Second pass: clusters whose layers moved render again at their paths.
    let moved: Vec<usize> = (0..fleet.members.len())
        .filter(|&i| {
            let m = &fleet.members[i];
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
            renderer.render(&fleet.members[i].clone_with_layer_paths(&chosen))
        }))
        .map(|(i, r)| r.map(|r| (i, r)))
        .collect::<Result<_, _>>()?;
    // Shared files are written once.
    let source = crate::render::Source { kind: "fleet", name: fleet.name.clone() };
    let mut out = Rendered { source, files: Vec::new(), clusters: Vec::new() };
    let mut written: BTreeMap<String, usize> = BTreeMap::new();
    for (i, first) in first_pass.into_iter().enumerate() {
        // A cluster whose layers all stay at their paths renders exactly as in the first pass.
        let rendered = again.remove(&i).unwrap_or(first);
        for f in rendered.files {
            if let Some(&i) = written.get(&f.path) {
                debug_assert_eq!(out.files[i].content, f.content, "shared layer file {} differs", f.path);
                continue;
            }
            written.insert(f.path.clone(), out.files.len());
            out.files.push(f);
        }
        out.clusters.extend(rendered.clusters);
    }
    Ok(out)
}

/// A layer's path and its variants: the clusters of each distinct content, in order of first
/// appearance, and an index from content (relative path, text of each file) to variant.
type Variants<'a> = (String, Vec<Vec<&'a str>>, HashMap<Vec<(&'a str, &'a str)>, usize>);

/// Where each (layer, cluster) is written: clusters whose layer files are identical share a
/// path; the largest group keeps the layer's own path, every other variant gets
/// `<path>-<first cluster of the variant>`.
fn layer_paths(fleet: &Fleet, first_pass: &[Rendered]) -> BTreeMap<(String, String), String> {
    let mut variants: BTreeMap<&str, Variants<'_>> = BTreeMap::new();
    for (m, rendered) in fleet.members.iter().zip(first_pass) {
        for layer in m.profile.layers.iter().filter(|l| !l.external) {
            let path = layer.repo_path();
            let prefix = format!("{path}/");
            let mut files: Vec<(&str, &str)> = rendered
                .files
                .iter()
                .filter_map(|f| f.path.strip_prefix(&prefix).map(|rel| (rel, f.content.as_str())))
                .collect();
            files.sort_unstable();
            let (_, groups, index) =
                variants.entry(layer.name.as_str()).or_insert_with(|| (path, Vec::new(), HashMap::new()));
            let at = *index.entry(files).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[at].push(m.profile.cluster.name.as_str());
        }
    }
    let mut chosen = BTreeMap::new();
    for (layer, (base, groups, _)) in variants {
        let keeper = (0..groups.len())
            .max_by_key(|i| (groups[*i].len(), std::cmp::Reverse(groups[*i].iter().min().copied())))
            .unwrap_or(0);
        for (i, group) in groups.iter().enumerate() {
            let first = group.iter().min().copied().unwrap_or_default();
            let path = if i == keeper { base.clone() } else { format!("{base}-{first}") };
            for cluster in group {
                chosen.insert((layer.to_owned(), (*cluster).to_owned()), path.clone());
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
        LoadedProfile { profile, origin: self.origin.clone(), text: self.text.clone(), locations: Locations::default() }
    }
}
