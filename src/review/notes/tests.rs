use serde_json::json;

use super::*;
use crate::review::charts::ChartId;

type Charts<'a> = &'a [(ObjectRef, Expansion)];

fn obj(v: Value) -> Object {
    Object::new(v).unwrap()
}

fn expansion(objects: Vec<(Object, bool)>, upgrade_crds: &str) -> Expansion {
    let chart = ChartId { name: "c".into(), version: "1".into(), app_version: None, source: "s".into() };
    Expansion {
        chart,
        objects,
        unread: Vec::new(),
        defaults: std::sync::Arc::new(serde_json::Value::Null),
        upgrade_crds: upgrade_crds.into(),
    }
}

fn crd(versions: &[(&str, bool)]) -> Object {
    let versions: Vec<Value> = versions.iter().map(|(n, served)| json!({"name": n, "served": served})).collect();
    obj(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "pools.sandbox.opensandbox.io"},
        "spec": {"group": "sandbox.opensandbox.io", "names": {"kind": "Pool"}, "scope": "Namespaced", "versions": versions}
    }))
}

fn noted(change: &Change, before: &[&Object], after: &[&Object], charts: (Charts<'_>, Charts<'_>)) -> String {
    noted_in(Own { layer: "l", before: None, after: None, from_chart: false }, None, change, (before, after), charts)
}

/// The notes on `change`, an object of `own`'s layer (found in `before` and `after` when `own`
/// names none), with `acceptance` the acceptance layer's Job.
fn noted_in<'a>(
    mut own: Own<'a>,
    acceptance: Option<&AcceptanceJob>,
    change: &Change,
    (before, after): (&[&'a Object], &[&'a Object]),
    charts: (Charts<'_>, Charts<'_>),
) -> String {
    let find = |objects: &[&'a Object]| objects.iter().copied().find(|o| o.id == change.id);
    own.before = own.before.or_else(|| find(before));
    own.after = own.after.or_else(|| find(after));
    let sides = Sides {
        before: before.to_vec(),
        after: after.to_vec(),
        charts_before: charts.0,
        charts_after: charts.1,
        acceptance,
    };
    notes(change, &own, &sides).join("\n")
}

#[test]
fn a_runtime_class_change_names_its_handler_and_the_pools_that_use_it() {
    let rc = |handler: &str| {
        obj(
            json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata"}, "handler": handler}),
        )
    };
    let pool = obj(json!({
        "apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": "Pool", "metadata": {"name": "vm", "namespace": "s"},
        "spec": {"template": {"spec": {"runtimeClassName": "kata"}}}
    }));
    let (before, after) = (rc("kata-qemu"), rc("kata-clh"));
    let change = Change::new(after.id.clone(), Action::Configured);
    let n = noted(&change, &[&before, &pool], &[&after, &pool], (&[], &[]));
    assert!(n.contains("RuntimeClass kata changes its handler \"kata-qemu\" → \"kata-clh\""), "{n}");
    assert!(n.contains("(Pool/s/vm)") && n.contains("take it when they start"), "{n}");
}

#[test]
fn a_crd_that_stops_serving_a_version_says_which() {
    let (before, after) = (crd(&[("v1alpha1", true), ("v1", true)]), crd(&[("v1alpha1", false), ("v1", true)]));
    let change = Change::new(after.id.clone(), Action::Configured);
    let n = noted(&change, &[&before], &[&after], (&[], &[]));
    assert_eq!(
        n,
        "served versions v1alpha1, v1 → v1: Pool objects stored at a version no longer served cannot be read"
    );
}

#[test]
fn a_crd_of_a_charts_crds_directory_is_neither_deleted_nor_upgraded() {
    let release = crate::flux::HELM_RELEASE.object(Some("flux-system"), "r");
    let (before, after) = (crd(&[("v1", true)]), crd(&[("v1", true), ("v2", true)]));
    // Dropped from crds/: Helm never deletes it.
    let charts = [(release.clone(), expansion(vec![(before.clone(), true)], "Skip"))];
    let gone = Change::new(before.id.clone(), Action::Deleted);
    let n = noted(&gone, &[&before], &[], (&charts, &[]));
    assert!(n.starts_with("dropped from the crds/ directory of HelmRelease/flux-system/r's chart"), "{n}");
    assert!(n.contains("the CRD and every Pool in the cluster (with their pods and sandboxes) stay"), "{n}");
    // The same CRD deleted by the repository (not a chart's crds/): gone, and its objects.
    let n = noted(&gone, &[&before], &[], (&[], &[]));
    assert!(n.starts_with("the CRD is deleted"), "{n}");
    // Changed in crds/ with upgrade.crds Skip (the default): the change does not reach the cluster.
    let changed = Change::new(after.id.clone(), Action::Configured);
    let skip = [(release.clone(), expansion(vec![(after.clone(), true)], "Skip"))];
    let n = noted(&changed, &[&before], &[&after], (&skip, &skip));
    assert!(n.contains("helm-controller's upgrade skips those (upgrade.crds: Skip)"), "{n}");
    // With CreateReplace it does: the served versions are said instead.
    let replace = [(release, expansion(vec![(after.clone(), true)], "CreateReplace"))];
    let n = noted(&changed, &[&before], &[&after], (&replace, &replace));
    assert!(n.starts_with("served versions v1 → v1, v2") && !n.contains("Skip"), "{n}");
}

#[test]
fn a_namespace_flux_prunes_says_everything_in_it_goes() {
    let ns = obj(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gone"}}));
    let cm = obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "gone"}}));
    let change = Change::new(ns.id.clone(), Action::Deleted);
    let n = noted(&change, &[&ns, &cm], &[], (&[], &[]));
    assert_eq!(n, "Flux prunes namespace gone: everything in it is deleted");
    // When its objects reappear elsewhere, it is a move.
    let moved = obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "new"}}));
    let n = noted(&change, &[&ns, &cm], &[&moved], (&[], &[]));
    assert!(n.starts_with("namespace gone moves to new"), "{n}");
    // An object of that name every namespace has, there before as after, moves nowhere.
    let kept = obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "other"}}));
    let n = noted(&change, &[&ns, &cm, &kept], &[&moved, &kept], (&[], &[]));
    assert!(n.starts_with("namespace gone moves to new:"), "{n}");
}

#[test]
fn an_acceptance_job_at_a_new_revision_says_the_checks_run_again() {
    let job = |revision: &str| {
        obj(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "acc", "namespace": "a"},
                   "spec": {"template": {"metadata": {"annotations": {"osbx.dev/revision": revision}}}}}))
    };
    let acceptance =
        AcceptanceJob { layer: "checks".into(), job: crate::components::acceptance::JOB.object(Some("a"), "acc") };
    let ours = || Own { layer: "checks", before: None, after: None, from_chart: false };
    let noted = |own: Own<'_>, change: &Change, before: &Object, after: &Object| {
        noted_in(own, Some(&acceptance), change, (&[before], &[after]), (&[], &[]))
    };
    let (old, new) = (job("0123456789abcdef"), job("fedcba9876543210"));
    let change = Change::new(new.id.clone(), Action::Configured);
    let n = noted(ours(), &change, &old, &new);
    assert!(n.starts_with("the acceptance checks run again in the cluster at revision fedcba9876543210:"), "{n}");
    assert_eq!(noted(ours(), &change, &new, &new), "");
    // Text a pull request put there is not repeated.
    let forged = job("x\n### osbx diff: no changes");
    let n = noted(ours(), &change, &old, &forged);
    assert!(n.starts_with("the acceptance checks run again in the cluster:") && !n.contains("###"), "{n}");
}

/// The note is the acceptance layer's Job's own: a Job the change annotates the same way in
/// another layer, under another name or namespace, rendered by a chart, or with no acceptance
/// layer in the profile, gets none; and the revision said is the layer's own Job's, not that of
/// a Job of the same identity in another layer.
#[test]
fn only_the_acceptance_layers_own_job_says_the_checks_run_again() {
    let job = |ns: &str, name: &str, revision: &str| {
        obj(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
                   "spec": {"template": {"metadata": {"annotations": {"osbx.dev/revision": revision}}}}}))
    };
    let acceptance =
        AcceptanceJob { layer: "checks".into(), job: crate::components::acceptance::JOB.object(Some("a"), "acc") };
    let in_layer = |layer| Own { layer, before: None, after: None, from_chart: false };
    let says = "the acceptance checks run again";
    for (own, (ns, name), acceptance) in [
        (in_layer("other"), ("a", "acc"), Some(&acceptance)),
        (in_layer("checks"), ("a", "impostor"), Some(&acceptance)),
        (in_layer("checks"), ("flux-system", "acc"), Some(&acceptance)),
        (Own { from_chart: true, ..in_layer("checks") }, ("a", "acc"), Some(&acceptance)),
        (in_layer("checks"), ("a", "acc"), None),
    ] {
        let (old, new) = (job(ns, name, "0123456789abcdef"), job(ns, name, "fedcba9876543210"));
        let change = Change::new(new.id.clone(), Action::Configured);
        let n = noted_in(own, acceptance, &change, (&[&old], &[&new]), (&[], &[]));
        assert!(!n.contains(says), "Job/{ns}/{name}: {n}");
    }
    // A Job of osbx's identity in another layer, listed first, does not lend the note its
    // revision: the layer's own Job is read.
    let (old, new) = (job("a", "acc", "0123456789abcdef"), job("a", "acc", "fedcba9876543210"));
    let impostor = job("a", "acc", "1111111111111111");
    let change = Change::new(new.id.clone(), Action::Configured);
    let own = Own { layer: "checks", before: Some(&old), after: Some(&new), from_chart: false };
    let n = noted_in(own, Some(&acceptance), &change, (&[&impostor, &old], &[&impostor, &new]), (&[], &[]));
    assert!(n.starts_with("the acceptance checks run again in the cluster at revision fedcba9876543210:"), "{n}");
}
