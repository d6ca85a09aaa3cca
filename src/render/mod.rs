//! Render a profile into the files of a Flux repository.
//!
//! Templates are Tera files laid out like the output: `cluster/layer.yaml` becomes
//! `clusters/<cluster>/apps/<layer>.yaml` for every rendered layer, and every file in
//! `<component>/` becomes `<layer path>/<file>` for the layer that renders that component.
//! Files whose name starts with `_` are partials (included by others, never written); a template
//! that renders to blank text writes no file. The cluster's `kustomization.yaml` is not owned by
//! osbx: it is created from `cluster/kustomization.yaml` or merged into (see `repo`).

mod filters;
mod layers;
mod reads;
mod view;

pub use layers::InCluster;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use tera::{Context, Tera};

use crate::embedded;
use crate::object::Object;
use crate::profile::LoadedProfile;

/// The first line of every file osbx owns; a file without it is never overwritten unless forced.
pub(crate) const MARKER: &str = "Managed by osbx";

/// Why rendering failed.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// A template directory given with `--templates` could not be read.
    #[error("cannot read templates from {path}: {source}")]
    Read {
        /// The directory given.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A template does not parse or failed to render.
    #[error("template {name}: {message}")]
    Template {
        /// Template name.
        name: String,
        /// Tera's error chain, joined.
        message: String,
    },
    /// A sealed Secret file of the profile is not a SOPS file (the message names it).
    #[error("{0}")]
    Sealed(String),
    /// The profile asks for what the render cannot do (located: an acceptance layer's selection
    /// of checks names none of them).
    #[error(transparent)]
    Profile(crate::profile::ProfileError),
    /// A template produced YAML that does not parse, or a document that is not a Kubernetes
    /// object.
    #[error("template {name} produced invalid YAML: {message}")]
    InvalidYaml {
        /// Template name.
        name: String,
        /// The parser's message.
        message: String,
    },
}

/// One file osbx writes and owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedFile {
    /// Path relative to the repository root, `/`-separated.
    pub path: String,
    /// The layer the file belongs to (its Flux Kustomization or its contents).
    pub layer: String,
    /// Full content, ownership marker included.
    pub content: String,
    /// The Kubernetes objects in the content (parsed once, when the render checked the YAML;
    /// kustomize `Kustomization` files and files that are not YAML have none).
    pub objects: Arc<[Object]>,
}

/// Everything a render produces.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// What was rendered: the profile or the fleet whose past output this render replaces.
    pub source: Source,
    /// Owned files, in a stable order.
    pub files: Vec<RenderedFile>,
    /// The cluster kustomizations that must list osbx's layers (one per cluster).
    pub clusters: Vec<ClusterIndex>,
}

/// A profile or a fleet, as the owner of what it renders into a repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// `profile` or `fleet`.
    pub kind: &'static str,
    /// Its name.
    pub name: String,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

/// A cluster's `clusters/<cluster>/kustomization.yaml` and the entries osbx needs in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterIndex {
    /// Its path.
    pub path: String,
    /// `apps/<layer>.yaml` entries.
    pub entries: Vec<String>,
}

/// A Kubernetes object from a rendered file.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedObject {
    /// The file it comes from.
    pub path: String,
    /// The layer it belongs to.
    pub layer: String,
    /// The object with its identity.
    pub object: Object,
}

impl Rendered {
    /// The Kubernetes objects the files deploy, in file order.
    #[must_use]
    pub fn objects(&self) -> Vec<RenderedObject> {
        self.files
            .iter()
            .flat_map(|f| {
                f.objects.iter().map(|o| RenderedObject {
                    path: f.path.clone(),
                    layer: f.layer.clone(),
                    object: o.clone(),
                })
            })
            .collect()
    }
}

/// The loaded templates.
pub struct Renderer {
    tera: Tera,
    names: Vec<String>,
    /// Rendered YAML text → its objects: the clusters of a fleet render mostly the same files.
    parsed: Mutex<HashMap<String, Arc<[Object]>>>,
    /// What each template reads of its context.
    reads: reads::Reads,
    /// A template and the values it reads → its output (see [`reads`]).
    outputs: Mutex<HashMap<String, String>>,
    /// What a layer rendered after the others asks above the render (see [`InCluster`]).
    in_cluster: InCluster,
}

impl Renderer {
    /// The templates compiled into the binary, with files from `overrides` (same layout) taking
    /// precedence over embedded ones of the same name; `in_cluster` answers what an `acceptance`
    /// layer asks above the render (its ServiceAccounts' roles, whether its selection of checks
    /// holds). Every command builds it in one place, `crate::commands::renderer`.
    ///
    /// # Errors
    /// [`RenderError`] when the directory cannot be read or a template does not parse.
    pub fn new(overrides: Option<&Path>, in_cluster: InCluster) -> Result<Self, RenderError> {
        let mut sources: BTreeMap<String, String> =
            embedded::templates().iter().map(|(n, t)| ((*n).to_owned(), (*t).to_owned())).collect();
        if let Some(dir) = overrides {
            read_dir_into(dir, dir, &mut sources)?;
        }
        let mut tera = Tera::default();
        tera.autoescape_on(vec![]);
        filters::register(&mut tera);
        tera.add_raw_templates(sources.iter().map(|(n, t)| (n.as_str(), t.as_str())))
            .map_err(|e| RenderError::Template { name: "(templates)".into(), message: chain(&e) })?;
        let reads = reads::Reads::of(&sources);
        Ok(Self {
            tera,
            names: sources.into_keys().collect(),
            parsed: Mutex::default(),
            reads,
            outputs: Mutex::default(),
            in_cluster,
        })
    }

    /// Render every layer of the profile.
    ///
    /// # Errors
    /// [`RenderError`] when a template fails or produces invalid YAML.
    pub fn render(&self, loaded: &LoadedProfile) -> Result<Rendered, RenderError> {
        let p = &loaded.profile;
        let mut ctx = view::base(p, |name| self.reads.reads(name));
        let cluster_dir = format!("clusters/{}", p.cluster.name);
        // The sealed Secrets (secrets.sops): each layer lists its files and names the decryption
        // Secret, and the workloads reading one are marked with its revision.
        let slots = crate::secrets::slots(p);
        let mut revisions = BTreeMap::new();
        for slot in &slots {
            if let Some(text) = loaded.sealed.0.get(&slot.path) {
                let revision =
                    crate::secrets::revision(&slot.path, text).map_err(|e| RenderError::Sealed(e.to_string()))?;
                revisions.insert(slot.name(), revision);
            }
        }
        ctx.insert("sealed", &revisions);
        let mut files = Vec::new();
        let mut entries = Vec::new();
        let mut last = None;
        for layer in &p.layers {
            let Some(component) = layer.renders() else { continue };
            if component.after_others {
                last = Some((layer, component, entries.len()));
                continue;
            }
            files.extend(self.layer_files(&mut ctx, loaded, &slots, layer, component, None)?);
            entries.push(format!("apps/{}.yaml", layer.name));
        }
        let source = Source { kind: "profile", name: p.name().to_owned() };
        if let Some((layer, component, at)) = last {
            let others = Rendered { source: source.clone(), files: files.clone(), clusters: Vec::new() };
            let extra = layers::after_others(loaded, &others, self.in_cluster)?;
            files.extend(self.layer_files(&mut ctx, loaded, &slots, layer, component, Some(extra))?);
            entries.insert(at, format!("apps/{}.yaml", layer.name));
        }
        Ok(Rendered {
            source,
            files,
            clusters: vec![ClusterIndex { path: format!("{cluster_dir}/kustomization.yaml"), entries }],
        })
    }

    /// A new cluster `kustomization.yaml` listing `resources`.
    ///
    /// # Errors
    /// [`RenderError`] when the template fails.
    pub fn cluster_kustomization(&self, resources: &[String]) -> Result<String, RenderError> {
        let mut ctx = Context::new();
        ctx.insert("resources", resources);
        self.render_one("cluster/kustomization.yaml", &ctx)
    }

    /// The file `template` renders at `path`, owned by `layer` of `profile` (`None` when it
    /// renders to blank text).
    fn file(
        &self,
        template: &str,
        ctx: &Context,
        path: String,
        layer: &str,
        profile: &str,
    ) -> Result<Option<RenderedFile>, RenderError> {
        let body = self.render_one(template, ctx)?;
        if body.trim().is_empty() {
            return Ok(None);
        }
        let objects = if Path::new(&path).extension().is_some_and(|e| e == "yaml" || e == "yml") {
            self.parse_yaml(template, &body)?
        } else {
            Arc::from([])
        };
        Ok(Some(RenderedFile { content: with_marker(&path, &body, profile), path, layer: layer.to_owned(), objects }))
    }

    /// The Kubernetes objects of rendered YAML (every template's output is checked to parse;
    /// kustomize's own `Kustomization` is not an object of the cluster).
    fn parse_yaml(&self, template: &str, body: &str) -> Result<Arc<[Object]>, RenderError> {
        let lock = || self.parsed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(objects) = lock().get(body) {
            return Ok(objects.clone());
        }
        let invalid = |message: String| RenderError::InvalidYaml { name: template.to_owned(), message };
        // A rendered file may hold thousands of objects (a generated list of ConfigMaps, say):
        // the parser's default budget (1,024 documents, 250,000 nodes) guards untrusted input,
        // and the templates' output is not that.
        let options = serde_saphyr::options! {
            budget: serde_saphyr::budget! {
                max_documents: 1_000_000,
                max_nodes: 50_000_000,
                max_events: 200_000_000,
            },
        };
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_str_multiple_with_options(body, options).map_err(|e| invalid(e.to_string()))?;
        let objects: Arc<[Object]> = docs
            .into_iter()
            .filter(serde_json::Value::is_object)
            .filter(|d| !d["apiVersion"].as_str().is_some_and(|v| v.starts_with("kustomize.config.k8s.io/")))
            .map(|d| Object::new(d).map_err(|e| invalid(e.to_string())))
            .collect::<Result<_, _>>()?;
        lock().insert(body.to_owned(), objects.clone());
        Ok(objects)
    }

    /// `name` rendered with `ctx`, trimmed: once for the same values of what it reads.
    fn render_one(&self, name: &str, ctx: &Context) -> Result<String, RenderError> {
        let lock = || self.outputs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = self.reads.key(name, ctx);
        if let Some(out) = key.as_ref().and_then(|k| lock().get(k).cloned()) {
            return Ok(out);
        }
        let out = self.render_uncached(name, ctx)?;
        if let Some(key) = key {
            lock().insert(key, out.clone());
        }
        Ok(out)
    }

    fn render_uncached(&self, name: &str, ctx: &Context) -> Result<String, RenderError> {
        let mut out = self
            .tera
            .render(name, ctx)
            .map_err(|e| RenderError::Template { name: name.to_owned(), message: chain(&e) })?;
        let trimmed = out.trim_end().len();
        out.truncate(trimmed);
        out = out.trim_start_matches('\n').to_owned();
        out.push('\n');
        Ok(out)
    }
}

fn read_dir_into(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) -> Result<(), RenderError> {
    let err = |e| RenderError::Read { path: dir.display().to_string(), source: e };
    let mut entries: Vec<_> = std::fs::read_dir(dir).map_err(err)?.collect::<Result<_, _>>().map_err(err)?;
    entries.sort_by_key(std::fs::DirEntry::path);
    for entry in entries {
        let path = entry.path();
        if path.is_dir() {
            read_dir_into(root, &path, out)?;
        } else {
            let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().replace('\\', "/");
            let text = std::fs::read_to_string(&path)
                .map_err(|e| RenderError::Read { path: path.display().to_string(), source: e })?;
            out.insert(rel, text);
        }
    }
    Ok(())
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        parts.push(s.to_string());
        cur = s.source();
    }
    parts.join(": ")
}

/// Prefix `content` with the ownership marker in the comment syntax of the file type.
#[must_use]
pub(crate) fn with_marker(path: &str, content: &str, profile: &str) -> String {
    let note = format!("{MARKER} (profile {profile}): edit the profile and re-render, not this file.");
    if Path::new(path).extension().is_some_and(|e| e.eq_ignore_ascii_case("md")) {
        format!("<!-- {note} -->\n\n{content}")
    } else {
        format!("# {note}\n{content}")
    }
}

/// Whether file text carries the ownership marker on its first line.
#[must_use]
pub fn is_owned(content: &str) -> bool {
    content.lines().next().is_some_and(|l| l.contains(MARKER))
}

/// Remove the marker line (and the blank line after an HTML comment), for comparisons.
#[must_use]
pub fn strip_marker(content: &str) -> &str {
    if !is_owned(content) {
        return content;
    }
    let rest = content.split_once('\n').map_or("", |(_, r)| r);
    if content.starts_with("<!--") { rest.strip_prefix('\n').unwrap_or(rest) } else { rest }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// One renderer over many different profiles renders each exactly as a renderer of its own
    /// does: the outputs it keeps (see [`reads`]) never stand in for another profile's.
    #[test]
    fn a_shared_renderer_renders_every_variant_as_a_fresh_one() {
        let overrides = [
            json!(null),
            json!({"cluster": {"name": "other", "fluxNamespace": "gitops", "sourceRef": "fleet-repo"}}),
            json!({"opensandbox": {"namespaces": {"controlPlane": "cp-two", "sandbox": "sbx-two"}}}),
            json!({"opensandbox": {"controller": {"replicas": 3}, "server": {"config": {"log": {"level": "DEBUG"}}}}}),
            json!({"cluster": {"name": "third"}, "opensandbox": {"release": {"name": "osb", "interval": "5m"}}}),
        ];
        let shared = crate::commands::renderer(None).unwrap();
        let mut variants = 0;
        for (file, _) in embedded::profiles() {
            let name = file.trim_end_matches(".yaml");
            let (_, text) = crate::profile::embedded_text(name).unwrap();
            let base: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
            for o in &overrides {
                let mut doc = base.clone();
                crate::merge::merge(&mut doc, o);
                let loaded = crate::profile::from_value(name, &doc).unwrap_or_else(|e| panic!("{name} {o}: {e:?}"));
                let fresh = crate::commands::renderer(None).unwrap().render(&loaded).unwrap();
                let again = shared.render(&loaded).unwrap();
                let paths = |r: &Rendered| r.files.iter().map(|f| f.path.clone()).collect::<Vec<_>>();
                assert_eq!(paths(&again), paths(&fresh), "{name} with {o}");
                for (a, f) in again.files.iter().zip(&fresh.files) {
                    assert!(a == f, "{name} with {o}: {} differs:\n{}\n---\n{}", f.path, a.content, f.content);
                }
                assert_eq!(again.clusters, fresh.clusters, "{name} with {o}");
                variants += 1;
            }
        }
        assert!(variants >= 4 * overrides.len());
        assert!(shared.outputs.lock().unwrap().len() > 1, "the shared renderer keeps outputs");
    }
}
