//! What `osbx status` makes of what it read: each layer, release, the server, each Pool and
//! each RuntimeClass the pools use, in the words and states it shows.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::components::pools;
use crate::deploy::Layer;
use crate::object::ObjectRef;
use crate::profile::Profile;
use crate::readiness::{self, Status};

use super::{Against, LayerState, OverviewError, PoolState, ReleaseState, RuntimeState, ServerState};

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

/// Each layer's Kustomization, external layers first, then in `dependsOn` order.
pub(super) fn layer_states(
    profile: &Profile,
    layers: &[Layer],
    kustomizations: &[Value],
    repo: Option<&Path>,
) -> Vec<LayerState> {
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
pub(super) fn release_states(release_ids: &[ObjectRef], release_objects: &[Option<Value>]) -> Vec<ReleaseState> {
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
pub(super) fn server_state(
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
pub(super) fn pool_states(profile: &Profile, pool_objects: &[Value]) -> Vec<PoolState> {
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
pub(super) fn runtime_states(
    classes: &[String],
    class_objects: &[Option<Value>],
    nodes: &[Value],
) -> Vec<RuntimeState> {
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
