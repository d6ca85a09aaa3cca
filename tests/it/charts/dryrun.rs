//! Every object the charts render, offered to a real API server: the charts' CRDs installed for
//! real (and Established), the namespaces created for real, everything else server-side dry-run
//! applied. On a plane of its own, so that the charts' CRDs never reach other tests.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use serde_json::{Value, json};

use super::Finding;
use super::cases::Release;
use super::manifest::{Baseline, describe};
use crate::cluster::{self, OwnPlane};

/// The field manager of every write.
const MANAGER: &str = "osbx-chart-test";

/// Identical chart outputs (same chart, same manifests) are offered once; messages name every
/// release that produced them.
struct Group<'a> {
    releases: Vec<&'static Release>,
    chart: &'static str,
    baseline: &'a Baseline,
}

impl Group<'_> {
    /// One finding per release that rendered this output.
    fn report(&self, out: &mut Vec<Finding>, what: &str) {
        out.extend(self.releases.iter().map(|r| r.finding(&format!("chart {}: {what}", self.chart))));
    }
}

fn groups(baselines: &[Baseline]) -> Vec<Group<'_>> {
    let mut index: HashMap<(&str, &str), usize> = HashMap::new();
    let mut out: Vec<Group<'_>> = Vec::new();
    for b in baselines {
        let key = (b.chart, b.run.stdout.as_str());
        if let Some(&i) = index.get(&key) {
            out[i].releases.push(b.release);
        } else {
            index.insert(key, out.len());
            out.push(Group { releases: vec![b.release], chart: b.chart, baseline: b });
        }
    }
    out
}

/// The rejections: who rendered it, the chart, the object and the server's words.
pub async fn check(baselines: &[Baseline]) -> Vec<Finding> {
    let plane = tokio::task::spawn_blocking(OwnPlane::start).await.expect("start a plane of our own");
    let client = cluster::client_for(&plane.kubeconfig).await;
    let groups = groups(baselines);
    let mut problems = install_crds(&client, &groups).await;
    problems.extend(create_namespaces(&client, &groups).await);
    let mut apis = Apis::default();
    let mut offered = 0;
    for g in &groups {
        for object in &g.baseline.objects {
            if matches!(object["kind"].as_str(), Some("CustomResourceDefinition" | "Namespace")) {
                continue;
            }
            offered += 1;
            let ns = g.baseline.namespace_of(object);
            if let Err(why) = dry_run(&client, &mut apis, object, ns).await {
                let what = describe(object, Some(ns));
                g.report(&mut problems, &format!("{what} rejected by a server-side dry-run apply: {why}"));
            }
        }
    }
    drop(plane);
    eprintln!(
        "charts: dry-run of {offered} objects from {} distinct chart outputs ({} releases)",
        groups.len(),
        baselines.len()
    );
    problems
}

/// Apply every CRD the charts render (`--include-crds`) for real, then wait until each is
/// Established.
async fn install_crds(client: &Client, groups: &[Group<'_>]) -> Vec<Finding> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut problems = Vec::new();
    let mut names = BTreeSet::new();
    for g in groups {
        for crd in g.baseline.of_kind("CustomResourceDefinition") {
            let name = crd["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            let params = PatchParams::apply(MANAGER).force();
            match api.patch(&name, &params, &Patch::Apply(crd)).await {
                Ok(_) => {
                    names.insert(name);
                }
                Err(e) => g.report(
                    &mut problems,
                    &format!("CustomResourceDefinition {name} rejected by the API server: {}", message(&e)),
                ),
            }
        }
    }
    for name in names {
        cluster::wait_for(&format!("CRD {name} Established"), Duration::from_secs(30), || {
            let (api, name) = (api.clone(), name.clone());
            async move {
                let crd = api.get(&name).await.ok()?;
                crd.status?.conditions?.iter().any(|c| c.type_ == "Established" && c.status == "True").then_some(())
            }
        })
        .await;
    }
    problems
}

/// Create for real every namespace a chart object lands in (release namespaces included) and
/// every Namespace the charts render.
async fn create_namespaces(client: &Client, groups: &[Group<'_>]) -> Vec<Finding> {
    let mut wanted = BTreeMap::new();
    for g in groups {
        wanted.entry(g.baseline.release.namespace.clone()).or_insert_with(|| json!({}));
        for o in &g.baseline.objects {
            if o["kind"] == "Namespace" {
                wanted.insert(o["metadata"]["name"].as_str().unwrap_or_default().to_owned(), o["metadata"].clone());
            } else if let Some(ns) = o["metadata"]["namespace"].as_str() {
                wanted.entry(ns.to_owned()).or_insert_with(|| json!({}));
            }
        }
    }
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let mut problems = Vec::new();
    for (name, metadata) in wanted {
        let mut metadata = metadata;
        metadata["name"] = json!(name);
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata});
        if let Err(e) = api.patch(&name, &PatchParams::apply(MANAGER), &Patch::Apply(&ns)).await {
            problems.push(Finding::new("setup".into(), format!("Namespace {name} cannot be created: {}", message(&e))));
        }
    }
    problems
}

/// Discovered kinds, by `apiVersion/kind`.
#[derive(Default)]
struct Apis(HashMap<String, (ApiResource, ApiCapabilities)>);

impl Apis {
    /// The resource of an object's kind. Kinds of freshly Established CRDs may take a moment to
    /// appear in discovery: retried for 10 s.
    async fn get(&mut self, client: &Client, object: &Value) -> Result<(ApiResource, ApiCapabilities), String> {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default();
        let key = format!("{api_version}/{kind}");
        if let Some(found) = self.0.get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
        let start = Instant::now();
        let found = loop {
            match kube::discovery::pinned_kind(client, &gvk).await {
                Ok(found) => break found,
                Err(e) if start.elapsed() > Duration::from_secs(10) => {
                    return Err(format!("the API server serves no {api_version} {kind} ({e})"));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        };
        self.0.insert(key, found.clone());
        Ok(found)
    }
}

/// Server-side dry-run apply of one object, in `namespace` when its kind is namespaced.
async fn dry_run(client: &Client, apis: &mut Apis, object: &Value, namespace: &str) -> Result<(), String> {
    let (ar, caps) = apis.get(client, object).await?;
    let name = object["metadata"]["name"].as_str().ok_or("the object has no metadata.name")?;
    let mut object = object.clone();
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => {
            object["metadata"]["namespace"] = json!(namespace);
            Api::namespaced_with(client.clone(), namespace, &ar)
        }
        Scope::Cluster => Api::all_with(client.clone(), &ar),
    };
    api.patch(name, &PatchParams::apply(MANAGER).dry_run(), &Patch::Apply(&object))
        .await
        .map(drop)
        .map_err(|e| message(&e))
}

/// The server's message (the status message for API errors).
fn message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => other.to_string(),
    }
}
