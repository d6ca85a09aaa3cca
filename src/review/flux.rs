//! What Flux applies from a repository, read the way its controllers read it, without a cluster:
//! a cluster's directory (`clusters/<name>/`) built as kustomize-controller builds a path, then
//! every Flux `Kustomization` found there followed to its `spec.path` in the same repository,
//! each one a layer holding its own objects and itself (as [`crate::deploy::layers`] groups a
//! render).
//!
//! kustomize-controller's build, as far as osbx's trees and their neighbours go: a directory
//! with a `kustomization.yaml` takes its `resources` (files and directories, recursively) and
//! its `namespace`; a directory without one takes every YAML file under it (Flux generates that
//! kustomization). Any other kustomize feature (patches, generators, name prefixes, images,
//! components) is refused, naming the file: the review would not show what Flux applies.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::deploy::Layer;
use crate::object::Object;
use crate::repo::{Snapshot, join};

/// Why a tree cannot be read as Flux reads it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FluxError {
    /// A file is not YAML, or a document is not a Kubernetes object.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// A kustomization uses what the offline review does not build.
    #[error(
        "{path}: kustomize's {feature} is not built by the offline review (it builds resources and namespace): compare this tree with a cluster instead (osbx diff)"
    )]
    Unsupported {
        /// The kustomization file.
        path: String,
        /// The field.
        feature: String,
    },
    /// A Flux Kustomization sets what the review does not apply, or applies another source.
    #[error(
        "Kustomization {kustomization}: {field} is not applied by the offline review ({why}): compare this tree with a cluster instead (osbx diff)"
    )]
    Unfollowed {
        /// `namespace/name`.
        kustomization: String,
        /// The field (`spec.postBuild`, `spec.sourceRef`).
        field: String,
        /// What it would do.
        why: String,
    },
    /// A resource a kustomization names is not in the tree.
    #[error("{path}: resource {resource} is not in the repository")]
    Missing {
        /// The kustomization file.
        path: String,
        /// The `resources` entry that cannot be read.
        resource: String,
    },
}

/// A generous budget: a chart's CRDs and a generated list of objects are large, and the text is
/// the repository's (or helm's) own.
fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_documents: 1_000_000,
            max_nodes: 50_000_000,
            max_events: 200_000_000,
        },
    }
}

/// The Kubernetes objects of a multi-document YAML text (empty documents and kustomize's own
/// `Kustomization` skipped).
///
/// # Errors
/// Why the text is not YAML, or a document not an object with `apiVersion`, `kind` and
/// `metadata.name`.
pub(crate) fn objects(text: &str) -> Result<Vec<Object>, String> {
    let docs: Vec<Value> = serde_saphyr::from_str_multiple_with_options(text, options()).map_err(|e| e.to_string())?;
    docs.into_iter()
        .filter(|d| d.as_object().is_some_and(|m| !m.is_empty()))
        .filter(|d| !d["apiVersion"].as_str().is_some_and(|v| v.starts_with("kustomize.config.k8s.io/")))
        .map(|d| Object::new(d).map_err(|e| e.to_string()))
        .collect()
}

/// The kustomize fields [`build`] honours.
const BUILT: [&str; 5] = ["apiVersion", "kind", "metadata", "resources", "namespace"];

/// The file of the repository each object of a side was read from (for messages that name it).
pub(crate) type Files = std::collections::BTreeMap<crate::object::ObjectRef, String>;

/// The objects kustomize-controller builds from the directory `dir` of `tree`, each with the file
/// it was read from.
///
/// # Errors
/// [`FluxError`]: a file that does not parse, a kustomize feature the review does not build, a
/// resource that is not there.
pub(crate) fn build(tree: &Snapshot, dir: &str) -> Result<Vec<(Object, String)>, FluxError> {
    let dir = dir.trim_start_matches("./").trim_end_matches('/');
    let kustomization = ["kustomization.yaml", "kustomization.yml", "Kustomization"]
        .into_iter()
        .map(|name| join(dir, name))
        .find(|p| tree.read(p).is_some());
    let Some(path) = kustomization else {
        // Flux generates a kustomization of every manifest under the path.
        let mut out = Vec::new();
        for (path, bytes) in tree.under(dir) {
            out.extend(parse(path, bytes)?.into_iter().map(|o| (o, path.to_owned())));
        }
        return Ok(out);
    };
    let text = String::from_utf8_lossy(tree.read(&path).unwrap_or_default()).into_owned();
    let doc: Value =
        serde_saphyr::from_str(&text).map_err(|e| FluxError::Invalid { path: path.clone(), message: e.to_string() })?;
    if let Some(feature) = doc.as_object().and_then(|m| m.keys().find(|k| !BUILT.contains(&k.as_str()))) {
        return Err(FluxError::Unsupported { path, feature: feature.clone() });
    }
    let mut out = Vec::new();
    for resource in doc["resources"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        let target = join(dir, resource);
        if let Some(bytes) = tree.read(&target) {
            out.extend(parse(&target, bytes)?.into_iter().map(|o| (o, target.clone())));
        } else if tree.has_dir(&target) {
            out.extend(build(tree, &target)?);
        } else {
            return Err(FluxError::Missing { path, resource: resource.to_owned() });
        }
    }
    if let Some(ns) = doc["namespace"].as_str() {
        for (o, _) in &mut out {
            if namespaced(&o.value, &[]) {
                o.value["metadata"]["namespace"] = Value::String(ns.to_owned());
                o.id.namespace = Some(ns.to_owned());
            }
        }
    }
    Ok(out)
}

fn parse(path: &str, bytes: &[u8]) -> Result<Vec<Object>, FluxError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| FluxError::Invalid { path: path.to_owned(), message: format!("not UTF-8: {e}") })?;
    objects(text).map_err(|message| FluxError::Invalid { path: path.to_owned(), message })
}

/// Kinds that are not namespaced, whatever a manifest says (Kubernetes' own; a CRD's scope is
/// its `spec.scope`).
const CLUSTER_SCOPED: [&str; 16] = [
    "Namespace",
    "Node",
    "PersistentVolume",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "StorageClass",
    "PriorityClass",
    "RuntimeClass",
    "IngressClass",
    "CSIDriver",
    "APIService",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

/// Whether `obj` is namespaced: not a cluster-scoped Kubernetes kind, and not the kind of a
/// cluster-scoped CRD among `crds`.
pub(crate) fn namespaced(obj: &Value, crds: &[&Value]) -> bool {
    let kind = obj["kind"].as_str().unwrap_or_default();
    if CLUSTER_SCOPED.contains(&kind) {
        return false;
    }
    let group = obj["apiVersion"].as_str().and_then(|v| v.split_once('/')).map_or("", |(g, _)| g);
    !crds.iter().any(|crd| {
        crd["spec"]["scope"] == "Cluster" && crd["spec"]["group"] == group && crd["spec"]["names"]["kind"] == kind
    })
}

/// The fields of a Flux Kustomization that change what its path builds (kustomize-controller
/// applies them after the build), with what each does: the review does not, so it refuses them.
const TRANSFORMS: [(&str, &str); 10] = [
    ("postBuild", "variables substituted into every object"),
    ("patches", "patches applied to the objects"),
    ("patchesStrategicMerge", "patches applied to the objects"),
    ("patchesJson6902", "patches applied to the objects"),
    ("images", "image names and tags replaced"),
    ("targetNamespace", "every namespaced object moved into another namespace"),
    ("namePrefix", "every name prefixed"),
    ("nameSuffix", "every name suffixed"),
    ("components", "kustomize components added"),
    ("commonMetadata", "labels and annotations added to every object"),
];

/// The Flux source the reviewed repository is to the cluster (`GitRepository
/// flux-system/flux-system`, as `flux bootstrap` names it and `cluster.sourceRef` says).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Repository<'a> {
    /// The Flux namespace (`cluster.fluxNamespace`).
    pub namespace: &'a str,
    /// The GitRepository's name (`cluster.sourceRef`).
    pub name: &'a str,
}

/// Refuse a Kustomization that the review would not follow as Flux does: one that transforms
/// its build, is suspended (`spec.suspend: true`: nothing applied), applies to another cluster
/// (`spec.kubeConfig`), or applies a source other than `repository`.
fn followable(k: &Object, repository: Repository<'_>) -> Result<(), FluxError> {
    let spec = &k.value["spec"];
    let shown = format!("{}/{}", k.id.namespace.as_deref().unwrap_or_default(), k.id.name);
    let unfollowed =
        |field: &str, why: String| FluxError::Unfollowed { kustomization: shown.clone(), field: field.to_owned(), why };
    for (field, does) in TRANSFORMS {
        if !spec[field].is_null() {
            return Err(unfollowed(&format!("spec.{field}"), format!("Flux would apply it: {does}")));
        }
    }
    // kustomize-controller applies (and prunes) nothing of a suspended Kustomization: what the
    // cluster holds of it stays as last applied, which git does not say. A kubeConfig applies
    // the build to another cluster, not this one.
    match crate::flux::NotHere::of(spec) {
        Some(why @ crate::flux::NotHere::Suspended) => {
            return Err(unfollowed(
                why.field(),
                "suspended: kustomize-controller applies nothing of it, nor prunes, until it is resumed, and what the cluster holds of it is not in git".to_owned(),
            ));
        }
        Some(why @ crate::flux::NotHere::Remote) => {
            let remote = &spec["kubeConfig"];
            let holder =
                [("secretRef", "Secret"), ("configMapRef", "ConfigMap")].into_iter().find_map(|(field, kind)| {
                    remote[field]["name"].as_str().map(|name| {
                        format!(" (the kubeconfig of {kind} {}/{name})", k.id.namespace.as_deref().unwrap_or_default())
                    })
                });
            return Err(unfollowed(
                why.field(),
                format!("it applies to another cluster{}, not the one under review", holder.unwrap_or_default()),
            ));
        }
        None => {}
    }
    let source = &spec["sourceRef"];
    let kind = source["kind"].as_str().unwrap_or_default();
    let name = source["name"].as_str().unwrap_or_default();
    let namespace = source["namespace"].as_str().or(k.id.namespace.as_deref()).unwrap_or_default();
    if kind != crate::flux::GIT_REPOSITORY.kind || name != repository.name || namespace != repository.namespace {
        return Err(unfollowed(
            "spec.sourceRef",
            format!(
                "it applies {kind} {namespace}/{name}, not the repository under review (GitRepository {}/{})",
                repository.namespace, repository.name
            ),
        ));
    }
    Ok(())
}

/// The layers Flux applies for the cluster whose directory is `cluster_dir`: each Flux
/// Kustomization reached from it (also through other layers) with what its path builds to, in
/// the order they are found; the directory's other objects form a layer named after it.
///
/// # Errors
/// [`FluxError`] as [`build`] refuses a path; a Kustomization that transforms its build, is
/// suspended, applies to another cluster or applies another source than `repository`
/// ([`FluxError::Unfollowed`]).
pub(crate) fn layers(
    tree: &Snapshot,
    cluster_dir: &str,
    repository: Repository<'_>,
) -> Result<(Vec<Layer>, Files), FluxError> {
    let mut files = Files::new();
    let mut read = |dir: &str| -> Result<Vec<Object>, FluxError> {
        Ok(build(tree, dir)?
            .into_iter()
            .map(|(o, file)| {
                files.entry(o.id.clone()).or_insert(file);
                o
            })
            .collect())
    };
    let root = read(cluster_dir)?;
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let mut pending: Vec<Object> = Vec::new();
    let mut rest = Vec::new();
    for o in root {
        if crate::flux::KUSTOMIZATION.is(&o.id.gvk) { pending.push(o) } else { rest.push(o) }
    }
    if !rest.is_empty() {
        out.push(layer(cluster_dir.trim_end_matches('/').to_owned(), rest));
    }
    while let Some(k) = (!pending.is_empty()).then(|| pending.remove(0)) {
        if !seen.insert(k.id.clone()) {
            continue;
        }
        followable(&k, repository)?;
        let path = k.value["spec"]["path"].as_str().unwrap_or_default().to_owned();
        let mut objects = vec![k.clone()];
        if tree.has_dir(&path) || tree.read(&path).is_some() {
            for o in read(&path)? {
                if crate::flux::KUSTOMIZATION.is(&o.id.gvk) {
                    pending.push(o.clone());
                }
                objects.push(o);
            }
        }
        out.push(layer(k.id.name.clone(), objects));
    }
    Ok((out, files))
}

fn layer(name: String, mut objects: Vec<Object>) -> Layer {
    objects.sort_by(|a, b| a.id.cmp(&b.id));
    objects.dedup_by(|a, b| a.id == b.id);
    Layer { name, external_deps: Vec::new(), objects }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPO: Repository<'static> = Repository { namespace: "flux-system", name: "flux-system" };

    fn tree(files: &[(&str, &str)]) -> Snapshot {
        Snapshot::of(files.iter().map(|(p, t)| ((*p).to_owned(), t.as_bytes().to_vec())))
    }

    #[test]
    fn a_cluster_directory_is_followed_to_its_layers() {
        let t = tree(&[
            (
                "clusters/c/kustomization.yaml",
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [apps/a.yaml]\n",
            ),
            (
                "clusters/c/apps/a.yaml",
                "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: a, namespace: flux-system}\nspec: {path: ./platform/a, sourceRef: {kind: GitRepository, name: flux-system}}\n",
            ),
            ("clusters/c/apps/ignored.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: not-listed}\n"),
            (
                "platform/a/x.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: ns}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: ns}\n",
            ),
        ]);
        let (layers, files) = layers(&t, "clusters/c", REPO).unwrap();
        assert_eq!(
            files.iter().find(|(id, _)| id.name == "x").map(|(_, f)| f.as_str()),
            Some("platform/a/x.yaml"),
            "each object knows its file"
        );
        assert_eq!(layers.len(), 1);
        assert_eq!(layers[0].name, "a");
        let ids: Vec<String> = layers[0].objects.iter().map(|o| o.id.to_string()).collect();
        // (`n` would be YAML 1.1's false, to kustomize as to osbx.)
        assert_eq!(ids, ["Namespace/ns", "ConfigMap/ns/x", "Kustomization/flux-system/a"], "in apply order");
    }

    #[test]
    fn a_namespace_is_set_and_other_features_are_refused() {
        let t = tree(&[
            ("p/kustomization.yaml", "resources: [a.yaml]\nnamespace: z\n"),
            (
                "p/a.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: z}\n",
            ),
            ("q/kustomization.yaml", "resources: [../p]\npatches: []\n"),
        ]);
        let objs = build(&t, "p").unwrap();
        assert_eq!(objs[0].0.id.namespace.as_deref(), Some("z"));
        assert_eq!(objs[1].0.id.namespace, None);
        assert_eq!(objs[0].1, "p/a.yaml");
        let e = build(&t, "q").unwrap_err().to_string();
        assert!(e.contains("q/kustomization.yaml: kustomize's patches is not built"), "{e}");
    }

    #[test]
    fn a_kustomization_is_followed_only_as_flux_applies_it() {
        let cluster = |spec: &str| {
            tree(&[(
                "clusters/c/a.yaml",
                &format!(
                    "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {{name: a, namespace: flux-system}}\nspec: {{path: ./p, {spec}}}\n"
                ),
            )])
        };
        let ours = "sourceRef: {kind: GitRepository, name: flux-system}";
        assert!(layers(&cluster(ours), "clusters/c", REPO).is_ok());
        for (field, value) in [
            ("postBuild", "{substitute: {x: y}}"),
            ("patches", "[]"),
            ("images", "[{name: a, newTag: b}]"),
            ("targetNamespace", "other"),
            ("namePrefix", "x-"),
            ("nameSuffix", "-x"),
            ("components", "[../c]"),
            ("commonMetadata", "{labels: {a: b}}"),
        ] {
            let e = layers(&cluster(&format!("{ours}, {field}: {value}")), "clusters/c", REPO).unwrap_err().to_string();
            assert!(e.contains(&format!("Kustomization flux-system/a: spec.{field} is not applied")), "{e}");
        }
        for other in [
            "sourceRef: {kind: GitRepository, name: elsewhere}",
            "sourceRef: {kind: OCIRepository, name: flux-system}",
            "sourceRef: {kind: GitRepository, name: flux-system, namespace: other}",
        ] {
            let e = layers(&cluster(other), "clusters/c", REPO).unwrap_err().to_string();
            assert!(
                e.contains("spec.sourceRef is not applied") && e.contains("not the repository under review"),
                "{e}"
            );
        }
    }

    /// kustomize-controller applies nothing of a suspended Kustomization (and prunes nothing), and
    /// applies a `kubeConfig` one to another cluster: neither is reviewed as applied here.
    #[test]
    fn a_suspended_or_remote_kustomization_is_refused_by_name() {
        let cluster = |spec: &str| {
            tree(&[
                (
                    "clusters/c/a.yaml",
                    &format!(
                        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {{name: a, namespace: flux-system}}\nspec: {{path: ./p, sourceRef: {{kind: GitRepository, name: flux-system}}{spec}}}\n"
                    ),
                ),
                ("p/x.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: ns}\n"),
            ])
        };
        // Not suspended: followed, as before.
        for spec in ["", ", suspend: false"] {
            let (l, _) = layers(&cluster(spec), "clusters/c", REPO).unwrap();
            assert_eq!(l[0].objects.len(), 2, "{spec}: {:?}", l[0].objects);
        }
        for (spec, field, why) in [
            (", suspend: true", "spec.suspend", "suspended: kustomize-controller applies nothing of it"),
            (", suspend: 'true'", "spec.suspend", "suspended: kustomize-controller applies nothing of it"),
            (
                ", kubeConfig: {secretRef: {name: remote}}",
                "spec.kubeConfig",
                "it applies to another cluster (the kubeconfig of Secret flux-system/remote)",
            ),
            (
                ", kubeConfig: {configMapRef: {name: remote}}",
                "spec.kubeConfig",
                "it applies to another cluster (the kubeconfig of ConfigMap flux-system/remote)",
            ),
        ] {
            let e = layers(&cluster(spec), "clusters/c", REPO).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("Kustomization flux-system/a: {field} is not applied by the offline review")),
                "{e}"
            );
            assert!(e.contains(why), "{spec}: {e}");
        }
        // A Kustomization reached through a layer is held to the same.
        let mut files = vec![(
            "clusters/c/a.yaml".to_owned(),
            "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: a, namespace: flux-system}\nspec: {path: ./p, sourceRef: {kind: GitRepository, name: flux-system}}\n".to_owned(),
        )];
        files.push((
            "p/b.yaml".to_owned(),
            "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: b, namespace: flux-system}\nspec: {path: ./q, suspend: true, sourceRef: {kind: GitRepository, name: flux-system}}\n".to_owned(),
        ));
        let t = Snapshot::of(files.into_iter().map(|(p, t)| (p, t.into_bytes())));
        let e = layers(&t, "clusters/c", REPO).unwrap_err().to_string();
        assert!(e.starts_with("Kustomization flux-system/b: spec.suspend is not applied"), "{e}");
    }
}
