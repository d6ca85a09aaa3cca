//! `osbx status`: the running platform at a glance, read-only. One burst of concurrent reads
//! (the layers' Kustomizations and the Pools each with one LIST, the HelmReleases and
//! RuntimeClasses by name, the Nodes with one LIST, the server's `/health` through the API
//! server's service proxy), then:
//! - each layer in `dependsOn` order: Ready, the revision Flux applied against the Flux
//!   repository's HEAD, suspended, age, Flux's message;
//! - each HelmRelease: chart, version, app version, the last attempt;
//! - the server: reachable and healthy;
//! - each Pool against its capacity, healthy by the pools component's rule (the one Flux
//!   evaluates);
//! - the nodes that can run each RuntimeClass the pools use (`status.runtimeHandlers`).

mod draw;
mod watch;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

pub(crate) use draw::{dot, fleet_line, mermaid, text};
pub(crate) use watch::{Backoff, watch};

use crate::cluster::operation::{Objects, Operation};
use crate::cluster::{Cluster, ClusterError, preflight};
use crate::components::opensandbox::OpenSandbox;
use crate::components::pools;
use crate::deploy::Layer;
use crate::object::{KnownKind, ObjectRef};
use crate::profile::Profile;
use crate::readiness::{self, Status};
use crate::verify::{ApiKeyValue, Endpoint};

/// Why the platform could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OverviewError {
    /// A read failed or was refused.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The API server refused the request to the server's service proxy.
    #[error("the server's /health through the API server's service proxy: {0}")]
    Refused(String),
}

/// How a layer's applied revision relates to the Flux repository's HEAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Against {
    /// Flux applied HEAD.
    Same,
    /// HEAD has commits Flux has not applied.
    Behind,
    /// Flux applied a commit HEAD does not have yet (the work tree is behind the remote).
    Ahead,
    /// Neither contains the other.
    Diverged,
    /// No repository, no applied revision, or a commit the repository does not know.
    Unknown,
}

/// One layer's Kustomization.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LayerState {
    pub(crate) name: String,
    pub(crate) depends_on: Vec<String>,
    /// Not rendered by osbx (only depended on).
    pub(crate) external: bool,
    pub(crate) exists: bool,
    pub(crate) ready: bool,
    pub(crate) suspended: bool,
    /// Flux's message when not Ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) message: Option<String>,
    /// `status.lastAppliedRevision`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) revision: Option<String>,
    pub(crate) against_head: Against,
    /// Seconds since the Ready condition last changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) age_seconds: Option<i64>,
}

/// One HelmRelease.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReleaseState {
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) exists: bool,
    pub(crate) ready: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) chart: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) app_version: Option<String>,
    /// `status.lastAttemptedRevision` (the chart version last tried).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) last_attempt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) message: Option<String>,
}

/// The OpenSandbox server.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ServerState {
    /// `<namespace>/<service>`, or the URL given.
    pub(crate) service: String,
    pub(crate) reachable: bool,
    pub(crate) healthy: bool,
    pub(crate) detail: String,
}

/// One Pool against its capacity.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PoolState {
    pub(crate) name: String,
    pub(crate) runtime: String,
    pub(crate) exists: bool,
    pub(crate) total: i64,
    pub(crate) allocated: i64,
    pub(crate) available: i64,
    pub(crate) pool_min: i64,
    pub(crate) pool_max: i64,
    pub(crate) healthy: bool,
    pub(crate) message: String,
}

/// The nodes that can run a RuntimeClass the pools use.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RuntimeState {
    pub(crate) class: String,
    /// The class's handler (`None`: the class does not exist).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) handler: Option<String>,
    /// The Ready nodes its `nodeSelector` admits that advertise its handler.
    pub(crate) nodes: Vec<String>,
    /// Whether it can run somewhere, by the rule `verify` judges it by
    /// ([`readiness::runtime::on_nodes`]); `None`: no verdict (nodes that publish no handlers).
    pub(crate) runnable: Option<bool>,
    /// Why it cannot run, or why there is no verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) message: Option<String>,
}

/// The platform at a glance.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Overview {
    pub(crate) cluster: String,
    pub(crate) layers: Vec<LayerState>,
    pub(crate) releases: Vec<ReleaseState>,
    pub(crate) server: ServerState,
    pub(crate) pools: Vec<PoolState>,
    pub(crate) runtimes: Vec<RuntimeState>,
    /// Every layer and release Ready, the server healthy, every Pool healthy, every class
    /// runnable on some node.
    pub(crate) ready: bool,
}

/// What `osbx status` reads: the layers' Kustomizations and the Pools by LIST, the
/// HelmReleases and RuntimeClasses by name, the Nodes, the server's `/health` through the proxy;
/// and what `--watch` then watches ([`watch::operations`]).
#[must_use]
pub(crate) fn operations(profile: &Profile, layers: &[Layer]) -> Vec<Operation> {
    let mut out = preflight::connecting();
    out.push(Operation::List(KnownKind::FLUX_KUSTOMIZATION.gvk(), Some(profile.cluster.flux_namespace.clone())));
    out.extend(releases(layers).into_iter().map(|r| Operation::Get(Objects::Named(r))));
    if !profile.sections.pools.items.is_empty() {
        out.push(Operation::List(pools::POOL.gvk(), Some(profile.sections.opensandbox.namespaces.sandbox.clone())));
    }
    let classes = runtime_classes(profile);
    if !classes.is_empty() {
        out.push(Operation::List(KnownKind::NODE.gvk(), None));
        out.extend(classes.iter().map(|c| Operation::Get(Objects::Named(KnownKind::RUNTIME_CLASS.object(None, c)))));
    }
    out.extend(crate::verify::endpoint::requests(profile, crate::verify::Reach::default(), &[http::Method::GET]));
    out.extend(watch::operations(profile, layers));
    out
}

fn releases(layers: &[Layer]) -> Vec<ObjectRef> {
    crate::deploy::flux_objects(layers).into_iter().filter(|id| id.gvk.kind == "HelmRelease").collect()
}

fn runtime_classes(profile: &Profile) -> Vec<String> {
    let mut classes: Vec<String> =
        profile.sections.pools.effective().into_iter().filter_map(|p| p.runtime_class_name).collect();
    classes.sort();
    classes.dedup();
    classes
}

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == kind)
}

fn seconds_since(ts: &Value) -> Option<i64> {
    let t: k8s_openapi::jiff::Timestamp = ts.as_str()?.parse().ok()?;
    Some(k8s_openapi::jiff::Timestamp::now().as_second() - t.as_second())
}

/// How `revision` (`main@sha1:<hex>`) relates to the HEAD of the repository at `repo`.
fn against(repo: Option<&Path>, revision: Option<&str>) -> Against {
    let (Some(repo), Some(revision)) = (repo, revision) else { return Against::Unknown };
    let Some(hex) = revision.rsplit(':').next() else { return Against::Unknown };
    let Ok(git) = git2::Repository::discover(repo) else { return Against::Unknown };
    let (Ok(applied), Some(head)) = (git2::Oid::from_str(hex), git.head().ok().and_then(|h| h.target())) else {
        return Against::Unknown;
    };
    if applied == head {
        return Against::Same;
    }
    if git.find_commit(applied).is_err() {
        return Against::Unknown;
    }
    match (git.graph_descendant_of(head, applied), git.graph_descendant_of(applied, head)) {
        (Ok(true), _) => Against::Behind,
        (_, Ok(true)) => Against::Ahead,
        _ => Against::Diverged,
    }
}

/// Read the platform of `profile` (rendered as `layers`) from `cluster`, comparing applied
/// revisions with the Flux repository at `repo`.
///
/// # Errors
/// [`OverviewError`] when a read is refused or fails (a missing object is a finding, not an
/// error).
pub(crate) async fn read(
    cluster: &Cluster,
    profile: &Profile,
    layers: &[Layer],
    repo: Option<&Path>,
    server_url: Option<&str>,
) -> Result<Overview, OverviewError> {
    let os = &profile.sections.opensandbox;
    let classes = runtime_classes(profile);
    let release_ids = releases(layers);
    let server = os.server_service();
    let proxy = || Endpoint::proxy(cluster.client.clone(), &server, OpenSandbox::SERVER_PORT, ApiKeyValue::default());
    let endpoint = match server_url {
        Some(url) => {
            let limits = crate::verify::endpoint::Limits::new(cluster.qps, cluster.concurrency);
            Endpoint::direct(url, ApiKeyValue::default(), std::time::Duration::from_secs(10), limits)
                .unwrap_or_else(|_| proxy())
        }
        None => proxy(),
    };
    let (kustomization_kind, pool_kind, node_kind) =
        (KnownKind::FLUX_KUSTOMIZATION.gvk(), pools::POOL.gvk(), KnownKind::NODE.gvk());
    let class_ids: Vec<ObjectRef> = classes.iter().map(|c| KnownKind::RUNTIME_CLASS.object(None, c)).collect();
    // Everything at once, on the one connection.
    let (kustomizations, pool_objects, nodes, release_objects, class_objects, health) = futures::try_join!(
        cluster.list(&kustomization_kind, Some(&profile.cluster.flux_namespace), None),
        async {
            if profile.sections.pools.items.is_empty() {
                return Ok(Vec::new());
            }
            cluster.list(&pool_kind, Some(&os.namespaces.sandbox), None).await
        },
        async {
            if classes.is_empty() {
                return Ok(Vec::new());
            }
            cluster.list(&node_kind, None, None).await
        },
        futures::future::try_join_all(release_ids.iter().map(|id| cluster.get(id))),
        futures::future::try_join_all(class_ids.iter().map(|id| cluster.get(id))),
        async { Ok(endpoint.request(http::Method::GET, "/health", None, false).await) },
    )?;
    crate::timing::mark("reads");

    let layer_states = layer_states(profile, layers, &kustomizations, repo);
    let releases = release_states(&release_ids, &release_objects);
    let server_state = server_state(&server, server_url, health)?;
    let pools = pool_states(profile, &pool_objects);
    let runtimes = runtime_states(&classes, &class_objects, &nodes);
    let ready = layer_states.iter().all(|l| l.ready)
        && releases.iter().all(|r| r.ready)
        && server_state.healthy
        && pools.iter().all(|p| p.healthy)
        && runtimes.iter().all(|r| r.runnable == Some(true));
    Ok(Overview {
        cluster: profile.cluster.name.clone(),
        layers: layer_states,
        releases,
        server: server_state,
        pools,
        runtimes,
        ready,
    })
}

/// Each layer's Kustomization, external layers first, then in `dependsOn` order.
fn layer_states(profile: &Profile, layers: &[Layer], kustomizations: &[Value], repo: Option<&Path>) -> Vec<LayerState> {
    let by_name: BTreeMap<&str, &Value> =
        kustomizations.iter().filter_map(|k| Some((k["metadata"]["name"].as_str()?, k))).collect();
    let mut layer_states = Vec::new();
    let rendered: Vec<&str> = layers.iter().map(|l| l.name.as_str()).collect();
    let specs: Vec<&crate::profile::LayerSpec> = {
        let mut s: Vec<_> = layers.iter().filter_map(|l| profile.layers.iter().find(|p| p.name == l.name)).collect();
        // External layers (only depended on) first: the rendered ones wait for them.
        let external: Vec<_> = profile.layers.iter().filter(|p| !rendered.contains(&p.name.as_str())).collect();
        s.splice(0..0, external);
        s
    };
    for spec in specs {
        let k = by_name.get(spec.name.as_str()).copied();
        let s = k.map(readiness::compute);
        let ready = s.as_ref().is_some_and(|s| s.status == Status::Current);
        let revision = k.and_then(|k| k["status"]["lastAppliedRevision"].as_str()).map(str::to_owned);
        layer_states.push(LayerState {
            name: spec.name.clone(),
            depends_on: spec.depends_on.clone(),
            external: !rendered.contains(&spec.name.as_str()),
            exists: k.is_some(),
            ready,
            suspended: k.is_some_and(|k| k["spec"]["suspend"] == true),
            message: match (&s, k) {
                (_, None) => Some("no such Kustomization".into()),
                (Some(s), _) if !ready => Some(s.message.clone()),
                _ => None,
            },
            against_head: against(repo, revision.as_deref()),
            revision,
            age_seconds: k.and_then(|k| condition(k, "Ready")).and_then(|c| seconds_since(&c["lastTransitionTime"])),
        });
    }

    layer_states
}

/// Each HelmRelease the render holds.
fn release_states(release_ids: &[ObjectRef], release_objects: &[Option<Value>]) -> Vec<ReleaseState> {
    release_ids
        .iter()
        .zip(release_objects)
        .map(|(id, obj)| {
            let s = obj.as_ref().map(readiness::compute);
            let ready = s.as_ref().is_some_and(|s| s.status == Status::Current);
            let history = obj.as_ref().and_then(|o| o["status"]["history"].as_array()).and_then(|h| h.first());
            let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
            ReleaseState {
                namespace: id.namespace.clone().unwrap_or_default(),
                name: id.name.clone(),
                exists: obj.is_some(),
                ready,
                chart: text(history.map(|h| &h["chartName"]))
                    .or_else(|| text(obj.as_ref().map(|o| &o["spec"]["chart"]["spec"]["chart"]))),
                version: text(history.map(|h| &h["chartVersion"])),
                app_version: text(history.map(|h| &h["appVersion"])),
                last_attempt: text(obj.as_ref().map(|o| &o["status"]["lastAttemptedRevision"])),
                message: match (&s, obj) {
                    (_, None) => Some("no such HelmRelease".into()),
                    (Some(s), _) if !ready => Some(s.message.clone()),
                    _ => None,
                },
            }
        })
        .collect()
}

/// The server from its `/health` answer (a refusal by the API server is an error).
fn server_state(
    server: &ObjectRef,
    server_url: Option<&str>,
    health: Result<crate::verify::endpoint::Response, String>,
) -> Result<ServerState, OverviewError> {
    let shown_service = server_url
        .map_or_else(|| format!("{}/{}", server.namespace.as_deref().unwrap_or_default(), server.name), str::to_owned);
    if let Ok(r) = &health
        && r.status == 403
        && r.json["kind"] == "Status"
    {
        return Err(OverviewError::Refused(r.json["message"].as_str().unwrap_or("forbidden").to_owned()));
    }
    let server_state = match health {
        // The API server's own answer (no endpoints, no such service): the server was not reached.
        Ok(r) if r.json["kind"] == "Status" => ServerState {
            service: shown_service.clone(),
            reachable: false,
            healthy: false,
            detail: format!(
                "the API server's proxy answered {}: {}",
                r.status,
                r.json["message"].as_str().unwrap_or_default()
            ),
        },
        Ok(r) if r.status == 200 => {
            ServerState { service: shown_service.clone(), reachable: true, healthy: true, detail: "/health 200".into() }
        }
        Ok(r) => ServerState {
            service: shown_service.clone(),
            reachable: true,
            healthy: false,
            detail: format!("/health {}: {}", r.status, r.text.chars().take(120).collect::<String>().trim()),
        },
        Err(e) => ServerState { service: shown_service.clone(), reachable: false, healthy: false, detail: e },
    };
    Ok(server_state)
}

/// Each Pool of the profile against its capacity.
fn pool_states(profile: &Profile, pool_objects: &[Value]) -> Vec<PoolState> {
    let pool_by_name: BTreeMap<&str, &Value> =
        pool_objects.iter().filter_map(|p| Some((p["metadata"]["name"].as_str()?, p))).collect();
    profile
        .sections
        .pools
        .effective()
        .into_iter()
        .map(|e| {
            let obj = pool_by_name.get(e.pool.name.as_str()).copied();
            let int = |v: &Value| v.as_i64().unwrap_or(0);
            let (healthy, message) = obj.map_or((false, "no such Pool".to_owned()), |p| pools::HEALTH.evaluate(p));
            let st = obj.map_or(&Value::Null, |p| &p["status"]);
            PoolState {
                name: e.pool.name.clone(),
                runtime: e.pool.runtime.as_str().to_owned(),
                exists: obj.is_some(),
                total: int(&st["total"]),
                allocated: int(&st["allocated"]),
                available: int(&st["available"]),
                pool_min: e.pool.capacity.pool_min,
                pool_max: e.pool.capacity.pool_max,
                healthy,
                message,
            }
        })
        .collect()
}

/// The nodes that can run each class, by the rule `verify` judges a class by.
fn runtime_states(classes: &[String], class_objects: &[Option<Value>], nodes: &[Value]) -> Vec<RuntimeState> {
    use readiness::runtime::{OnNodes, on_nodes};
    classes
        .iter()
        .zip(class_objects)
        .map(|(class, obj)| {
            let handler = obj.as_ref().and_then(|o| o["handler"].as_str()).map(str::to_owned);
            let (nodes, runnable, message) = match (obj, &handler) {
                (Some(rc), Some(h)) => match on_nodes(rc, h, nodes) {
                    OnNodes::Advertised(on) => (on, Some(true), None),
                    OnNodes::Missing(why) | OnNodes::NoNode(why) => (Vec::new(), Some(false), Some(why)),
                    OnNodes::Unknown(why) => (Vec::new(), None, Some(why)),
                },
                (Some(_), None) => (Vec::new(), Some(false), Some("no handler".to_owned())),
                (None, _) => (Vec::new(), Some(false), Some("no such RuntimeClass".to_owned())),
            };
            RuntimeState { class: class.clone(), handler, nodes, runnable, message }
        })
        .collect()
}

/// One cluster of a fleet, in one line's worth.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterLine {
    pub(crate) cluster: String,
    pub(crate) ready: bool,
    pub(crate) layers_ready: usize,
    pub(crate) layers: usize,
    pub(crate) pools_healthy: usize,
    pub(crate) pools: usize,
    /// The revision the layers applied, when they all applied the same one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) revision: Option<String>,
    pub(crate) against_head: Against,
    /// Why the cluster could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

impl ClusterLine {
    /// The line of a cluster that was read.
    #[must_use]
    pub(crate) fn of(o: &Overview) -> Self {
        let mut revisions: Vec<&String> = o.layers.iter().filter_map(|l| l.revision.as_ref()).collect();
        revisions.dedup();
        let one = (revisions.len() == 1).then(|| revisions[0].clone());
        let against = if one.is_some() {
            o.layers.iter().find(|l| l.revision.is_some()).map_or(Against::Unknown, |l| l.against_head)
        } else {
            Against::Unknown
        };
        Self {
            cluster: o.cluster.clone(),
            ready: o.ready,
            layers_ready: o.layers.iter().filter(|l| l.ready).count(),
            layers: o.layers.len(),
            pools_healthy: o.pools.iter().filter(|p| p.healthy).count(),
            pools: o.pools.len(),
            revision: one,
            against_head: against,
            error: None,
        }
    }

    /// The line of a cluster that could not be read.
    #[must_use]
    pub(crate) fn unreadable(cluster: &str, error: String) -> Self {
        Self {
            cluster: cluster.to_owned(),
            ready: false,
            layers_ready: 0,
            layers: 0,
            pools_healthy: 0,
            pools: 0,
            revision: None,
            against_head: Against::Unknown,
            error: Some(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(name: &str, ready: bool, labels: &Value, handlers: Option<&[&str]>) -> Value {
        let mut n = json!({"metadata": {"name": name, "labels": labels},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
        if let Some(h) = handlers {
            n["status"]["runtimeHandlers"] = h.iter().map(|h| json!({"name": h})).collect();
        }
        n
    }

    fn state(nodes: &[Value]) -> RuntimeState {
        let rc = json!({"metadata": {"name": "kata-qemu"}, "handler": "kata-qemu",
            "scheduling": {"nodeSelector": {"katacontainers.io/kata-runtime": "true"}}});
        runtime_states(&["kata-qemu".to_owned()], &[Some(rc)], nodes).remove(0)
    }

    #[test]
    fn a_runtime_class_runs_only_on_ready_nodes_its_selector_admits_that_advertise_its_handler() {
        let kata = json!({"katacontainers.io/kata-runtime": "true"});
        let good = node("good", true, &kata, Some(&["", "kata-qemu"]));
        let s = state(std::slice::from_ref(&good));
        assert_eq!((s.runnable, s.nodes.clone(), s.message.clone()), (Some(true), vec!["good".to_owned()], None));
        // Advertising the handler is not enough: Ready and admitted by the nodeSelector too.
        let not_ready = node("down", false, &kata, Some(&["kata-qemu"]));
        let not_admitted = node("plain", true, &json!({}), Some(&["kata-qemu"]));
        for nodes in [vec![not_ready], vec![not_admitted]] {
            let s = state(&nodes);
            assert_eq!((s.runnable, s.nodes.len()), (Some(false), 0), "{nodes:?}: {s:?}");
            assert!(s.message.as_deref().is_some_and(|m| m.contains("no Ready node")), "{s:?}");
        }
        let lacking = state(&[node("n", true, &kata, Some(&["runc"]))]);
        assert_eq!(lacking.runnable, Some(false), "{lacking:?}");
        assert!(lacking.message.unwrap().contains("n has runc"));
        // Nodes that publish no handlers: no verdict, said as such.
        let silent = state(&[node("old", true, &kata, None)]);
        assert_eq!(silent.runnable, None, "{silent:?}");
        assert!(silent.message.unwrap().contains("old publishes no status.runtimeHandlers"));
    }
}
