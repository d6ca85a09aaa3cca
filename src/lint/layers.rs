//! `layers.duplicate-object`: two layers writing one object.

use std::collections::BTreeMap;

use super::{Linter, Severity};
use crate::object::ObjectRef;
use crate::render::RenderedObject;

pub(super) fn duplicates(l: &mut Linter<'_>, objects: &[RenderedObject]) {
    let mut owners: BTreeMap<&ObjectRef, Vec<&str>> = BTreeMap::new();
    for o in objects {
        let layers = owners.entry(&o.object.id).or_default();
        if !layers.contains(&o.layer.as_str()) {
            layers.push(&o.layer);
        }
    }
    for (object, layers) in owners.into_iter().filter(|(_, l)| l.len() > 1) {
        l.add(
            "layers.duplicate-object",
            Severity::Error,
            "layers",
            format!(
                "{object} is written by layers {}: their Flux Kustomizations would fight over it",
                layers.join(" and ")
            ),
            "render it in one layer only (e.g. put shared namespaces in one layer)",
        );
    }
}

/// `layers.flux-health`: layers holding kinds without a Ready condition (Pools) on a Flux too
/// old for `healthCheckExprs` (before 2.5): Flux calls them Ready as soon as the objects exist.
pub(super) fn flux_health(l: &mut Linter<'_>) {
    let cluster = &l.loaded.profile.cluster;
    if cluster.flux_takes_health_exprs() {
        return;
    }
    let held: Vec<String> = l
        .loaded
        .profile
        .rendered_layers()
        .filter(|layer| layer.renders().is_some_and(|c| !c.health.is_empty()))
        .map(|layer| layer.name.clone())
        .collect();
    if held.is_empty() {
        return;
    }
    let (major, minor) = crate::spec::FLUX_HEALTH_EXPRS;
    l.add(
        "layers.flux-health",
        Severity::Warning,
        "cluster.fluxVersion",
        format!(
            "Flux {} takes no healthCheckExprs (Flux ≥ {major}.{minor} does): it calls layer(s) {} Ready as soon as their Pools exist, filled or not (osbx apply and verify still check them)",
            cluster.flux_version,
            held.join(", ")
        ),
        &format!("upgrade Flux to {major}.{minor} or later and set cluster.fluxVersion"),
    );
}
