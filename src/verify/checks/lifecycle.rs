//! `opensandbox.lifecycle.<pool>`: a sandbox can be created from each pool through the Lifecycle
//! API, runs bound to it, and is gone after deletion; `opensandbox.exec.<pool>` runs a command in
//! that same sandbox through execd before it is deleted ([`exec`]); with it, for a Kata pool,
//! `opensandbox.reclaim.<pool>` (its VM is gone from the node after the delete, [`super::reclaim`]);
//! and the sweep of the sandboxes a killed run left.

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use http::Method;
use serde_json::{Value, json};

use super::exec;
use crate::cluster::operation::{Objects, Operation};
use crate::components::kata::shim::Shim;
use crate::components::opensandbox::BATCH_SANDBOX;
use crate::components::pools;
use crate::components::pools::EffectivePool;
use crate::object::KnownKind;
use crate::profile::Profile;
use crate::verify::endpoint;
use crate::verify::{Check, Ctx, Reach, Verdict};

/// The label the server puts on a Lifecycle check's sandbox (from the create's `metadata`),
/// naming the run that created it.
const SANDBOX_RUN_LABEL: &str = "osbx-smoke";

/// Delete the sandboxes that earlier runs' Lifecycle checks left in the sandbox namespace (a
/// run killed before it could delete them): the BatchSandboxes labelled with a run not in
/// `live_runs`. The server keeps no state of its own for them. Returns what was removed.
pub(crate) async fn sweep_sandboxes(
    cluster: &crate::cluster::Cluster,
    profile: &Profile,
    live_runs: &std::collections::BTreeSet<String>,
) -> Vec<String> {
    let ns = &profile.sections.opensandbox.namespaces.sandbox;
    if profile.sections.pools.items.is_empty() {
        return Vec::new();
    }
    let Ok(Some(api)) = cluster.resolver.api(&BATCH_SANDBOX.object(Some(ns), "")).await else { return Vec::new() };
    let Ok(list) = api.list(&kube::api::ListParams::default().labels(SANDBOX_RUN_LABEL)).await else {
        return Vec::new();
    };
    let runs: std::collections::BTreeSet<String> = list
        .items
        .iter()
        .filter_map(|b| b.metadata.labels.as_ref().and_then(|l| l.get(SANDBOX_RUN_LABEL)).cloned())
        .collect();
    let mut removed = Vec::new();
    for run in runs.difference(live_runs) {
        let lp = kube::api::ListParams::default().labels(&format!("{SANDBOX_RUN_LABEL}={run}"));
        if api.delete_collection(&kube::api::DeleteParams::default(), &lp).await.is_ok() {
            removed.push(format!("{ns}: the sandboxes of run {run}"));
        }
    }
    removed
}

/// What [`sweep_sandboxes`] does: list and delete labelled BatchSandboxes in the sandbox
/// namespace.
pub(crate) fn sweeping_sandboxes(profile: &Profile) -> Vec<Operation> {
    if profile.sections.pools.items.is_empty() {
        return Vec::new();
    }
    let ns = Some(profile.sections.opensandbox.namespaces.sandbox.clone());
    vec![Operation::List(BATCH_SANDBOX.gvk(), ns.clone()), Operation::DeleteLabelled(BATCH_SANDBOX.gvk(), ns)]
}

pub(super) struct Lifecycle {
    pub pool: String,
    /// The pool is a Kata pool: the check also reports `opensandbox.reclaim.<pool>`.
    pub kata: bool,
    /// That reclaim check was selected: the run looks at the sandbox's node before and after the
    /// delete.
    pub reclaim: bool,
}

impl Check for Lifecycle {
    /// The Lifecycle verdict, that of the command run through execd in the same sandbox, and
    /// for a Kata pool that of the sandbox's VM reclaimed from its node.
    fn ids(&self) -> Vec<String> {
        let mut ids = vec![format!("opensandbox.lifecycle.{}", self.pool), exec::id(&self.pool)];
        if self.kata {
            ids.push(super::reclaim::id(&self.pool));
        }
        ids
    }

    /// Reading the Pool, the API key, the sandbox's BatchSandbox and pods (named only at run
    /// time), and `POST`, `GET` and `DELETE` to the server (execd is reached through the
    /// server's proxy with `GET` and `POST`); with the reclaim check, two host probes on the
    /// sandbox's node (before and after the delete).
    fn operations(&self, profile: &Profile, reach: &Reach) -> Vec<Operation> {
        let os = &profile.sections.opensandbox;
        let ns = Some(os.namespaces.sandbox.as_str());
        let mut out = vec![
            Operation::Get(Objects::Named(pools::object(&profile.sections, &self.pool))),
            Operation::Get(Objects::Any(BATCH_SANDBOX.gvk(), ns.map(str::to_owned))),
        ];
        out.extend(endpoint::requests(profile, reach, &[Method::POST, Method::GET, Method::DELETE]));
        out.extend(endpoint::reading_key(profile, reach));
        if deletes_released_pods(profile, &self.pool) {
            out.push(Operation::Get(Objects::any(KnownKind::POD, ns)));
        }
        if self.reclaim && super::reclaim::shim_of(profile, &self.pool).is_ok() {
            out.push(Operation::Probe(None));
        }
        out
    }

    /// The reclaim check's host probes use the node.
    fn uses_the_node(&self, profile: &Profile) -> bool {
        self.reclaim && super::reclaim::shim_of(profile, &self.pool).is_ok()
    }

    /// Reclaim's host probe (the sandbox itself runs on a pod of the pool, already rendered).
    fn images(&self, profile: &Profile) -> Vec<String> {
        if self.uses_the_node(profile) { vec![profile.verify.host_probe_image.clone()] } else { Vec::new() }
    }

    /// The sandbox takes one of the pool's idle pods: the Pools check reads `available` first.
    fn after(&self) -> Vec<String> {
        vec![super::opensandbox::POOLS.to_owned()]
    }

    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(async move {
            let with_exec = ctx.selection.selects(&exec::id(&self.pool));
            let reclaim = if self.reclaim { Some(super::reclaim::shim_of(&ctx.profile, &self.pool)) } else { None };
            let (lifecycle, exec, reclaimed) = lifecycle(ctx, &self.pool, with_exec, reclaim).await;
            let mut out = vec![lifecycle, exec];
            if self.kata {
                out.push(reclaimed.unwrap_or_else(not_selected));
            }
            out
        })
    }
}

/// The verdict of a check of the sandbox that is not selected (never reported).
fn not_selected() -> Verdict {
    Verdict::skip("not selected")
}

/// A verdict from before a sandbox exists, for both the Lifecycle and the exec checks (nothing
/// was found on a node).
fn both(lifecycle: Verdict) -> (Verdict, Verdict, Found) {
    let exec = exec::without_sandbox(&lifecycle);
    (lifecycle, exec, None)
}

/// The Pool's `status.available` (`None`: unreadable or missing).
async fn available(ctx: &Ctx, pool: &str) -> Option<Value> {
    let p = ctx.cluster.get(&pools::object(&ctx.profile.sections, pool)).await.ok().flatten()?;
    Some(p["status"]["available"].clone())
}

/// What the reclaim check of a pool is to do: look at the node through the shim's paths, or
/// skip (why).
type Reclaim = Result<&'static Shim, String>;

/// Create a sandbox from `pool`, see it Running and bound to the pool, run a command in it
/// through execd (`with_exec`), delete it, see it gone: the Lifecycle and the exec verdicts;
/// with `reclaim`, also see its VM gone from its node (the third verdict).
async fn lifecycle(
    ctx: &Ctx,
    pool: &str,
    with_exec: bool,
    reclaim: Option<Reclaim>,
) -> (Verdict, Verdict, Option<Verdict>) {
    let no_sandbox = |v: &Verdict| {
        Verdict::error(
            format!("no sandbox ran to look at: opensandbox.lifecycle.{pool} {}", v.outcome),
            v.diagnosis.clone().unwrap_or_else(|| v.evidence.clone()),
        )
    };
    let shim = match reclaim {
        None => None,
        Some(Err(why)) => {
            let (verdict, exec, _) = created_and_deleted(ctx, pool, with_exec, None).await;
            return (verdict, exec, Some(Verdict::skip(why)));
        }
        Some(Ok(shim)) => Some(shim),
    };
    let (verdict, exec, found) = created_and_deleted(ctx, pool, with_exec, shim).await;
    let reclaimed = match (shim, found) {
        (None, _) => None,
        (Some(_), Some(Ok(found))) => Some(super::reclaim::reclaimed(ctx, pool, &found).await),
        (Some(_), Some(Err(v))) => Some(v),
        (Some(_), None) => Some(no_sandbox(&verdict)),
    };
    (verdict, exec, reclaimed)
}

/// What the sandbox's node held before the delete, when the reclaim check looked (or why it
/// could not).
type Found = Option<Result<super::reclaim::Found, Verdict>>;

/// [`lifecycle`]'s sandbox: created, Running, a command run in it (`with_exec`), deleted; with
/// `shim`, found on its node first.
async fn created_and_deleted(
    ctx: &Ctx,
    pool: &str,
    with_exec: bool,
    shim: Option<&'static Shim>,
) -> (Verdict, Verdict, Found) {
    let ns = &ctx.profile.sections.opensandbox.namespaces.sandbox;
    let pool_obj = match ctx.cluster.get(&pools::object(&ctx.profile.sections, pool)).await {
        Ok(p) => p,
        Err(e) => return both(Verdict::error(format!("reading Pool {pool}"), e.to_string())),
    };
    // The server waits its whole create timeout on a missing or empty pool: check first.
    match &pool_obj {
        None => {
            return both(Verdict::fail(
                format!("Pool {ns}/{pool} missing"),
                "the pool does not exist; the server would time out",
            ));
        }
        Some(p) if p["status"]["available"].as_i64().unwrap_or(0) < 1 => {
            let life = Verdict::fail(
                format!("Pool {pool} available {}", p["status"]["available"]),
                "the pool has no available capacity: a create would time out",
            )
            .with_fix("raise bufferMin, or check the pool's pods");
            return (life, exec::full(pool, &p["status"]["available"], "the Pool's status before the create"), None);
        }
        Some(_) => {}
    }
    let mut metadata = serde_json::Map::new();
    metadata.insert(SANDBOX_RUN_LABEL.to_owned(), json!(ctx.run.id));
    let body = json!({"extensions": {"poolRef": pool}, "entrypoint": ["tail", "-f", "/dev/null"], "timeout": 600,
                      "metadata": metadata});
    let created = match ctx.endpoint.request(Method::POST, "/v1/sandboxes", Some(&body), true).await {
        Err(e) => return both(Verdict::error("POST /v1/sandboxes", e)),
        Ok(r) => r,
    };
    if created.status != 202 && created.status != 200 {
        let code = created.json["code"].as_str().unwrap_or_default();
        let evidence = format!("POST /v1/sandboxes → {}", created.status);
        // A pool taken since the check above: the server answers 429 or waits out its timeout.
        if created.status == 429 || code == "KUBERNETES::POD_READY_TIMEOUT" {
            let left = available(ctx, pool).await;
            if let Some(zero) = left.filter(|a| a.as_i64() == Some(0)) {
                let how = format!("{evidence} {code}");
                let life = Verdict::fail(
                    format!("{evidence}, Pool {pool} available 0"),
                    "the pool is full: no pod was free for the sandbox",
                )
                .with_fix("raise bufferMin/poolMax, or delete sandboxes that hold its pods");
                return (life, exec::full(pool, &zero, how.trim_end()), None);
            }
        }
        let why = match code {
            "KUBERNETES::POD_READY_TIMEOUT" => {
                "the sandbox did not become Running within the server's create timeout".to_owned()
            }
            _ => format!("{code} {}", created.json["message"].as_str().unwrap_or(&created.text)),
        };
        return both(Verdict::fail(evidence, why));
    }
    let Some(id) = created.json["id"].as_str().map(str::to_owned) else {
        return both(Verdict::error("POST /v1/sandboxes", format!("no id in the response: {}", created.text)));
    };
    let (life, exec, found) = running_then_deleted(ctx, pool, &id, &created.json, with_exec, shim).await;
    if life.outcome != crate::verify::Outcome::Pass {
        let _ = ctx.endpoint.request(Method::DELETE, &format!("/v1/sandboxes/{id}"), None, true).await;
    }
    (life, exec, found)
}

async fn running_then_deleted(
    ctx: &Ctx,
    pool: &str,
    id: &str,
    created: &Value,
    with_exec: bool,
    shim: Option<&'static Shim>,
) -> (Verdict, Verdict, Found) {
    // Everything after the create is bounded by the probe deadline (at least 10 s).
    let limit = ctx.run.deadline().max(Duration::from_secs(10));
    match running_on_pool(ctx, pool, id, created, limit).await {
        Ok(pods) => {
            // The command runs while the sandbox is Running, before the delete.
            let exec = if with_exec { exec::exec(ctx, pool, id).await } else { not_selected() };
            // The node, pod and sandbox id are recorded before the delete: after it, the pod
            // and its bundle are gone.
            let found = match (shim, pods.first()) {
                (None, _) => None,
                (Some(shim), Some(pod)) => Some(super::reclaim::find(ctx, pool, shim, pod).await),
                (Some(_), None) => Some(Err(Verdict::error(
                    format!("BatchSandbox {id}"),
                    "no allocated pod in sandbox.opensandbox.io/alloc-status: no node to look at",
                ))),
            };
            (deleted_with_its_pods(ctx, pool, id, &pods, limit).await, exec, found)
        }
        Err(verdict) => both(verdict),
    }
}

/// Wait until the sandbox runs, bound to `pool`; returns its pods (else the failing verdict).
async fn running_on_pool(
    ctx: &Ctx,
    pool: &str,
    id: &str,
    created: &Value,
    limit: Duration,
) -> Result<Vec<String>, Verdict> {
    let ns = &ctx.profile.sections.opensandbox.namespaces.sandbox;
    let path = format!("/v1/sandboxes/{id}");
    // Right after create, GET may briefly answer 500 on older servers: retry for a while.
    let start = Instant::now();
    let mut state = created["status"]["state"].as_str().unwrap_or_default().to_owned();
    while state != "Running" && start.elapsed() < limit {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Ok(r) = ctx.endpoint.request(Method::GET, &path, None, true).await
            && r.status == 200
        {
            r.json["status"]["state"].as_str().unwrap_or_default().clone_into(&mut state);
            if state == "Failed" {
                return Err(Verdict::fail(
                    format!("sandbox {id} Failed"),
                    r.json["status"]["message"].as_str().unwrap_or("").to_owned(),
                ));
            }
        }
    }
    if state != "Running" {
        return Err(Verdict::fail(
            format!("sandbox {id} state {state:?} after {}s", limit.as_secs()),
            "the sandbox never became Running",
        ));
    }
    let bsbx = match ctx.cluster.get(&BATCH_SANDBOX.object(Some(ns), id)).await {
        Ok(Some(b)) => b,
        Ok(None) => return Err(Verdict::fail(format!("sandbox {id} Running"), format!("no BatchSandbox {ns}/{id}"))),
        Err(e) => return Err(Verdict::error("reading the BatchSandbox", e.to_string())),
    };
    if bsbx["spec"]["poolRef"] != pool {
        return Err(Verdict::fail(
            format!("BatchSandbox {id} poolRef {}", bsbx["spec"]["poolRef"]),
            format!("the sandbox is not bound to pool {pool}"),
        ));
    }
    let pods: Vec<String> = bsbx["metadata"]["annotations"]["sandbox.opensandbox.io/alloc-status"]
        .as_str()
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .and_then(|v| v["pods"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p.as_str().map(str::to_owned))
        .collect();
    Ok(pods)
}

/// Whether the pool's released pods are deleted (recycle strategy Delete): then a deleted
/// sandbox's pods must be gone.
fn deletes_released_pods(profile: &Profile, pool: &str) -> bool {
    profile
        .sections
        .pools
        .effective()
        .iter()
        .find(|p| p.pool.name == pool)
        .is_none_or(EffectivePool::deletes_released_pods)
}

/// Delete the sandbox; its BatchSandbox and (with recycle strategy Delete) its pods must go,
/// and the server must forget it.
async fn deleted_with_its_pods(ctx: &Ctx, pool: &str, id: &str, pods: &[String], limit: Duration) -> Verdict {
    let ns = &ctx.profile.sections.opensandbox.namespaces.sandbox;
    let path = format!("/v1/sandboxes/{id}");
    match ctx.endpoint.request(Method::DELETE, &path, None, true).await {
        Ok(r) if r.status == 204 || r.status == 200 => {}
        Ok(r) => {
            return Verdict::fail(
                format!("DELETE {path} → {}", r.status),
                r.text.chars().take(200).collect::<String>(),
            );
        }
        Err(e) => return Verdict::error(format!("DELETE {path}"), e),
    }
    let start = Instant::now();
    loop {
        let left = ctx.cluster.get(&BATCH_SANDBOX.object(Some(ns), id)).await;
        match left {
            Ok(None) => break,
            Ok(Some(b)) if start.elapsed() > limit => {
                let finalizers = b["metadata"]["finalizers"].to_string();
                return Verdict::fail(
                    format!(
                        "BatchSandbox {id} still present {}s after delete (finalizers {finalizers})",
                        limit.as_secs()
                    ),
                    "the BatchSandbox was left behind: the OpenSandbox controller did not release it (is it running? is the Pool still there?)",
                );
            }
            Err(e) => return Verdict::error("reading the BatchSandbox", e.to_string()),
            Ok(Some(_)) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
    let mut left_pods = Vec::new();
    if deletes_released_pods(&ctx.profile, pool) {
        for pod in pods {
            if let Ok(Some(p)) = ctx.cluster.get(&KnownKind::POD.object(Some(ns), pod)).await
                && p["metadata"]["deletionTimestamp"].is_null()
            {
                left_pods.push(pod.clone());
            }
        }
    }
    if !left_pods.is_empty() {
        return Verdict::fail(
            format!("sandbox {id} deleted"),
            format!("its pods {} were not recycled (recycleStrategy Delete)", left_pods.join(", ")),
        );
    }
    let gone = ctx.endpoint.request(Method::GET, &path, None, true).await.map_or(0, |r| r.status);
    if gone != 404 {
        return Verdict::fail(
            format!("GET {path} after delete → {gone}"),
            "the server still knows the deleted sandbox",
        );
    }
    Verdict::pass(format!(
        "sandbox {id} Running on pool {pool} (pods {}), deleted, BatchSandbox and pods gone, GET → 404",
        pods.join(",")
    ))
}
