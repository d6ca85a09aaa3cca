//! The OpenSandbox controller (v0.2.0, the image the pinned chart deploys), played: it fills
//! `Pool`s with pods and allocates and releases pooled `BatchSandbox`es.
//!
//! **Why played**: the controller is in no package registry (its module path resolves nowhere
//! on the Go module proxy; `../shared/reference/real-controllers.md`), and the project may not
//! build its source.
//!
//! **Where the facts come from**: `../shared/reference/real-controllers.md` (what the real
//! controller was measured to do on a test plane: a Pool with bufferMin 2 / poolMin 2 reaches
//! `available: 2`; without Ready pods it creates one pod and waits; a pooled BatchSandbox gets
//! `ready: 1` about 0.6 s after creation and is released in about 0.2 s, its pod deleted and the
//! pool refilled) and `../shared/reference/opensandbox.md` §4 (the CRDs, the scaling formula, the
//! labels, annotations and finalizer, the status fields), with the details of each step as the
//! controller's v0.2.0 source does them (read, not copied or built):
//!
//! - **Pool pods**: the template's metadata and spec, `generateName: <pool>-`, a controller
//!   owner reference to the Pool, labels `sandbox.opensandbox.io/pool-name` and
//!   `sandbox.opensandbox.io/pool-revision`; a refused create is a Warning event `FailedCreate`
//!   on the Pool (`Failed to create pool pod: …`), a created one a Normal `SuccessfulCreate`.
//! - **Scaling**: over the pool's pods that are not being deleted, `buffer = pods − allocated`;
//!   outside `[bufferMin, bufferMax]` the wanted buffer is `(bufferMin + bufferMax) / 2`;
//!   `desired = max(allocated + unmet requests + wanted buffer, poolMin)`; creation is limited by
//!   `poolMax − pods` and by `scaleStrategy.maxUnavailable` (default 25 % of `desired`, rounded
//!   up, at least 1) minus the pods not Ready — so without Ready pods, one pod at a time. Scale-in
//!   deletes the oldest idle pods.
//! - **Template changes** (recreate update): idle pods of an older revision are replaced, those
//!   not Ready at once, Ready ones within `updateStrategy.maxUnavailable` (default 25 %).
//! - **Allocation** (packed): each pooled BatchSandbox (same namespace, `spec.poolRef`, no
//!   template) gets `spec.replicas` idle Ready pods, in order; the controller writes
//!   `sandbox.opensandbox.io/alloc-status` (`{"pods":[…]}`) and the finalizer
//!   `pool.sandbox.opensandbox.io/pool-allocation`.
//! - **Release** (recycle strategy `Delete`, the default): a deleted BatchSandbox's pods are
//!   deleted; once they are gone, `sandbox.opensandbox.io/alloc-released` lists them and the
//!   finalizer goes, and the pool refills. Pods named in `alloc-release` are released the same
//!   way without deleting the sandbox.
//! - **Status**: Pool `observedGeneration`, `total` (pods not being deleted), `allocated`,
//!   `available` (idle and Ready), `revision` and `updated` (pods at it); BatchSandbox
//!   `observedGeneration`, `replicas`, `allocated` (pods bound to a node), `ready`, `phase`
//!   (`Pending` until a pod is Ready, then `Succeed`; `Failed` on a crash-looping or unpullable
//!   pod) with its conditions, and the annotation `sandbox.opensandbox.io/endpoints` (the pods'
//!   IPs, a JSON array).
//!
//! **What it cannot show**: the real controller's own bugs; its scale behaviour (it reconciles
//! on watch events with up to 256 concurrent syncs, this one polls every 200 ms); restarts and
//! upgrades (its allocation state lives in memory and is rebuilt from the annotations; this one
//! reads the annotations on every pass); eviction (`pool.opensandbox.io/evict`), the `Restart`
//! and `Noop` recycle strategies, task scheduling (`taskTemplate`), template-mode BatchSandboxes,
//! pause/resume and snapshots, leader election, metrics. The revision has the real format (the
//! first 8 bytes of a SHA-256 of the template JSON, in hex) and changes exactly when the template
//! changes, but not the same digits: Go's encoder writes the template's fields in another order.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// The label that names a pod's pool.
pub const LABEL_POOL_NAME: &str = "sandbox.opensandbox.io/pool-name";
/// The label with the pool template's revision a pod was made from.
pub const LABEL_POOL_REVISION: &str = "sandbox.opensandbox.io/pool-revision";
/// The pods allocated to a BatchSandbox (`{"pods":[…]}`).
pub const ANNO_ALLOC_STATUS: &str = "sandbox.opensandbox.io/alloc-status";
/// Pods a BatchSandbox asks to give back.
pub const ANNO_ALLOC_RELEASE: &str = "sandbox.opensandbox.io/alloc-release";
/// Pods given back.
pub const ANNO_ALLOC_RELEASED: &str = "sandbox.opensandbox.io/alloc-released";
/// The IPs of a BatchSandbox's pods (a JSON array).
pub const ANNO_ENDPOINTS: &str = "sandbox.opensandbox.io/endpoints";
/// Held on a pooled BatchSandbox until its pods are released.
pub const FINALIZER_POOL_ALLOCATION: &str = "pool.sandbox.opensandbox.io/pool-allocation";

const GROUP: &str = "sandbox.opensandbox.io";
const VERSION: &str = "v1alpha1";
const PASS_INTERVAL: Duration = Duration::from_millis(200);

/// What the played controller does; a test may change it while the controller runs, to show
/// what osbx says about a controller that fails in that way.
#[derive(Clone, Copy, Debug)]
pub struct Behaviour {
    /// Allocate idle pods to pooled BatchSandboxes (else a create through the server times out).
    pub allocate: bool,
    /// Release the pods of deleted BatchSandboxes (else they stay Terminating).
    pub release: bool,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self { allocate: true, release: true }
    }
}

/// The played controller; [`Controller::run`] reconciles until it is dropped.
pub struct Controller {
    client: Client,
    namespace: Option<String>,
    behaviour: Arc<Mutex<Behaviour>>,
    verbose: bool,
    last_said: Mutex<String>,
}

impl Controller {
    /// A controller for `namespace` (every namespace if `None`, as the real one watches).
    pub fn new(client: Client, namespace: Option<String>, behaviour: Arc<Mutex<Behaviour>>) -> Self {
        Self { client, namespace, behaviour, verbose: false, last_said: Mutex::default() }
    }

    /// Say on stderr what it does (pods created and deleted, allocations, releases): the
    /// process does, into its log; the tests keep their output for their own findings.
    #[cfg_attr(test, allow(dead_code))]
    #[must_use]
    pub fn verbose(mut self) -> Self {
        self.verbose = true;
        self
    }

    /// Reconcile every 200 ms, forever. A pass that fails (the CRDs not installed yet, the API
    /// server away) is tried again at the next one.
    pub async fn run(self) {
        loop {
            if let Err(e) = self.pass().await
                && !matches!(&e, kube::Error::Api(s) if s.code == 404)
            {
                self.say(&format!("pass failed: {}", brief(&e)));
            }
            tokio::time::sleep(PASS_INTERVAL).await;
        }
    }

    /// Log a line (verbose only), not the same line twice in a row.
    #[allow(clippy::print_stderr)]
    fn say(&self, what: &str) {
        let mut last = self.last_said.lock().unwrap();
        if self.verbose && *last != what {
            eprintln!("opensandbox-controller (played): {what}");
            what.clone_into(&mut last);
        }
    }

    /// The kind `ar` in the controller's scope.
    fn scoped(&self, ar: &ApiResource) -> Api<DynamicObject> {
        match &self.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, ar),
            None => Api::all_with(self.client.clone(), ar),
        }
    }

    /// One pass: every Pool, then every pooled BatchSandbox's status.
    async fn pass(&self) -> Result<(), kube::Error> {
        let behaviour = *self.behaviour.lock().unwrap();
        let pools = self.scoped(&pool_resource()).list(&ListParams::default()).await?.items;
        let sandboxes = self.scoped(&sandbox_resource()).list(&ListParams::default()).await?.items;
        let pods: Vec<Pod> = match &self.namespace {
            Some(ns) => Api::<Pod>::namespaced(self.client.clone(), ns),
            None => Api::<Pod>::all(self.client.clone()),
        }
        .list(&ListParams::default())
        .await?
        .items;
        for pool in &pools {
            if pool.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if let Err(e) = self.reconcile_pool(pool, &sandboxes, &pods, behaviour).await {
                self.say(&format!("pool {}/{}: {}", pool.namespace().unwrap_or_default(), pool.name_any(), brief(&e)));
            }
        }
        for sandbox in sandboxes.iter().filter(|s| is_pooled(s) && s.metadata.deletion_timestamp.is_none()) {
            if let Err(e) = self.sandbox_status(sandbox, &pods).await {
                self.say(&format!("batchsandbox {}: {}", sandbox.name_any(), brief(&e)));
            }
        }
        Ok(())
    }

    /// One Pool, in the controller's order: allocate, release, replace outdated idle pods,
    /// scale, write the status.
    async fn reconcile_pool(
        &self,
        pool: &DynamicObject,
        sandboxes: &[DynamicObject],
        pods: &[Pod],
        behaviour: Behaviour,
    ) -> Result<(), kube::Error> {
        let ns = pool.namespace().unwrap_or_default();
        let name = pool.name_any();
        let uid = pool.metadata.uid.clone().unwrap_or_default();
        let spec = &pool.data["spec"];

        // The pool's pods that are not being deleted, oldest first.
        let mut active: Vec<&Pod> = pods
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(&ns) && p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.owner_references().iter().any(|o| o.uid == uid && o.controller == Some(true)))
            .collect();
        active.sort_by(|a, b| {
            (a.metadata.creation_timestamp.as_ref().map(|t| t.0), a.name_any())
                .cmp(&(b.metadata.creation_timestamp.as_ref().map(|t| t.0), b.name_any()))
        });
        let mine: Vec<(&DynamicObject, Request)> = sandboxes
            .iter()
            .filter(|s| s.namespace().as_deref() == Some(&ns) && is_pooled(s))
            .filter(|s| s.data["spec"]["poolRef"].as_str() == Some(&name))
            .map(|s| (s, Request::of(s)))
            .collect();
        let mut state = PoolState::new(&mine);

        let mut supply = 0;
        if behaviour.allocate {
            supply += self.allocate(&ns, &mine, &active, &mut state).await?;
        }
        if behaviour.release {
            self.release(&ns, &mine, &active, &mut state).await?;
        }
        let revision = revision(&spec["template"]);
        let idle = state.replace_outdated(&active, spec, &revision);
        supply += state.supply;
        self.scale(pool, &active, &state, &idle, supply, &revision).await?;

        // Status, from the pods listed at the start of the pass and the allocation after it.
        let status = json!({
            "observedGeneration": pool.metadata.generation,
            "total": active.len(),
            "allocated": state.allocation.len(),
            "available": active.iter().filter(|p| is_ready(p) && !state.allocation.contains_key(&p.name_any())).count(),
            "revision": revision,
            "updated": active.iter().filter(|p| label(p, LABEL_POOL_REVISION) == Some(revision.as_str())).count(),
        });
        if pool.data.get("status") != Some(&status) {
            let patch = json!({"status": status});
            self.pools_in(&ns).patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        }
        Ok(())
    }

    /// Packed allocation of idle Ready pods, sandbox by sandbox; returns the pods still wanted.
    async fn allocate(
        &self,
        ns: &str,
        mine: &[(&DynamicObject, Request)],
        active: &[&Pod],
        state: &mut PoolState,
    ) -> Result<i64, kube::Error> {
        let mut available: Vec<String> = active
            .iter()
            .filter(|p| is_ready(p) && !state.allocation.contains_key(&p.name_any()))
            .map(|p| p.name_any())
            .collect();
        let mut unmet = 0;
        for (sandbox, r) in mine {
            if r.supplement <= 0 {
                continue;
            }
            let take = usize::try_from(r.supplement).unwrap_or(0).min(available.len());
            unmet += r.supplement - i64::try_from(take).unwrap_or(0);
            if take == 0 {
                continue;
            }
            let new: Vec<String> = available.drain(..take).collect();
            let mut pods = r.allocated.clone();
            pods.extend(new.iter().cloned());
            let mut finalizers = sandbox.finalizers().to_vec();
            if !finalizers.iter().any(|f| f == FINALIZER_POOL_ALLOCATION) {
                finalizers.push(FINALIZER_POOL_ALLOCATION.to_owned());
            }
            let patch = json!({"metadata": {"annotations": {ANNO_ALLOC_STATUS: json!({"pods": pods}).to_string()},
                                            "finalizers": finalizers}});
            self.sandboxes_in(ns).patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            self.say(&format!("allocated {new:?} to {ns}/{}", r.name));
            for pod in new {
                state.allocation.insert(pod, r.name.clone());
            }
        }
        Ok(unmet)
    }

    /// Release (recycle strategy `Delete`): a held pod is deleted; once it is gone it is recorded
    /// as released, and a deleted sandbox whose pods are all released loses the finalizer.
    async fn release(
        &self,
        ns: &str,
        mine: &[(&DynamicObject, Request)],
        active: &[&Pod],
        state: &mut PoolState,
    ) -> Result<(), kube::Error> {
        for (sandbox, r) in mine {
            if r.to_release.is_empty() {
                continue;
            }
            let (live, gone): (Vec<String>, Vec<String>) =
                r.to_release.iter().cloned().partition(|p| active.iter().any(|a| a.name_any() == *p));
            state.to_delete.extend(live);
            if gone.is_empty() {
                continue;
            }
            let mut released = r.released.clone();
            released.extend(gone.iter().cloned());
            let record = json!({"pods": released}).to_string();
            let mut patch = json!({"metadata": {"annotations": {ANNO_ALLOC_RELEASED: record}}});
            if r.deleting && r.allocated.iter().all(|p| released.contains(p)) {
                let kept: Vec<&String> =
                    sandbox.finalizers().iter().filter(|f| *f != FINALIZER_POOL_ALLOCATION).collect();
                patch["metadata"]["finalizers"] = json!(kept);
            }
            self.sandboxes_in(ns).patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            self.say(&format!("released {gone:?} from {ns}/{}", r.name));
            for pod in gone {
                state.allocation.remove(&pod);
            }
        }
        Ok(())
    }

    /// Create or delete pods towards the wanted size (see the module docs), and delete the pods
    /// released or replaced.
    async fn scale(
        &self,
        pool: &DynamicObject,
        active: &[&Pod],
        state: &PoolState,
        idle: &[&Pod],
        supply: i64,
        revision: &str,
    ) -> Result<(), kube::Error> {
        let ns = pool.namespace().unwrap_or_default();
        let spec = &pool.data["spec"];
        let cap = Capacity::of(&spec["capacitySpec"]);
        let pods = active.len().count_i64();
        let allocated = state.allocation.len().count_i64();
        let buffer = pods - allocated;
        let wanted_buffer = if buffer < cap.buffer_min || buffer > cap.buffer_max {
            i64::midpoint(cap.buffer_min, cap.buffer_max)
        } else {
            buffer
        };
        let desired = (allocated + supply + wanted_buffer).max(cap.pool_min);
        let room = (cap.pool_max - pods).max(0);
        if desired > pods && room > 0 {
            let not_ready = active.iter().filter(|p| !is_ready(p)).count().count_i64();
            let limit = scaled(&spec["scaleStrategy"]["maxUnavailable"], desired) - not_ready;
            for _ in 0..(desired - pods).min(room).min(limit).max(0) {
                self.create_pod(pool, revision).await;
            }
        }
        let scale_in = usize::try_from((pods - desired).max(0)).unwrap_or(0);
        let mut doomed: Vec<String> =
            state.to_delete.iter().filter(|p| active.iter().any(|a| a.name_any() == **p)).cloned().collect();
        doomed.extend(idle.iter().take(scale_in).map(|p| p.name_any()));
        let pods_api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        for pod in doomed {
            match pods_api.delete(&pod, &DeleteParams::default()).await {
                Ok(_) => self.say(&format!("deleted pod {ns}/{pod} of pool {}", pool.name_any())),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Create one pod from the pool's template.
    async fn create_pod(&self, pool: &DynamicObject, revision: &str) {
        let ns = pool.namespace().unwrap_or_default();
        let name = pool.name_any();
        let template = &pool.data["spec"]["template"];
        let mut meta = json!({
            "generateName": format!("{name}-"),
            "namespace": ns,
            "labels": template["metadata"]["labels"].as_object().cloned().unwrap_or_default(),
            "ownerReferences": [{"apiVersion": format!("{GROUP}/{VERSION}"), "kind": "Pool", "name": name,
                                 "uid": pool.metadata.uid, "controller": true, "blockOwnerDeletion": true}],
        });
        meta["labels"][LABEL_POOL_NAME] = json!(name);
        meta["labels"][LABEL_POOL_REVISION] = json!(revision);
        for key in ["annotations", "finalizers"] {
            if let Some(v) = template["metadata"].get(key) {
                meta[key] = v.clone();
            }
        }
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]});
        let created = match serde_json::from_value::<Pod>(pod) {
            Err(e) => Err(e.to_string()),
            Ok(pod) => Api::<Pod>::namespaced(self.client.clone(), &ns)
                .create(&PostParams::default(), &pod)
                .await
                .map_err(|e| brief(&e)),
        };
        match created {
            Ok(p) => {
                self.say(&format!("created pod {ns}/{} for pool {name}", p.name_any()));
                self.event(pool, "Normal", "SuccessfulCreate", &format!("Created pool pod: {}", p.name_any())).await;
            }
            Err(e) => {
                self.say(&format!("pool {ns}/{name}: failed to create a pod: {e}"));
                self.event(pool, "Warning", "FailedCreate", &format!("Failed to create pool pod: {e}")).await;
            }
        }
    }

    /// An event about a Pool, as the controller's recorder writes it.
    async fn event(&self, pool: &DynamicObject, kind: &str, reason: &str, message: &str) {
        let ns = pool.namespace().unwrap_or_default();
        let now = now();
        let event = json!({
            "metadata": {"generateName": format!("{}.", pool.name_any()), "namespace": ns},
            "involvedObject": {"apiVersion": format!("{GROUP}/{VERSION}"), "kind": "Pool", "name": pool.name_any(),
                               "namespace": ns, "uid": pool.metadata.uid, "resourceVersion": pool.metadata.resource_version},
            "reason": reason, "message": message, "type": kind, "count": 1,
            "source": {"component": "opensandbox-controller (osbx-played)"},
            "firstTimestamp": now, "lastTimestamp": now,
        });
        if let Ok(ev) = serde_json::from_value::<k8s_openapi::api::core::v1::Event>(event) {
            // An Event is evidence for the reader, not a step of the controller's contract.
            let _ = Api::<k8s_openapi::api::core::v1::Event>::namespaced(self.client.clone(), &ns)
                .create(&PostParams::default(), &ev)
                .await;
        }
    }

    /// A pooled BatchSandbox's status and endpoints, from the pods it holds.
    async fn sandbox_status(&self, sandbox: &DynamicObject, pods: &[Pod]) -> Result<(), kube::Error> {
        let ns = sandbox.namespace().unwrap_or_default();
        let r = Request::of(sandbox);
        let mut held: Vec<&Pod> = r
            .allocated
            .iter()
            .filter(|p| !r.released.contains(*p))
            .filter_map(|name| {
                pods.iter().find(|p| p.metadata.namespace.as_deref() == Some(&ns) && p.name_any() == *name)
            })
            .collect();
        let order: BTreeMap<&String, usize> = r.allocated.iter().enumerate().map(|(i, p)| (p, i)).collect();
        held.sort_by_key(|p| (order.get(&p.name_any()).copied().unwrap_or(usize::MAX), p.name_any()));

        let ips: Vec<String> = held
            .iter()
            .map(|p| {
                let bound = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
                if bound { p.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default() } else { String::new() }
            })
            .collect();
        let endpoints = serde_json::to_string(&ips).unwrap_or_default();
        let api = self.sandboxes_in(&ns);
        if sandbox.annotations().get(ANNO_ENDPOINTS) != Some(&endpoints) {
            let patch = json!({"metadata": {"annotations": {ANNO_ENDPOINTS: endpoints}}});
            api.patch(&sandbox.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
        }

        let old = &sandbox.data["status"];
        let ready = held
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") && is_ready(p))
            .count()
            .count_i64();
        let failure = held.iter().find_map(|p| waiting_failure(p));
        let old_phase = old["phase"].as_str().unwrap_or_default();
        let phase = match (&failure, old_phase) {
            (Some(_), _) | (None, "Failed") => "Failed",
            (None, _) if ready > 0 => "Succeed",
            (None, _) => "Pending",
        };
        let mut conditions: Vec<Value> = old["conditions"].as_array().cloned().unwrap_or_default();
        let failed_message = failure.as_ref().map(|(reason, _)| {
            let failed = held.iter().filter(|p| waiting_failure(p).is_some()).count();
            (
                reason.clone(),
                format!(
                    "{failed}/{} observed pods failed; primary reason={reason}; sample pod={}",
                    held.len(),
                    failure.as_ref().map(|f| f.1.clone()).unwrap_or_default()
                ),
            )
        });
        match &failed_message {
            Some((reason, message)) if old_phase != "Failed" => {
                set_condition(&mut conditions, "PodFailed", true, reason, message);
            }
            None if old_phase != "Failed" => set_condition(&mut conditions, "PodFailed", false, "", ""),
            Some(_) | None => {}
        }
        let (ready_c, progressing) = match phase {
            "Succeed" => ((true, "PodsReady", "Sandbox is running"), (false, "", "")),
            "Failed" => ((false, "Failed", "Sandbox is unavailable"), (false, "", "")),
            _ => ((false, "Creating", "Sandbox is being created"), (true, "Creating", "Sandbox is being created")),
        };
        set_condition(&mut conditions, "Ready", ready_c.0, ready_c.1, ready_c.2);
        set_condition(&mut conditions, "Progressing", progressing.0, progressing.1, progressing.2);
        set_condition(&mut conditions, "Paused", false, "", "");

        let mut status = old.as_object().cloned().unwrap_or_default();
        status.insert("observedGeneration".into(), json!(sandbox.metadata.generation));
        status.insert("replicas".into(), json!(held.len()));
        status.insert(
            "allocated".into(),
            json!(held.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()).count()),
        );
        status.insert("ready".into(), json!(ready));
        // The Go type writes its task counters always (they are required by the CRD's schema).
        for counter in ["taskRunning", "taskSucceed", "taskFailed", "taskPending", "taskUnknown"] {
            status.entry(counter).or_insert(json!(0));
        }
        status.insert("phase".into(), json!(phase));
        if conditions.is_empty() {
            status.remove("conditions");
        } else {
            status.insert("conditions".into(), json!(conditions));
        }
        let status = Value::Object(status);
        if *old != status {
            api.patch_status(&sandbox.name_any(), &PatchParams::default(), &Patch::Merge(&json!({"status": status})))
                .await?;
        }
        Ok(())
    }

    fn pools_in(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &pool_resource())
    }

    fn sandboxes_in(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &sandbox_resource())
    }
}

/// A Pool's allocation during a pass, and what the pass decided to delete.
struct PoolState {
    /// Pod → the sandbox holding it.
    allocation: BTreeMap<String, String>,
    /// Pods to delete (released or outdated).
    to_delete: Vec<String>,
    /// Pods to create in place of outdated ones.
    supply: i64,
}

impl PoolState {
    /// Who holds which pod, from the sandboxes' annotations.
    fn new(mine: &[(&DynamicObject, Request)]) -> Self {
        let mut allocation = BTreeMap::new();
        for (_, r) in mine {
            for pod in r.allocated.iter().filter(|p| !r.released.contains(*p)) {
                allocation.insert(pod.clone(), r.name.clone());
            }
        }
        Self { allocation, to_delete: Vec::new(), supply: 0 }
    }

    /// Recreate update: idle pods of an older revision make way for new ones (those not Ready
    /// at once, Ready ones within `updateStrategy.maxUnavailable`). Returns the idle pods left,
    /// oldest first.
    fn replace_outdated<'a>(&mut self, active: &[&'a Pod], spec: &Value, revision: &str) -> Vec<&'a Pod> {
        let not_ready = active.iter().filter(|p| !is_ready(p)).count().count_i64();
        let mut budget =
            (scaled(&spec["updateStrategy"]["maxUnavailable"], active.len().count_i64()) - not_ready).max(0);
        let mut idle = Vec::new();
        for p in active.iter().copied().filter(|p| !self.allocation.contains_key(&p.name_any())) {
            let outdated = label(p, LABEL_POOL_REVISION) != Some(revision);
            if outdated && (!is_ready(p) || budget > 0) {
                if is_ready(p) {
                    budget -= 1;
                }
                self.to_delete.push(p.name_any());
                self.supply += 1;
            } else {
                idle.push(p);
            }
        }
        idle
    }
}

/// What one pooled BatchSandbox holds and asks for.
struct Request {
    name: String,
    deleting: bool,
    allocated: Vec<String>,
    released: Vec<String>,
    /// Pods it still needs.
    supplement: i64,
    /// Pods to give back.
    to_release: Vec<String>,
}

impl Request {
    fn of(sandbox: &DynamicObject) -> Self {
        let pods = |key: &str| -> Vec<String> {
            sandbox
                .annotations()
                .get(key)
                .and_then(|raw| serde_json::from_str::<Value>(raw).ok())
                .and_then(|v| v["pods"].as_array().cloned())
                .unwrap_or_default()
                .into_iter()
                .filter_map(|p| p.as_str().map(str::to_owned))
                .collect()
        };
        let allocated = pods(ANNO_ALLOC_STATUS);
        let released = pods(ANNO_ALLOC_RELEASED);
        let deleting = sandbox.metadata.deletion_timestamp.is_some();
        let (supplement, to_release) = if deleting {
            (0, allocated.iter().filter(|p| !released.contains(p)).cloned().collect())
        } else {
            let replicas = sandbox.data["spec"]["replicas"].as_i64().unwrap_or(0);
            let asked = pods(ANNO_ALLOC_RELEASE).into_iter().filter(|p| !released.contains(p)).collect();
            ((replicas - i64::try_from(allocated.len()).unwrap_or(0)).max(0), asked)
        };
        Self { name: sandbox.name_any(), deleting, allocated, released, supplement, to_release }
    }
}

/// The four capacity numbers of a Pool.
struct Capacity {
    buffer_min: i64,
    buffer_max: i64,
    pool_min: i64,
    pool_max: i64,
}

impl Capacity {
    fn of(spec: &Value) -> Self {
        let n = |k: &str| spec[k].as_i64().unwrap_or(0);
        Self { buffer_min: n("bufferMin"), buffer_max: n("bufferMax"), pool_min: n("poolMin"), pool_max: n("poolMax") }
    }
}

/// An API error in one line: the server's message, else the client's.
fn brief(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        e => e.to_string(),
    }
}

/// The Pool kind.
pub fn pool_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, "Pool"), "pools")
}

/// The BatchSandbox kind.
pub fn sandbox_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, "BatchSandbox"), "batchsandboxes")
}

/// A BatchSandbox that takes its pods from a pool (not from a template of its own).
fn is_pooled(sandbox: &DynamicObject) -> bool {
    sandbox.data["spec"]["poolRef"].as_str().is_some_and(|p| !p.is_empty())
        && sandbox.data["spec"]["template"].is_null()
}

/// The pool template's revision: the first 8 bytes of the SHA-256 of its JSON, in hex.
fn revision(template: &Value) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, template.to_string().as_bytes());
    digest.as_ref()[..8].iter().fold(String::new(), |mut hex, b| {
        use std::fmt::Write;
        // Writing to a String cannot fail.
        let _ = write!(hex, "{b:02x}");
        hex
    })
}

/// An IntOrString like `maxUnavailable` scaled to `total` (percentages rounded up; default
/// 25 %), at least 1.
fn scaled(value: &Value, total: i64) -> i64 {
    let n = match value {
        Value::Number(n) => n.as_i64().unwrap_or(1),
        Value::String(s) => {
            s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()).map_or(1, |p| (p * total + 99) / 100)
        }
        _ => (25 * total + 99) / 100,
    };
    n.max(1)
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref().and_then(|l| l.get(key)).map(String::as_str)
}

/// A container waiting for a reason the controller counts as a failed pod, and the pod's name.
fn waiting_failure(pod: &Pod) -> Option<(String, String)> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find_map(|cs| {
        let reason = cs.state.as_ref()?.waiting.as_ref()?.reason.clone()?;
        matches!(
            reason.as_str(),
            "CrashLoopBackOff" | "ImagePullBackOff" | "ErrImagePull" | "CreateContainerConfigError"
        )
        .then(|| (reason, pod.name_any()))
    })
}

/// Set (or, when `status` is false, drop) a condition, keeping its transition time when nothing
/// about it changes.
fn set_condition(conditions: &mut Vec<Value>, kind: &str, status: bool, reason: &str, message: &str) {
    let at = conditions.iter().position(|c| c["type"] == kind);
    if !status {
        if let Some(i) = at {
            conditions.remove(i);
        }
        return;
    }
    let same = at.is_some_and(|i| {
        let c = &conditions[i];
        c["status"] == "True" && c["reason"] == reason && c["message"] == message
    });
    if same {
        return;
    }
    let now = now();
    let c = json!({"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now});
    match at {
        Some(i) => conditions[i] = c,
        None => conditions.push(c),
    }
}

/// The time now, as the API server writes it (RFC 3339, whole seconds).
fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A count as the API's integer type.
trait CountI64 {
    fn count_i64(self) -> i64;
}

impl CountI64 for usize {
    fn count_i64(self) -> i64 {
        i64::try_from(self).unwrap_or(i64::MAX)
    }
}
