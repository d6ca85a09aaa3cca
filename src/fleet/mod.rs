//! Fleets: many clusters in one repository from one base profile with per-cluster overrides.
//!
//! A fleet file (`kind: Fleet`) names a base profile and lists clusters, each with `overrides`
//! merged into the base document: mappings merge key by key, lists of named objects (pools,
//! layers) merge by `name`, anything else is replaced. The cluster's `cluster.name` is its entry's
//! name. Every cluster renders `clusters/<name>/…`; a layer whose files are the same for several
//! clusters is written once at its path and shared. When clusters differ, the largest group of
//! identical clusters keeps the layer's path and every other variant gets `<path>-<cluster>`
//! (its first cluster), so changing one cluster's overrides changes only that cluster's files.
//! A layer's files stay where they are when their content does not change (see [`layout`]).
//!
//! `rollout.waves` orders the clusters for `osbx rollout` ([`waves`]); each cluster names the
//! kubeconfig context (and file) it is reached with.

mod layout;
mod waves;

pub use layout::render;
pub(crate) use layout::{Current, cluster_dirs, render_checked, render_over, render_wave};
pub use waves::Wave;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::cluster::ConnectOptions;
use crate::merge::merge;
use crate::profile::{self, Diagnostic, LoadedProfile, Locations, ProfileError, ProfileSource};
use crate::progress::Progress;

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
    /// How `osbx rollout` brings a change to the clusters: its waves (default: one wave of
    /// every cluster).
    #[serde(default)]
    rollout: Option<waves::RolloutSpec>,
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
    /// Labels, for the selectors of `rollout.waves`.
    #[serde(default)]
    labels: BTreeMap<String, String>,
    /// The kubeconfig context `osbx rollout` reaches the cluster with (default: its name).
    #[serde(default)]
    context: Option<String>,
    /// The kubeconfig file with that context, relative to the fleet file (default: `--kubeconfig`,
    /// then `KUBECONFIG`, then `~/.kube/config`).
    #[serde(default)]
    kubeconfig: Option<String>,
}

/// How `osbx rollout` and `osbx status --fleet` reach a cluster of the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reach {
    /// The kubeconfig context.
    pub context: String,
    /// The kubeconfig file, when the fleet names one (resolved against the fleet file).
    pub kubeconfig: Option<std::path::PathBuf>,
}

impl Reach {
    /// How to connect to this cluster: its context, in the fleet's kubeconfig file for it or
    /// else the command's (`--kubeconfig`, `KUBECONFIG`, `~/.kube/config`), with the command's
    /// other access settings.
    #[must_use]
    pub(crate) fn connect_options(&self, command: &ConnectOptions) -> ConnectOptions {
        ConnectOptions {
            kubeconfig: self.kubeconfig.clone().or_else(|| command.kubeconfig.clone()),
            context: Some(self.context.clone()),
            ..command.clone()
        }
    }
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
    /// How each cluster is reached, in fleet order.
    pub reach: Vec<Reach>,
    /// The rollout's waves.
    pub waves: Vec<Wave>,
    /// `rollout.acceptNoEvidence`: a cluster whose every check was skipped passes its gate.
    pub accept_no_evidence: bool,
}

impl Fleet {
    /// The index of the cluster named `name`.
    #[must_use]
    pub fn position(&self, name: &str) -> Option<usize> {
        self.members.iter().position(|m| m.profile.cluster.name == name)
    }
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
    let labelled: Vec<(String, BTreeMap<String, String>)> =
        doc.clusters.iter().map(|m| (m.name.clone(), m.labels.clone())).collect();
    let waves = match waves::resolve(doc.rollout.as_ref(), &labelled) {
        Ok(w) => w,
        Err(found) => {
            problems.extend(found.into_iter().map(|(field, message)| diag(&field, message)));
            Vec::new()
        }
    };
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
    let dir = path.parent().unwrap_or(Path::new("."));
    let reach = doc
        .clusters
        .iter()
        .map(|m| Reach {
            context: m.context.clone().unwrap_or_else(|| m.name.clone()),
            kubeconfig: m.kubeconfig.as_ref().map(|k| dir.join(k)),
        })
        .collect();
    let accept_no_evidence = doc.rollout.as_ref().is_some_and(|r| r.accept_no_evidence);
    Ok(Fleet {
        name: doc.metadata.name,
        description: doc.metadata.description,
        members,
        reach,
        waves,
        accept_no_evidence,
    })
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
