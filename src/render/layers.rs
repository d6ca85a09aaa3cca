//! One layer's files: its Flux Kustomization and what its component's templates render, and
//! what a layer rendered after the others adds to its view.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tera::Context;

use super::{RenderError, Rendered, RenderedFile, Renderer, view};
use crate::components::Component;
use crate::profile::{LayerSpec, LoadedProfile, Profile};
use crate::secrets::Slot;

/// What the render asks of the modules above it for a layer rendered after the others (the
/// acceptance layer): facts of what osbx does in the cluster, which templates cannot derive.
#[derive(Debug, Clone, Copy)]
pub struct InCluster {
    /// The RBAC objects (roles and bindings) the layer's ServiceAccount is bound to, from the
    /// profile and what its other layers render (`rbac`, from what the commands do).
    pub(crate) roles: fn(&Profile, &Rendered) -> Vec<Value>,
    /// What is wrong with the profile's selection of checks for the layer's runs, each as its
    /// field path and message (`verify`, from its checks): a selection naming no check, or
    /// none, is refused at render, located.
    pub(crate) selection: fn(&Profile) -> Vec<(String, String)>,
    /// The Pod Security level the layer's probe namespace needs for the checks its runs select,
    /// and why (`verify`, from its checks).
    pub(crate) probe_security: fn(&Profile) -> (&'static str, String),
}

impl Renderer {
    /// The layer's `apps/<layer>.yaml` and the files of its component, with `extra` merged into
    /// the layer's view (a layer rendered after the others).
    pub(super) fn layer_files(
        &self,
        ctx: &mut Context,
        loaded: &LoadedProfile,
        slots: &[Slot],
        layer: &LayerSpec,
        component: &Component,
        extra: Option<Value>,
    ) -> Result<Vec<RenderedFile>, RenderError> {
        let p = &loaded.profile;
        // One context for every layer, its `layer` replaced each time (a fleet renders
        // thousands of profiles: the context is not copied per layer).
        let mut view = view::layer(layer);
        if let Some(Value::Object(extra)) = extra {
            for (k, v) in extra {
                view[k] = v;
            }
        }
        let held: Vec<_> = slots.iter().filter(|s| s.layer == layer.name).collect();
        if let (Some(sops), false) = (&p.secrets.sops, held.is_empty()) {
            view["decryption"] = sops.secret_ref.clone().into();
            view["sealed"] = held
                .iter()
                .filter(|s| loaded.sealed.0.contains_key(&s.path))
                .map(|s| s.file_name())
                .collect::<Vec<_>>()
                .into();
        }
        ctx.insert("layer", &view);
        let (owner, profile) = (&layer.name, p.name());
        let dir = layer.repo_path();
        let prefix = format!("{}/", component.name);
        let mut contents = Vec::new();
        for name in self.names.iter().filter(|n| n.starts_with(&prefix)) {
            let file = &name[prefix.len()..];
            if file.contains('/') || file.starts_with('_') {
                continue;
            }
            contents.extend(self.file(name, ctx, format!("{dir}/{file}"), owner, profile)?);
        }
        // Flux's own health check for the kinds without a Ready condition (Flux ≥ 2.5).
        if p.cluster.flux_takes_health_exprs() && !component.health.is_empty() {
            health_checks(&mut view, component, layer.wait, &contents);
            ctx.insert("layer", &view);
        }
        let app = format!("clusters/{}/apps/{}.yaml", p.cluster.name, layer.name);
        let mut files: Vec<RenderedFile> =
            self.file("cluster/layer.yaml", ctx, app, owner, profile)?.into_iter().collect();
        files.extend(contents);
        Ok(files)
    }
}

/// What a layer rendered after the others adds to its view: `revision`, a digest of every file
/// the others render (what changes when any of them does); `roles`, the RBAC objects its
/// ServiceAccount is bound to; `profileData`, the profile as YAML (a ConfigMap's `data`);
/// `ownsNamespace`, whether no other layer renders the acceptance namespace.
pub(super) fn after_others(loaded: &LoadedProfile, others: &Rendered, asks: InCluster) -> Result<Value, RenderError> {
    let p = &loaded.profile;
    let problems = (asks.selection)(p);
    if !problems.is_empty() {
        let diagnostics = problems
            .into_iter()
            .map(|(field, message)| crate::profile::Diagnostic {
                file: loaded.origin.clone(),
                pos: loaded.locations.find(&field),
                field: Some(field),
                message,
            })
            .collect();
        return Err(RenderError::Profile(crate::profile::ProfileError::Invalid(diagnostics)));
    }
    let roles = asks.roles;
    let revision = revision(p, others);
    let options = serde_saphyr::ser_options! { compact_list_indent: false, folded_wrap_chars: usize::MAX };
    let profile = serde_saphyr::to_string_with_options(p, options)
        .map_err(|e| RenderError::Template { name: "(profile)".into(), message: e.to_string() })?;
    // The namespace is the layer's own unless another layer renders it.
    let namespace = p.sections.acceptance.as_ref().map(|a| a.namespace.as_str());
    let owns_namespace = !others
        .files
        .iter()
        .flat_map(|f| f.objects.iter())
        .any(|o| crate::object::KnownKind::NAMESPACE.is(&o.id.gvk) && Some(o.id.name.as_str()) == namespace);
    let (level, why) = (asks.probe_security)(p);
    Ok(json!({"revision": revision, "roles": roles(p, others), "profileData": {"profile.yaml": profile},
              "ownsNamespace": owns_namespace, "probeSecurity": {"level": level, "why": why}}))
}

/// The revision of what the other layers deploy and of the criteria the layer's runs check by: a
/// digest of the criteria ([`crate::components::acceptance::Acceptance::criteria`]), of each file,
/// named within its layer, and of its objects (its text when it holds none). Not of where the repository keeps them: a
/// fleet writes a layer whose files differ between clusters to a directory of its own
/// (`fleet::layout`), and the same objects there are the same revision, so the revision a render
/// of the profile alone gives (`osbx status`, `osbx rollout`) is the one the fleet's commit holds.
fn revision(p: &Profile, others: &Rendered) -> String {
    let dirs: BTreeMap<&str, String> =
        p.layers.iter().map(|l| (l.name.as_str(), format!("{}/", l.repo_path()))).collect();
    // The criteria the runs check by: a change to them is a new revision too.
    let mut digest = p.criteria();
    digest.push('\0');
    for f in &others.files {
        let within = dirs.get(f.layer.as_str()).and_then(|d| f.path.strip_prefix(d.as_str()));
        digest.push_str(&f.layer);
        digest.push(':');
        digest.push_str(within.unwrap_or(&f.path));
        digest.push('\0');
        if f.objects.is_empty() {
            digest.push_str(&f.content);
        }
        for o in f.objects.iter() {
            let mut value = o.value.clone();
            // A layer's Kustomization says where its files are.
            if crate::flux::KUSTOMIZATION.is(&o.id.gvk)
                && let Some(spec) = value.get_mut("spec").and_then(Value::as_object_mut)
            {
                spec.remove("path");
            }
            digest.push_str(&value.to_string());
            digest.push('\0');
        }
        digest.push('\0');
    }
    crate::hash::sha256_hex(digest.as_bytes())[..crate::components::acceptance::REVISION_DIGITS].to_owned()
}

/// The layer's Flux health check for the kinds of `component` without a Ready condition, into
/// its `view`: their rules as `healthCheckExprs`; and, when the layer does not `wait` (Flux then
/// health-checks only the objects `healthChecks` lists, and evaluates the expressions for those
/// alone), every object of those kinds among its `files` as `healthChecks`.
fn health_checks(view: &mut serde_json::Value, component: &Component, wait: bool, files: &[RenderedFile]) {
    view["healthCheckExprs"] = component
        .health
        .iter()
        .map(|h| serde_json::json!({"apiVersion": h.kind.gvk().api_version(), "kind": h.kind.kind, "current": h.cel()}))
        .collect::<Vec<_>>()
        .into();
    if wait {
        return;
    }
    view["healthChecks"] = files
        .iter()
        .flat_map(|f| f.objects.iter())
        .filter(|o| component.health.iter().any(|h| h.kind.is(&o.id.gvk)))
        .map(|o| {
            let mut check =
                serde_json::json!({"apiVersion": o.id.gvk.api_version(), "kind": o.id.gvk.kind, "name": o.id.name});
            if let Some(ns) = &o.id.namespace {
                check["namespace"] = ns.clone().into();
            }
            check
        })
        .collect::<Vec<_>>()
        .into();
}
