//! Fleets: many clusters in one repository from one base profile with per-cluster overrides.
//!
//! A fleet file (`kind: Fleet`) names a base profile and lists clusters, each with `overrides`
//! merged into the base document: mappings merge key by key, lists of named objects (pools,
//! layers) merge by `name`, anything else is replaced. The cluster's `cluster.name` is its entry's
//! name. Every cluster renders `clusters/<name>/…`; a layer whose files are the same for several
//! clusters is written once at its path and shared. When clusters differ, the largest group of
//! identical clusters keeps the layer's path and every other variant gets `<path>-<cluster>`
//! (its first cluster), so changing one cluster's overrides changes only that cluster's files.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::merge::merge;
use crate::profile::{self, Diagnostic, LoadedProfile, Locations, ProfileError, ProfileSource};
use crate::render::{RenderError, Rendered, Renderer};

/// The fleet document.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FleetDoc {
    api_version: String,
    kind: String,
    metadata: FleetMeta,
    base: String,
    clusters: Vec<Member>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FleetMeta {
    name: String,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Member {
    name: String,
    #[serde(default)]
    overrides: Value,
}

/// A loaded fleet: every cluster's profile, validated.
#[derive(Debug)]
pub struct Fleet {
    /// Fleet name.
    pub name: String,
    /// The clusters, in fleet order.
    pub members: Vec<LoadedProfile>,
}

/// Load a fleet file and every cluster's profile.
///
/// # Errors
/// [`ProfileError`] with every problem found; a problem in a cluster's overrides points at the
/// fleet file, one in the base at the base profile.
pub fn load(path: &Path) -> Result<Fleet, ProfileError> {
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
        if let Err(why) = profile::validate::check_dns_label(&m.name) {
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
    let mut members = Vec::new();
    let mut all = Vec::new();
    for (i, m) in doc.clusters.iter().enumerate() {
        let mut merged = base.clone();
        merge(&mut merged, &m.overrides);
        merged["cluster"]["name"] = Value::String(m.name.clone());
        let member_text = serde_saphyr::to_string(&merged).unwrap_or_default();
        match profile::parse_quick(&format!("{origin} (cluster {})", m.name), member_text) {
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
    Ok(Fleet { name: doc.metadata.name, members })
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

/// Render every cluster, sharing identical layers.
///
/// # Errors
/// [`RenderError`] when a template fails.
pub fn render(fleet: &Fleet, renderer: &Renderer) -> Result<Rendered, RenderError> {
    // First pass: what each cluster's layers contain, independent of where they are written.
    let mut fingerprints: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new(); // layer → (cluster, fingerprint)
    let mut base_paths: BTreeMap<String, String> = BTreeMap::new();
    let mut first_pass: Vec<Rendered> = Vec::with_capacity(fleet.members.len());
    for m in &fleet.members {
        let rendered = renderer.render(m)?;
        for layer in m.profile.layers.iter().filter(|l| !l.external) {
            let path = profile::Profile::layer_path(layer);
            let prefix = format!("{path}/");
            let mut files: Vec<String> = rendered
                .files
                .iter()
                .filter(|f| f.path.starts_with(&prefix))
                .map(|f| format!("{}\n{}", &f.path[prefix.len()..], f.content))
                .collect();
            files.sort();
            fingerprints
                .entry(layer.name.clone())
                .or_default()
                .push((m.profile.cluster.name.clone(), files.join("\n\u{0}\n")));
            base_paths.insert(layer.name.clone(), path);
        }
        first_pass.push(rendered);
    }
    // Paths: the largest group of identical clusters keeps the layer's path.
    let mut chosen: BTreeMap<(String, String), String> = BTreeMap::new(); // (layer, cluster) → path
    for (layer, prints) in &fingerprints {
        let mut groups: Vec<Vec<&str>> = Vec::new();
        let mut keys: Vec<&str> = Vec::new();
        for (cluster, fp) in prints {
            match keys.iter().position(|k| *k == fp.as_str()) {
                Some(i) => groups[i].push(cluster),
                None => {
                    keys.push(fp);
                    groups.push(vec![cluster]);
                }
            }
        }
        let keeper = (0..groups.len())
            .max_by_key(|i| (groups[*i].len(), std::cmp::Reverse(groups[*i].iter().min().copied())))
            .unwrap_or(0);
        let base = &base_paths[layer];
        for (i, group) in groups.iter().enumerate() {
            let first = group.iter().min().copied().unwrap_or_default();
            let path = if i == keeper { base.clone() } else { format!("{base}-{first}") };
            for cluster in group {
                chosen.insert((layer.clone(), (*cluster).to_owned()), path.clone());
            }
        }
    }
    // Second pass: render at the chosen paths; shared files are written once.
    let mut out = Rendered { files: Vec::new(), clusters: Vec::new() };
    let mut written: BTreeMap<String, usize> = BTreeMap::new();
    for (m, first) in fleet.members.iter().zip(first_pass) {
        let cluster = &m.profile.cluster.name;
        let moved = m
            .profile
            .layers
            .iter()
            .filter(|l| !l.external)
            .any(|l| chosen.get(&(l.name.clone(), cluster.clone())) != base_paths.get(&l.name));
        // A cluster whose layers all stay at their paths renders exactly as in the first pass.
        let rendered = if moved { renderer.render(&m.clone_with_layer_paths(&chosen))? } else { first };
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
