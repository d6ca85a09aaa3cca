//! A profile that renames everything a user may rename, through the whole loop: the control
//! plane in `sbx-system`, sandboxes in `sbx`, other chart source, release and layer names.

use std::time::Instant;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use kube::Api;
use serde_json::json;

use super::world::World;
use super::{KEY, SERIAL, assert_outcome, bench, checks, flux};
use crate::support::outputs;

/// The checks that can pass on this plane (see `full_loop`).
const PASSING: &str = "flux.layers,nodes.ready,opensandbox.server,opensandbox.pools,opensandbox.lifecycle";

/// The renamed profile reaches Ready through the real Flux controllers and the real chart, and
/// every object lands where the profile says: the chart's controller and server (Deployments,
/// Service, ServiceAccounts) in `sbx-system` and nothing in the chart's default
/// `opensandbox-system`, which does not even exist; the API key Secret beside the server; the
/// Pools filled in `sbx`. `osbx verify` then passes every check this plane can pass, with the
/// real server serving `sbx`. (Before osbx rendered the chart's `namespaceOverride`, this install
/// failed: `namespaces "opensandbox-system" not found`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_control_plane_reaches_ready_where_the_profile_says() {
    const S: &str = "renamed";
    let _one_at_a_time = SERIAL.lock().await;
    let started = Instant::now();
    let mut world = World::start_applied_with(S, |p| {
        p["opensandbox"]["namespaces"] = json!({"controlPlane": "sbx-system", "sandbox": "sbx"});
        p["opensandbox"]["source"]["name"] = json!("sandbox-chart");
        p["opensandbox"]["release"]["name"] = json!("sandbox-platform");
        p["opensandbox"]["release"]["releaseName"] = json!("sbx");
        p["opensandbox"]["release"]["valuesConfigMap"] = json!("sandbox-platform-values");
        p["layers"][0]["name"] = json!("platform");
        p["layers"][1]["name"] = json!("platform-pools");
        p["layers"][1]["dependsOn"] = json!(["platform"]);
    })
    .await;
    let layout = world.layout();
    assert_eq!((layout.control_plane.as_str(), layout.sandbox.as_str()), ("sbx-system", "sbx"));

    let namespaces: Api<Namespace> = Api::all(world.client.clone());
    assert!(namespaces.get_opt("opensandbox-system").await.unwrap().is_none(), "the chart's default namespace exists");
    let deployments: Api<Deployment> = Api::namespaced(world.client.clone(), "sbx-system");
    for name in ["opensandbox-server", "opensandbox-controller-manager"] {
        let d = deployments.get(name).await.unwrap_or_else(|e| panic!("Deployment sbx-system/{name}: {e}"));
        let available = d.status.and_then(|s| s.available_replicas).unwrap_or(0);
        assert!(available >= 1, "Deployment sbx-system/{name} has no available replica");
    }
    let services: Api<Service> = Api::namespaced(world.client.clone(), "sbx-system");
    services.get("opensandbox-server").await.expect("Service sbx-system/opensandbox-server");
    let secrets: Api<Secret> = Api::namespaced(world.client.clone(), "sbx-system");
    let secret = secrets.get("opensandbox-api-key").await.expect("the API key Secret in sbx-system");
    assert_eq!(secret.data.unwrap()["api-key"].0, KEY.as_bytes());
    for name in ["pod", "vm"] {
        let pool = flux::pool(&world.client, "sbx", name).await.unwrap_or_else(|| panic!("Pool sbx/{name}"));
        flux::assert_pool_filled(&pool);
    }

    let url = world.start_server().await;
    let (out, took) = world.osbx(&["verify", "--only", PASSING, "--server-url", &url, "-o", "json"]).await;
    let (stdout, stderr) = outputs(&out);
    let got = checks(&stdout, &stderr);
    for id in ["flux.layers", "nodes.ready", "opensandbox.server", "opensandbox.pools"] {
        assert_outcome(&got, id, "PASS");
    }
    for pool in ["pod", "vm"] {
        assert_outcome(&got, &format!("opensandbox.lifecycle.{pool}"), "PASS");
    }
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    bench(S, "verify_passing_wall", took.as_secs_f64());
    bench(S, "scenario_wall", started.elapsed().as_secs_f64());
}
