//! Comparing a cluster's two sides layer by layer, and folding a fleet's identical changes into
//! one entry.

use std::collections::{BTreeMap, BTreeSet};

use crate::changeset::Action;
use crate::deploy::{self, Layer};
use crate::object::{Object, ObjectRef};

use super::sides::ClusterSide;
use super::{Count, Entry, notes};

/// Compare one cluster's two sides layer by layer and note what each change means
/// (`acceptance`: the acceptance layer's Job as the head's profile renders it).
pub(super) fn compare_cluster(
    cluster: &str,
    (before, after): (&ClusterSide, &ClusterSide),
    acceptance: Option<&notes::AcceptanceJob>,
    counts: &mut Vec<Count>,
    out: &mut Vec<Entry>,
) {
    let all_before: Vec<&Object> = before.layers.iter().flat_map(|l| &l.objects).collect();
    let all_after: Vec<&Object> = after.layers.iter().flat_map(|l| &l.objects).collect();
    let sides = notes::Sides {
        before: all_before,
        after: all_after,
        charts_before: &before.charts,
        charts_after: &after.charts,
        acceptance,
    };
    let mut names: Vec<&str> = after.layers.iter().map(|l| l.name.as_str()).collect();
    names.extend(before.layers.iter().map(|l| l.name.as_str()).filter(|n| !after.layers.iter().any(|l| l.name == *n)));
    for name in names {
        let pick = |s: &ClusterSide| s.layers.iter().filter(|l| l.name == name).cloned().collect::<Vec<Layer>>();
        // Two renders compared: deploy's comparison, as a live diff compares with a cluster.
        let (old, new) = (pick(before), pick(after));
        let changes =
            futures::executor::block_on(deploy::compare(deploy::Before::Render(&old), &new)).unwrap_or_default();
        let mut count = Count { cluster: cluster.to_owned(), layer: name.to_owned(), ..Count::default() };
        for mut c in changes.0 {
            let key = (name.to_owned(), c.id.clone());
            let own = notes::Own {
                layer: name,
                before: in_layer(&old, &c.id),
                after: in_layer(&new, &c.id),
                from_chart: after.origin.contains_key(&key) || before.origin.contains_key(&key),
            };
            let notes = notes::notes(&c, &own, &sides);
            // A HelmRelease the same in git whose chart changes (a bump pinned by its source)
            // is upgraded by helm-controller: it is a change, shown with what changes in it.
            if matches!(c.action, Action::Unchanged) && crate::flux::HELM_RELEASE.is(&c.id.gvk) && !notes.is_empty() {
                c.action = Action::Configured;
            }
            match c.action {
                Action::Created => count.created += 1,
                Action::Configured => count.configured += 1,
                Action::Deleted => count.deleted += 1,
                Action::Unchanged | Action::Skipped => {
                    count.unchanged += 1;
                    continue;
                }
            }
            let release = after.origin.get(&key).or_else(|| before.origin.get(&key)).map(ToString::to_string);
            out.push(Entry {
                clusters: vec![cluster.to_owned()],
                layer: name.to_owned(),
                object: c.id.to_string(),
                id: c.id.clone(),
                action: c.action,
                release,
                notes,
                diff: c.diff.unwrap_or_default(),
            });
        }
        counts.push(count);
    }
}

/// The object `id` of a layer (as [`compare_cluster`] picks it on one side).
fn in_layer<'a>(layers: &'a [Layer], id: &ObjectRef) -> Option<&'a Object> {
    layers.iter().flat_map(|l| &l.objects).find(|o| o.id == *id)
}

/// Fold entries that are the same change on several clusters into one naming them, in the order
/// they first appear.
pub(super) fn fold(entries: Vec<Entry>) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    let mut index: BTreeMap<(String, String, String, String, Vec<String>), usize> = BTreeMap::new();
    for e in entries {
        let key =
            (e.layer.clone(), e.object.clone(), e.diff.clone(), e.release.clone().unwrap_or_default(), e.notes.clone());
        if let Some(&i) = index.get(&key) {
            let clusters: BTreeSet<String> = out[i].clusters.iter().chain(&e.clusters).cloned().collect();
            out[i].clusters = clusters.into_iter().collect();
        } else {
            index.insert(key, out.len());
            out.push(e);
        }
    }
    out
}
