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
mod fleet;
mod states;
mod watch;

use std::path::Path;

use serde::Serialize;

pub(crate) use draw::{dot, fleet_line, mermaid, text};
pub(crate) use fleet::{ClusterLine, read_fleet};
use states::{layer_states, pool_states, release_states, runtime_states, server_state};
pub(crate) use watch::{Backoff, watch};

use crate::cluster::operation::{Objects, Operation};
use crate::cluster::{Cluster, ClusterError, preflight};
use crate::components::opensandbox::OpenSandbox;
use crate::components::pools;
use crate::deploy::Layer;
use crate::object::{KnownKind, ObjectRef};
use crate::profile::Profile;
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

/// The last verdict of the acceptance checks in the cluster (an acceptance layer's report).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AcceptanceState {
    /// `<namespace>/<name>` of the report ConfigMap.
    pub(crate) report: String,
    /// Whether a report was published.
    pub(crate) published: bool,
    /// Every check passed in the last run.
    pub(crate) ready: bool,
    /// Its summary line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) summary: Option<String>,
    /// The revision it checked, and whether that is the one rendered now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) revision: Option<String>,
    pub(crate) current: bool,
    /// When it was published, and how long ago (seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) time: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) age_seconds: Option<i64>,
    /// Older than `stale_after_seconds` (or of no readable time): silence, not a verdict.
    pub(crate) stale: bool,
    /// The bound: three of the profile's `acceptance.interval`.
    pub(crate) stale_after_seconds: i64,
}

impl AcceptanceState {
    /// The state of `published` (the report ConfigMap `report` holds, if any) against the
    /// revision rendered now and the age bound.
    fn of(
        report: String,
        published: Option<crate::verify::in_cluster::publish::Published>,
        rendered: Option<&str>,
        stale_after: i64,
    ) -> Self {
        let Some(p) = published else {
            return Self {
                report,
                published: false,
                ready: false,
                summary: None,
                revision: None,
                current: false,
                time: None,
                age_seconds: None,
                stale: false,
                stale_after_seconds: stale_after,
            };
        };
        let age_seconds = p.age_seconds();
        Self {
            report,
            published: true,
            ready: p.ready,
            current: rendered == Some(p.revision.as_str()),
            stale: age_seconds.is_none_or(|age| age > stale_after),
            stale_after_seconds: stale_after,
            age_seconds,
            summary: Some(p.summary),
            revision: Some(p.revision),
            time: Some(p.time),
        }
    }

    /// A published verdict that passed, of the revision rendered now, and not stale.
    #[must_use]
    pub(crate) fn green(&self) -> bool {
        self.published && self.ready && self.current && !self.stale
    }
}

/// How many of the profile's `acceptance.interval` a verdict may be old before it is stale.
const STALE_AFTER_INTERVALS: u32 = 3;

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
    /// The last in-cluster verdict (with an acceptance layer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) acceptance: Option<AcceptanceState>,
    /// Every layer and release Ready, the server healthy, every Pool healthy, every class
    /// runnable on some node, and the last in-cluster verdict Ready at the rendered revision and
    /// not stale.
    pub(crate) ready: bool,
}

/// What `osbx status` reads: the layers' Kustomizations and the Pools by LIST, the
/// HelmReleases and RuntimeClasses by name, the Nodes, the server's `/health` through the proxy;
/// and what `--watch` then watches ([`watch::operations`]).
#[must_use]
pub(crate) fn operations(profile: &Profile, layers: &[Layer]) -> Vec<Operation> {
    let mut out = preflight::connecting();
    out.push(Operation::List(crate::flux::KUSTOMIZATION.gvk(), Some(profile.cluster.flux_namespace.clone())));
    out.extend(releases(layers).into_iter().map(|r| Operation::Get(Objects::Named(r))));
    if !profile.sections.pools.items.is_empty() {
        out.push(Operation::List(pools::POOL.gvk(), Some(profile.sections.opensandbox.namespaces.sandbox.clone())));
    }
    let classes = runtime_classes(profile);
    if !classes.is_empty() {
        out.push(Operation::List(KnownKind::NODE.gvk(), None));
        out.extend(classes.iter().map(|c| Operation::Get(Objects::Named(KnownKind::RUNTIME_CLASS.object(None, c)))));
    }
    out.extend(crate::verify::endpoint::requests(profile, &crate::verify::Reach::default(), &[http::Method::GET]));
    if let Some((a, _)) = profile.acceptance() {
        out.push(Operation::Get(Objects::Named(a.report())));
    }
    out.extend(watch::operations(profile, layers));
    out
}

/// The acceptance report of `profile`'s cluster, against the revision rendered as `layers`.
async fn acceptance(
    cluster: &Cluster,
    profile: &Profile,
    layers: &[Layer],
) -> Result<Option<AcceptanceState>, ClusterError> {
    let Some((a, _)) = profile.acceptance() else { return Ok(None) };
    let report = a.report();
    let rendered = a.revision_in(layers.iter().flat_map(|l| &l.objects));
    let published = crate::verify::in_cluster::publish::read(cluster, &report).await?;
    // The interval is checked at load (`acceptance.interval`, a duration).
    let interval = crate::spec::syntax::parse_duration(&a.interval).unwrap_or_default();
    let stale_after = i64::try_from((interval * STALE_AFTER_INTERVALS).as_secs()).unwrap_or(i64::MAX);
    let name = format!("{}/{}", a.namespace, report.name);
    Ok(Some(AcceptanceState::of(name, published, rendered.as_deref(), stale_after)))
}

fn releases(layers: &[Layer]) -> Vec<ObjectRef> {
    crate::deploy::flux_objects(layers).into_iter().filter(|id| crate::flux::HELM_RELEASE.is(&id.gvk)).collect()
}

fn runtime_classes(profile: &Profile) -> Vec<String> {
    let mut classes: Vec<String> =
        profile.sections.pools.effective().into_iter().filter_map(|p| p.runtime_class_name).collect();
    classes.sort();
    classes.dedup();
    classes
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
        (crate::flux::KUSTOMIZATION.gvk(), pools::POOL.gvk(), KnownKind::NODE.gvk());
    let class_ids: Vec<ObjectRef> = classes.iter().map(|c| KnownKind::RUNTIME_CLASS.object(None, c)).collect();
    // Everything at once, on the one connection.
    let (kustomizations, pool_objects, nodes, release_objects, class_objects, health, acceptance) = futures::try_join!(
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
        acceptance(cluster, profile, layers),
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
        && runtimes.iter().all(|r| r.runnable == Some(true))
        && acceptance.as_ref().is_none_or(AcceptanceState::green);
    Ok(Overview {
        cluster: profile.cluster.name.clone(),
        layers: layer_states,
        releases,
        server: server_state,
        pools,
        runtimes,
        acceptance,
        ready,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

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

    /// A report of `revision` that passed, published `age` seconds ago.
    fn published(revision: &str, age: i64) -> crate::verify::in_cluster::publish::Published {
        let publishing = crate::verify::in_cluster::publish::Publishing {
            report: crate::object::KnownKind::CONFIG_MAP.object(Some("ns"), "r"),
            revision: revision.to_owned(),
            writer: crate::verify::in_cluster::publish::Writer::Unnamed,
        };
        let mut p = crate::verify::in_cluster::publish::Published::of(
            "run-1",
            &publishing,
            "c",
            std::time::SystemTime::now(),
            &[],
        );
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        p.time = k8s_openapi::jiff::Timestamp::from_second(now - age).unwrap().to_string();
        p.ready = true;
        p
    }

    #[test]
    fn a_verdict_older_than_three_intervals_is_stale_and_not_green() {
        let state = |p, rendered| AcceptanceState::of("ns/r".into(), Some(p), rendered, 2700);
        let fresh = state(published("rev-1", 600), Some("rev-1"));
        assert!(fresh.green() && !fresh.stale && fresh.current, "{fresh:?}");
        let old = state(published("rev-1", 2800), Some("rev-1"));
        assert!(old.stale && !old.green() && old.ready && old.current, "{old:?}");
        assert_eq!((old.stale_after_seconds, old.age_seconds.map(|a| a >= 2800)), (2700, Some(true)));
        let other = state(published("rev-0", 600), Some("rev-1"));
        assert!(!other.current && !other.stale && !other.green(), "{other:?}");
        let mut unknown = published("rev-1", 0);
        unknown.time = "yesterday".into();
        let unknown = state(unknown, Some("rev-1"));
        assert!(unknown.stale && !unknown.green(), "a time that does not parse is no evidence: {unknown:?}");
        let none = AcceptanceState::of("ns/r".into(), None, Some("rev-1"), 2700);
        assert!(!none.published && !none.green(), "{none:?}");
        let json = serde_json::to_value(&old).unwrap();
        assert_eq!((&json["stale"], &json["staleAfterSeconds"]), (&json!(true), &json!(2700)), "{json}");
        let line = draw::text(&Overview {
            cluster: "c".into(),
            layers: vec![],
            releases: vec![],
            server: ServerState { service: "s".into(), reachable: true, healthy: true, detail: String::new() },
            pools: vec![],
            runtimes: vec![],
            acceptance: Some(old),
            ready: false,
        });
        let line = line.last().unwrap();
        assert!(
            line.starts_with("acceptance: ✘ Ready, revision rev-1 (current), stale: 4")
                && line.contains("ago, older than 45m"),
            "{line}"
        );
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
