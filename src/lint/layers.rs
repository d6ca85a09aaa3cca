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
