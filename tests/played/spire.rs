//! spire-controller-manager, played: it turns each `ClusterSPIFFEID` of its class into SPIRE
//! registration entries, one per selected pod, with `spire-server entry create` calls against the
//! real SPIRE server, and writes the ClusterSPIFFEID's `status.stats`.
//!
//! **Why played**: `github.com/spiffe/spire-controller-manager` is not served by the Go module
//! proxy (403; `../shared/reference/real-node.md`), and the project may not build its source.
//!
//! **Where the facts come from** (`../shared/reference/acceptance-checks.md` §5, "controller
//! manager, chart, CSI"): a ClusterSPIFFEID whose `spec.className` is not the manager's is
//! ignored and gets no `status.stats` (`watchClassless: false`); namespaces in
//! `ignoreNamespaces` (kube-system, kube-public, local-path-storage, `openshift-.*`, `ibm-.*`)
//! are never selected; each pod that `namespaceSelector` and `podSelector` select gets one entry
//! whose SPIFFE ID is `spiffeIDTemplate` rendered for it and whose selectors are
//! `k8s:pod-uid:<uid>` plus the rendered `workloadSelectorTemplates`, parented to the agent of
//! the pod's node; `status.stats` counts `namespacesSelected`, `namespacesIgnored`,
//! `podsSelected`, `podEntryRenderFailures`, `entriesMasked`, `entriesToSet` and
//! `entryFailures`.
//!
//! **What it cannot show**: the real manager's own bugs and timing (it reconciles on watch
//! events; this one polls every 500 ms); its templates beyond the fields named below
//! (`.TrustDomain`, `.ClusterName`, `.PodMeta.{Name,Namespace,UID}`,
//! `.PodSpec.{ServiceAccountName,NodeName}`: anything else is a render failure); DNS names,
//! TTLs, federation, `fallback` and `hint`, entry masking between ClusterSPIFFEIDs,
//! ClusterStaticEntries and ClusterFederatedTrustDomains; the parent is the one agent of the one
//! test node (its join-token ID), not a `k8s_psat` agent ID.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// Namespaces the real manager ignores by default (the hardened chart's `ignoreNamespaces`).
const IGNORED_NAMESPACES: &[&str] = &["kube-system", "kube-public", "local-path-storage", "openshift-.*", "ibm-.*"];

/// Where the played manager finds its SPIRE server and what it manages.
pub struct Config {
    /// The `spire-server` binary (the real CLI talks to the server).
    pub spire_server: PathBuf,
    /// The server's admin socket.
    pub socket: PathBuf,
    /// The trust domain (`.TrustDomain`).
    pub trust_domain: String,
    /// `.ClusterName`.
    pub cluster_name: String,
    /// Its class: only ClusterSPIFFEIDs with this `spec.className` are processed.
    pub class_name: String,
    /// The SPIFFE ID of the agent on `node` (the parent of every entry).
    pub parent_id: String,
    /// The node whose pods get entries.
    pub node: String,
}

/// One registration entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    spiffe_id: String,
    selectors: BTreeSet<String>,
}

/// The played manager; [`ControllerManager::run`] reconciles until it is dropped.
pub struct ControllerManager {
    client: Client,
    config: Config,
}

impl ControllerManager {
    /// A manager for `config`.
    pub fn new(client: Client, config: Config) -> Self {
        Self { client, config }
    }

    /// Reconcile every 500 ms, forever; a failed pass is tried again at the next.
    pub async fn run(self) {
        let mut last = String::new();
        loop {
            if let Err(e) = self.pass().await
                && e != last
            {
                say(&format!("pass failed: {e}"));
                last = e;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn pass(&self) -> Result<(), String> {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("spire.spiffe.io", "v1alpha1", "ClusterSPIFFEID"),
            "clusterspiffeids",
        );
        let ids_api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        let brief = |e: kube::Error| e.to_string();
        let ids = ids_api.list(&ListParams::default()).await.map_err(brief)?.items;
        let namespaces =
            Api::<Namespace>::all(self.client.clone()).list(&ListParams::default()).await.map_err(brief)?;
        let pods = Api::<Pod>::all(self.client.clone()).list(&ListParams::default()).await.map_err(brief)?.items;

        let mut desired: BTreeMap<Entry, String> = BTreeMap::new();
        let mut stats: BTreeMap<String, Value> = BTreeMap::new();
        for id in ids.iter().filter(|i| i.data["spec"]["className"].as_str() == Some(&self.config.class_name)) {
            let (entries, s) = self.entries_of(id, &namespaces.items, &pods);
            for e in entries {
                desired.insert(e, id.name_any());
            }
            stats.insert(id.name_any(), s);
        }

        let existing = self.show()?;
        let mut failures: BTreeMap<String, u64> = BTreeMap::new();
        for (entry, owner) in &desired {
            if !existing.values().any(|e| e == entry)
                && let Err(e) = self.create(entry)
            {
                say(&format!("creating an entry for {} failed: {e}", entry.spiffe_id));
                *failures.entry(owner.clone()).or_default() += 1;
            }
        }
        for (entry_id, entry) in &existing {
            if !desired.contains_key(entry) {
                self.delete(entry_id)?;
            }
        }

        for id in &ids {
            let Some(s) = stats.get_mut(&id.name_any()) else { continue };
            s["entryFailures"] = json!(failures.get(&id.name_any()).copied().unwrap_or(0));
            if id.data["status"]["stats"] != *s {
                let patch = json!({"status": {"stats": s}});
                ids_api
                    .patch_status(&id.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(brief)?;
            }
        }
        Ok(())
    }

    /// The entries one ClusterSPIFFEID asks for on this node, and its stats.
    fn entries_of(&self, id: &DynamicObject, namespaces: &[Namespace], pods: &[Pod]) -> (Vec<Entry>, Value) {
        let spec = &id.data["spec"];
        let (mut selected_ns, mut ignored_ns, mut selected_pods, mut render_failures) = (0, 0, 0, 0);
        let mut entries = Vec::new();
        for ns in namespaces {
            let name = ns.name_any();
            let labels = ns.labels().clone();
            if !selects(&spec["namespaceSelector"], &labels) {
                continue;
            }
            if ignored(&name) {
                ignored_ns += 1;
                continue;
            }
            selected_ns += 1;
            for pod in pods.iter().filter(|p| p.metadata.namespace.as_deref() == Some(&name)) {
                let on_node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&self.config.node);
                let done = matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
                if !on_node || done || !selects(&spec["podSelector"], pod.labels()) {
                    continue;
                }
                selected_pods += 1;
                match self.entry_for(spec, pod) {
                    Some(e) => entries.push(e),
                    None => render_failures += 1,
                }
            }
        }
        let stats = json!({
            "namespacesSelected": selected_ns, "namespacesIgnored": ignored_ns, "podsSelected": selected_pods,
            "podEntryRenderFailures": render_failures, "entriesMasked": 0, "entriesToSet": entries.len(),
            "entryFailures": 0,
        });
        (entries, stats)
    }

    fn entry_for(&self, spec: &Value, pod: &Pod) -> Option<Entry> {
        let spiffe_id = self.render(spec["spiffeIDTemplate"].as_str()?, pod)?;
        let mut selectors = BTreeSet::from([format!("k8s:pod-uid:{}", pod.metadata.uid.as_deref()?)]);
        for t in spec["workloadSelectorTemplates"].as_array().into_iter().flatten() {
            selectors.insert(self.render(t.as_str()?, pod)?);
        }
        Some(Entry { spiffe_id, selectors })
    }

    /// A template with the fields this manager knows filled in; `None` for any other field.
    fn render(&self, template: &str, pod: &Pod) -> Option<String> {
        let spec = pod.spec.as_ref();
        let fields: [(&str, Option<&str>); 7] = [
            (".TrustDomain", Some(&self.config.trust_domain)),
            (".ClusterName", Some(&self.config.cluster_name)),
            (".PodMeta.Name", pod.metadata.name.as_deref()),
            (".PodMeta.Namespace", pod.metadata.namespace.as_deref()),
            (".PodMeta.UID", pod.metadata.uid.as_deref()),
            (".PodSpec.ServiceAccountName", spec.and_then(|s| s.service_account_name.as_deref()).or(Some("default"))),
            (".PodSpec.NodeName", spec.and_then(|s| s.node_name.as_deref())),
        ];
        let mut out = String::new();
        let mut rest = template;
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find("}}")? + start;
            let field = rest[start + 2..end].trim();
            out.push_str(fields.iter().find(|(f, _)| *f == field)?.1?);
            rest = &rest[end + 2..];
        }
        out.push_str(rest);
        Some(out)
    }

    fn cli(&self, args: &[&str]) -> Result<String, String> {
        let socket = self.config.socket.display().to_string();
        let mut full: Vec<&str> = args.to_vec();
        full.extend(["-socketPath", &socket]);
        let out = std::process::Command::new(&self.config.spire_server)
            .args(&full)
            .output()
            .map_err(|e| format!("{}: {e}", self.config.spire_server.display()))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!("spire-server {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
        }
    }

    /// The entries this manager owns (parented to its agent, with a pod-uid selector), by id.
    fn show(&self) -> Result<BTreeMap<String, Entry>, String> {
        let text = self.cli(&["entry", "show", "-output", "json", "-parentID", &self.config.parent_id])?;
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("entry show: {e}: {text}"))?;
        let spiffe = |id: &Value| {
            format!("spiffe://{}{}", id["trust_domain"].as_str().unwrap_or(""), id["path"].as_str().unwrap_or(""))
        };
        let mut out = BTreeMap::new();
        for e in v["entries"].as_array().into_iter().flatten() {
            let selectors: BTreeSet<String> = e["selectors"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| format!("{}:{}", s["type"].as_str().unwrap_or(""), s["value"].as_str().unwrap_or("")))
                .collect();
            if selectors.iter().any(|s| s.starts_with("k8s:pod-uid:")) {
                out.insert(
                    e["id"].as_str().unwrap_or_default().to_owned(),
                    Entry { spiffe_id: spiffe(&e["spiffe_id"]), selectors },
                );
            }
        }
        Ok(out)
    }

    fn create(&self, entry: &Entry) -> Result<(), String> {
        let mut args = vec!["entry", "create", "-parentID", &self.config.parent_id, "-spiffeID", &entry.spiffe_id];
        for s in &entry.selectors {
            args.extend(["-selector", s]);
        }
        self.cli(&args).map(|_| say(&format!("entry {} {:?}", entry.spiffe_id, entry.selectors)))
    }

    fn delete(&self, id: &str) -> Result<(), String> {
        self.cli(&["entry", "delete", "-entryID", id]).map(drop)
    }
}

#[allow(clippy::print_stderr)]
fn say(what: &str) {
    eprintln!("spire-controller-manager (played): {what}");
}

fn ignored(namespace: &str) -> bool {
    IGNORED_NAMESPACES.iter().any(|p| match p.strip_suffix(".*") {
        Some(prefix) => namespace.starts_with(prefix),
        None => namespace == *p,
    })
}

/// A label selector (`matchLabels` and `matchExpressions`) against labels; an absent or empty
/// selector selects everything.
fn selects(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str());
    let by_expressions = selector["matchExpressions"].as_array().into_iter().flatten().all(|e| {
        let key = e["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = e["values"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let has = labels.get(key);
        match e["operator"].as_str() {
            Some("In") => has.is_some_and(|v| values.contains(&v.as_str())),
            Some("NotIn") => has.is_none_or(|v| !values.contains(&v.as_str())),
            Some("Exists") => has.is_some(),
            Some("DoesNotExist") => has.is_none(),
            _ => false,
        }
    });
    by_labels && by_expressions
}
