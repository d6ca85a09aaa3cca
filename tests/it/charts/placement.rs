//! Where a chart's objects land and under which names, against what the profile says and what
//! osbx's verify and rbac look up.

use std::collections::BTreeSet;

use serde_json::Value;

use super::cases::{Subject, chart};
use super::manifest::{Baseline, describe};

/// Kinds without a namespace that the charts render (the CRDs a chart defines are read from its
/// own output).
const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "RuntimeClass",
    "PriorityClass",
    "StorageClass",
    "CSIDriver",
    "PersistentVolume",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "APIService",
];

/// The namespace the profile says a chart's namespaced objects go to.
pub fn home(b: &Baseline) -> Option<String> {
    let p = &b.release.subject().profile;
    match b.chart {
        chart::OPENSANDBOX => Some(p.sections.opensandbox.namespaces.control_plane.clone()),
        chart::KATA => p.sections.kata.as_ref().map(|k| k.namespace.clone()),
        chart::SPIRE | chart::SPIRE_CRDS => p.sections.spire.as_ref().map(|s| s.namespace.clone()),
        _ => None,
    }
}

fn cluster_scoped(b: &Baseline) -> BTreeSet<String> {
    let mut kinds: BTreeSet<String> = CLUSTER_SCOPED.iter().map(|k| (*k).to_owned()).collect();
    for crd in b.of_kind("CustomResourceDefinition").filter(|c| c["spec"]["scope"] == "Cluster") {
        kinds.extend(crd["spec"]["names"]["kind"].as_str().map(str::to_owned));
    }
    kinds
}

/// Every namespaced object lands in the chart's home namespace, which osbx renders.
pub fn namespace_problems(b: &Baseline) -> Vec<String> {
    let Some(home) = home(b) else {
        return vec![format!("chart {}: the profile names no namespace for it", b.chart)];
    };
    let subject = b.release.subject();
    let mut out = Vec::new();
    let rendered = subject.objects.iter().any(|o| o["kind"] == "Namespace" && o["metadata"]["name"] == home.as_str());
    if !rendered {
        out.push(format!("chart {}: its namespace {home:?} is not rendered by osbx (the chart creates none)", b.chart));
    }
    let cluster_scoped = cluster_scoped(b);
    for o in &b.objects {
        if o["kind"].as_str().is_some_and(|k| cluster_scoped.contains(k)) {
            continue;
        }
        let ns = b.namespace_of(o);
        if ns != home {
            out.push(format!(
                "chart {}: {} lands in {ns:?}, not in {home:?}, where the profile puts this chart",
                b.chart,
                describe(o, Some(ns))
            ));
        }
    }
    out
}

/// The pod spec of a workload object, if it has one.
fn pod_spec(o: &Value) -> Option<&Value> {
    let spec = match o["kind"].as_str()? {
        "Pod" => &o["spec"],
        "CronJob" => &o["spec"]["jobTemplate"]["spec"]["template"]["spec"],
        "Deployment" | "DaemonSet" | "StatefulSet" | "ReplicaSet" | "Job" => &o["spec"]["template"]["spec"],
        _ => return None,
    };
    spec.is_object().then_some(spec)
}

/// Every ServiceAccount a workload runs as, and every one a (Cluster)RoleBinding binds, is one
/// the chart renders in that namespace.
pub fn service_account_problems(b: &Baseline) -> Vec<String> {
    let accounts: BTreeSet<(String, String)> = b
        .of_kind("ServiceAccount")
        .filter_map(|sa| Some((b.namespace_of(sa).to_owned(), sa["metadata"]["name"].as_str()?.to_owned())))
        .collect();
    let mut out = Vec::new();
    for o in &b.objects {
        if let Some(spec) = pod_spec(o) {
            let name = spec["serviceAccountName"].as_str().unwrap_or("default");
            let ns = b.namespace_of(o);
            if name != "default" && !accounts.contains(&(ns.to_owned(), name.to_owned())) {
                out.push(format!(
                    "chart {}: {} runs as ServiceAccount {ns}/{name}, which the chart does not render there",
                    b.chart,
                    describe(o, Some(ns))
                ));
            }
        }
        if matches!(o["kind"].as_str(), Some("RoleBinding" | "ClusterRoleBinding")) {
            for s in o["subjects"].as_array().into_iter().flatten().filter(|s| s["kind"] == "ServiceAccount") {
                let ns = s["namespace"].as_str().unwrap_or_else(|| b.namespace_of(o));
                let name = s["name"].as_str().unwrap_or_default();
                if !accounts.contains(&(ns.to_owned(), name.to_owned())) {
                    out.push(format!(
                        "chart {}: {} binds ServiceAccount {ns}/{name}, which the chart does not render there",
                        b.chart,
                        describe(o, o["metadata"]["namespace"].as_str())
                    ));
                }
            }
        }
    }
    out
}

/// Kinds a chart renders that osbx's verify reads by name.
const LOOKED_UP: &[&str] = &["Deployment", "DaemonSet", "Service", "ServiceAccount"];

/// Every named object of those kinds that `osbx verify` reads (the permissions `osbx rbac`
/// grants it) is rendered under that name and namespace by the subject's charts or by osbx.
pub fn lookup_problems(subject: &Subject, baselines: &[&Baseline]) -> Vec<String> {
    let opts = osbx::rbac::Options {
        purpose: osbx::rbac::Purpose::Verify,
        prune: false,
        decryption_secret: false,
        in_cluster: false,
        serving: false,
        subjects: Vec::new(),
    };
    let mut out = Vec::new();
    for need in osbx::rbac::needs(&subject.profile, &subject.layers, &opts) {
        let osbx::cluster::need::Target::Objects { kind, namespace: Some(ns), name: Some(name), .. } = &need.target
        else {
            continue;
        };
        // The service proxy names `service:port`.
        let name = name.split(':').next().unwrap_or(name);
        if !LOOKED_UP.contains(&kind.kind.as_str()) {
            continue;
        }
        let found = |o: &Value, at: &str| o["kind"] == kind.kind.as_str() && o["metadata"]["name"] == name && at == ns;
        let by_osbx = subject.objects.iter().any(|o| found(o, o["metadata"]["namespace"].as_str().unwrap_or_default()));
        let by_chart = baselines.iter().any(|b| b.objects.iter().any(|o| found(o, b.namespace_of(o))));
        if !by_osbx && !by_chart {
            let rendered: Vec<String> = baselines
                .iter()
                .flat_map(|b| b.of_kind(&kind.kind).map(|o| describe(o, Some(b.namespace_of(o)))))
                .collect();
            out.push(format!(
                "osbx verify reads {} {ns}/{name} (`osbx rbac --for verify` grants `{}` on it), but nothing renders it \
                 there (the charts render: {})",
                kind.kind,
                need.verb,
                if rendered.is_empty() { "none".to_owned() } else { rendered.join(", ") }
            ));
        }
    }
    out
}
