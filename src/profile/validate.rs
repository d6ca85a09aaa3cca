//! Rules serde cannot express. Each violated rule names the offending field path; the loader
//! turns paths into `file:line:column`. The document-level rules (apiVersion, names, layers and
//! their `dependsOn`) are here; every component checks its own section (see
//! [`crate::components::Component::validate`]).

use std::collections::{BTreeMap, BTreeSet};

use super::document::{API_VERSION, KIND, Profile};
use crate::components;
use crate::spec::syntax::normalize_repo_path;
use crate::spec::{Violation, Violations};

/// Check a whole profile; an empty list means it is valid.
#[must_use]
fn validate(p: &Profile) -> Vec<Violation> {
    let mut v = Violations::default();
    if p.api_version != API_VERSION {
        v.push("apiVersion", format!("unsupported apiVersion {:?}: expected {API_VERSION:?}", p.api_version));
    }
    if p.kind != KIND {
        v.push("kind", format!("unsupported kind {:?}: expected {KIND:?}", p.kind));
    }
    if !p.metadata.name.is_empty() {
        v.dns_label("metadata.name", &p.metadata.name);
    }
    if p.cluster.name.is_empty() {
        v.missing("cluster.name");
    } else {
        v.dns_label("cluster.name", &p.cluster.name);
    }
    v.dns_label("cluster.fluxNamespace", &p.cluster.flux_namespace);
    v.dns_label("cluster.sourceRef", &p.cluster.source_ref);
    if !p.cluster.kubernetes_version_valid() {
        v.push(
            "cluster.kubernetesVersion",
            format!(
                "{:?} is not a Kubernetes version: write MAJOR.MINOR or vMAJOR.MINOR.PATCH (e.g. 1.36)",
                p.cluster.kubernetes_version
            ),
        );
    }
    if !p.cluster.flux_version_valid() {
        v.push(
            "cluster.fluxVersion",
            format!(
                "{:?} is not a Flux version: write MAJOR.MINOR or vMAJOR.MINOR.PATCH (e.g. 2.7)",
                p.cluster.flux_version
            ),
        );
    }
    layers(p, &mut v);
    p.secrets.validate(&mut v);
    p.images.validate(&mut v);
    let site = p.site();
    for c in components::ALL {
        (c.validate)(&p.sections, &site, &mut v);
    }
    if let Some(s) = &p.verify.spiffe {
        if s.id.is_empty() {
            v.missing("verify.spiffe.id");
        } else if !s.id.starts_with("spiffe://") {
            v.push("verify.spiffe.id", format!("{:?} is not a SPIFFE ID (spiffe://<trust domain>/<path>)", s.id));
        }
    }
    if let Some(name) = &p.verify.kata_shim
        && crate::components::kata::shim::by_name(name).is_none()
    {
        let known: Vec<&str> = crate::components::kata::shim::SHIMS.iter().map(|s| s.name).collect();
        v.push("verify.kataShim", format!("{name:?} is not a Kata shim osbx knows ({})", known.join(", ")));
    }
    v.into_vec()
}

/// Check a profile, then settle what the checked profile implies: with `images.mirror`, every
/// image onto the mirror (each component's, verify's), and `images.pullSecrets` to the charts'
/// pods. An empty list means it is valid and settled.
#[must_use]
pub(super) fn settle(p: &mut Profile) -> Vec<Violation> {
    let found = validate(p);
    if !found.is_empty() {
        return found;
    }
    let images = p.images.clone();
    let mut v = Violations::default();
    for c in components::ALL {
        (c.images)(&mut p.sections, &images, &mut v);
    }
    if images.rewrites() {
        // The smoke identity the `spire` section defines, written out so its image is rewritten.
        if p.verify.spiffe.is_none() {
            p.verify.spiffe = p.spiffe_smoke();
        }
        p.verify.mirror(&images, &mut v);
    }
    v.into_vec()
}

fn layers(p: &Profile, v: &mut Violations) {
    let names: BTreeSet<&str> = p.layers.iter().map(|l| l.name.as_str()).collect();
    let mut seen = BTreeSet::new();
    let mut paths = BTreeMap::new();
    let mut rendered = BTreeMap::new();
    for (i, layer) in p.layers.iter().enumerate() {
        let at = format!("layers[{i}]");
        if layer.name.is_empty() {
            v.missing(&format!("{at}.name"));
        } else {
            v.dns_label(&format!("{at}.name"), &layer.name);
        }
        if !seen.insert(layer.name.as_str()) {
            v.push(format!("{at}.name"), format!("duplicate layer name {:?}", layer.name));
        }
        for (j, dep) in layer.depends_on.iter().enumerate() {
            let field = format!("{at}.dependsOn[{j}]");
            if dep == &layer.name {
                v.push(field, format!("layer {:?} depends on itself", layer.name));
            } else if !names.contains(dep.as_str()) {
                v.push(
                    field,
                    format!("unknown layer {dep:?}: declare it under layers (use `external: true` for a layer osbx does not render)"),
                );
            }
        }
        if layer.external {
            if layer.component.is_some() {
                v.push(format!("{at}.component"), "an external layer has no component: osbx does not render it");
            }
            if layer.path.is_some() {
                v.push(format!("{at}.path"), "an external layer has no path: osbx does not render it");
            }
            continue;
        }
        match layer.component {
            None => v.push(
                format!("{at}.component"),
                format!(
                    "missing field `component` (one of: {}); set `external: true` for a layer osbx does not render",
                    components::names()
                ),
            ),
            Some(c) => {
                if let Some(first) = rendered.insert(c.name, i) {
                    v.push(
                        format!("{at}.component"),
                        format!("component {c:?} is already rendered by layers[{first}]"),
                    );
                }
            }
        }
        v.duration(&format!("{at}.interval"), &layer.interval);
        v.opt_duration(&format!("{at}.timeout"), layer.timeout.as_deref());
        v.opt_duration(&format!("{at}.retryInterval"), layer.retry_interval.as_deref());
        let raw = layer.raw_path();
        match normalize_repo_path(&raw) {
            Ok(path) => {
                if let Some(other) = paths.insert(path.clone(), i) {
                    v.push(format!("{at}.path"), format!("path {path:?} is already used by layers[{other}]"));
                }
            }
            Err(why) => v.push(format!("{at}.path"), format!("{raw:?} {why}")),
        }
    }
    if let Some(cycle) = find_cycle(p) {
        v.push("layers", format!("dependsOn cycle: {}", cycle.join(" -> ")));
    }
}

/// Depth-first search for a `dependsOn` cycle; returns it as a closed path of layer names.
fn find_cycle(p: &Profile) -> Option<Vec<String>> {
    fn visit<'a>(
        n: &'a str,
        deps: &BTreeMap<&'a str, Vec<&'a str>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|s| *s == n) {
            let mut cycle: Vec<String> = stack[at..].iter().map(|s| (*s).to_owned()).collect();
            cycle.push(n.to_owned());
            return Some(cycle);
        }
        if !done.insert(n) {
            return None;
        }
        stack.push(n);
        for d in deps.get(n).into_iter().flatten() {
            if *d != n
                && let Some(c) = visit(d, deps, stack, done)
            {
                return Some(c);
            }
        }
        stack.pop();
        None
    }
    let deps: BTreeMap<&str, Vec<&str>> =
        p.layers.iter().map(|l| (l.name.as_str(), l.depends_on.iter().map(String::as_str).collect())).collect();
    let mut done = BTreeSet::new();
    deps.keys().find_map(|n| visit(n, &deps, &mut Vec::new(), &mut done))
}
