//! Reading what the real Flux controllers and the (played) OpenSandbox controller wrote: the layer
//! objects, their Ready conditions and timestamps, and the Pools.

use std::time::Duration;

use kube::Client;
use serde_json::{Value, json};

use super::secs_of;
use crate::cluster::{api_for, wait_for};

/// Where a profile puts what the loop reads, from osbx's own loader (so its defaults hold): the
/// namespaces and the Flux objects of its layers.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The control-plane namespace (the chart's controller and server, the API key Secret).
    pub control_plane: String,
    /// The sandbox namespace (Pools, BatchSandboxes).
    pub sandbox: String,
    /// The HelmRelease (namespace, name).
    pub release: (String, String),
    /// The Flux objects of the layers, as (apiVersion, kind, namespace, name): the chart's
    /// source, the HelmRelease and one Kustomization per layer.
    pub layer_objects: Vec<(&'static str, &'static str, String, String)>,
    /// The Kustomizations' namespace.
    pub flux: String,
}

impl Layout {
    /// The layout of a profile document.
    pub fn of(profile: &Value) -> Self {
        let p = osbx::profile::from_value("e2e profile", profile).unwrap_or_else(|e| panic!("{e}")).profile;
        let o = &p.sections.opensandbox;
        let ns = o.release_namespace().to_owned();
        let flux = p.cluster.flux_namespace.clone();
        let mut layer_objects = vec![
            ("source.toolkit.fluxcd.io/v1", "GitRepository", ns.clone(), o.source.name.clone()),
            ("helm.toolkit.fluxcd.io/v2", "HelmRelease", ns.clone(), o.release.name.clone()),
        ];
        for layer in p.rendered_layers() {
            layer_objects.push(("kustomize.toolkit.fluxcd.io/v1", "Kustomization", flux.clone(), layer.name.clone()));
        }
        Self {
            control_plane: o.namespaces.control_plane.clone(),
            sandbox: o.namespaces.sandbox.clone(),
            release: (ns, o.release.name.clone()),
            layer_objects,
            flux,
        }
    }
}

/// An object as JSON, or `None` when absent.
pub async fn get(client: &Client, api_version: &str, kind: &str, ns: &str, name: &str) -> Option<Value> {
    let obj = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": ns}});
    let (api, name) = api_for(client, &obj).await;
    api.get_opt(&name).await.expect("read").map(|o| serde_json::to_value(o).unwrap())
}

/// A Pool of the sandbox namespace `ns`.
pub async fn pool(client: &Client, ns: &str, name: &str) -> Option<Value> {
    get(client, "sandbox.opensandbox.io/v1alpha1", "Pool", ns, name).await
}

/// The condition `kind` of an object.
pub fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == kind)
}

/// `None` when the object is Ready=True at its current generation (Flux's rule: the object's
/// `status.observedGeneration` equals `metadata.generation`), else what is not.
pub fn not_ready(obj: &Value) -> Option<String> {
    let generation = obj["metadata"]["generation"].as_i64();
    let observed = obj["status"]["observedGeneration"].as_i64();
    let ready = condition(obj, "Ready");
    let is_ready = ready.is_some_and(|c| c["status"] == "True");
    (!(is_ready && generation.is_some() && generation == observed)).then(|| {
        format!(
            "generation {generation:?}, observedGeneration {observed:?}, Ready {}",
            ready.map_or_else(|| "absent".to_owned(), Value::to_string)
        )
    })
}

/// Every layer object Ready at its current generation, read now; panics naming the others.
pub async fn assert_layers_ready(client: &Client, layout: &Layout, when: &str) -> Vec<Value> {
    let mut objects = Vec::new();
    let mut problems = Vec::new();
    for (api_version, kind, ns, name) in &layout.layer_objects {
        match get(client, api_version, kind, ns, name).await {
            None => problems.push(format!("{kind}/{ns}/{name} is missing")),
            Some(obj) => {
                if let Some(why) = not_ready(&obj) {
                    problems.push(format!("{kind}/{ns}/{name}: {why}"));
                }
                objects.push(obj);
            }
        }
    }
    assert!(problems.is_empty(), "{when}, not every layer object is Ready at its generation:\n{}", problems.join("\n"));
    objects
}

/// Seconds from the object's creation to its Ready condition's last transition (Flux's own
/// time to Ready, or to failure when Ready=False), and that transition as seconds since the
/// epoch (second resolution: the API's timestamps).
pub fn ready_times(obj: &Value) -> (f64, f64) {
    let created = secs_of(&obj["metadata"]["creationTimestamp"]);
    let ready = condition(obj, "Ready").map(|c| secs_of(&c["lastTransitionTime"])).expect("a Ready condition");
    (ready - created, ready)
}

/// `Kind/name` of an object, for bench and messages.
pub fn label(obj: &Value) -> String {
    format!("{}/{}", obj["kind"].as_str().unwrap_or("?"), obj["metadata"]["name"].as_str().unwrap_or("?"))
}

/// Wait until the Kustomization `name` has applied `commit` and is Ready at its generation.
pub async fn wait_applied(client: &Client, layout: &Layout, name: &str, commit: &str, timeout: Duration) -> Value {
    let want = format!("main@sha1:{commit}");
    wait_for(&format!("Kustomization {name} Ready at {want}"), timeout, || {
        let want = want.clone();
        async move {
            let k = get(client, "kustomize.toolkit.fluxcd.io/v1", "Kustomization", &layout.flux, name).await?;
            (k["status"]["lastAppliedRevision"] == want.as_str() && not_ready(&k).is_none()).then_some(k)
        }
    })
    .await
}

/// Assert a Pool holds what the profile asks: `total ≥ poolMin` and, where `bufferMin ≥ 1`,
/// `available ≥ 1`, as seen by the controller at the Pool's generation.
pub fn assert_pool_filled(pool: &Value) {
    let name = pool["metadata"]["name"].as_str().unwrap_or("?");
    let (cap, status) = (&pool["spec"]["capacitySpec"], &pool["status"]);
    let int = |v: &Value| v.as_i64().unwrap_or(0);
    assert_eq!(status["observedGeneration"], pool["metadata"]["generation"], "Pool {name} not observed: {status}");
    assert!(int(&status["total"]) >= int(&cap["poolMin"]), "Pool {name}: total < poolMin: {status}");
    if int(&cap["bufferMin"]) >= 1 {
        assert!(int(&status["available"]) >= 1, "Pool {name}: nothing available: {status}");
    }
}

/// The names of the Pods of a pool (the OpenSandbox controller names them `<pool>-<suffix>`
/// and owns them through the Pool).
pub async fn pool_pods(client: &Client, ns: &str, pool: &str) -> Vec<String> {
    use k8s_openapi::api::core::v1::Pod;
    let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), ns);
    let list = pods.list(&kube::api::ListParams::default()).await.expect("list pods");
    list.into_iter()
        .filter(|p| p.metadata.owner_references.iter().flatten().any(|o| o.kind == "Pool" && o.name == pool))
        .filter_map(|p| p.metadata.name)
        .collect()
}
