//! A profile that renames everything a user may rename, through the whole loop: the control
//! plane in `sbx-system`, sandboxes in `sbx`, other chart source, release and layer names.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use kube::Api;
use serde_json::json;

use super::world::World;
use super::{KEY, bench, flux};

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
    let mut world = World::scenario(S)
        .profile(|p| {
            p["opensandbox"]["namespaces"] = json!({"controlPlane": "sbx-system", "sandbox": "sbx"});
            p["opensandbox"]["source"]["name"] = json!("sandbox-chart");
            p["opensandbox"]["release"]["name"] = json!("sandbox-platform");
            p["opensandbox"]["release"]["releaseName"] = json!("sbx");
            p["opensandbox"]["release"]["valuesConfigMap"] = json!("sandbox-platform-values");
            p["layers"][0]["name"] = json!("platform");
            p["layers"][1]["name"] = json!("platform-pools");
            p["layers"][1]["dependsOn"] = json!(["platform"]);
        })
        .applied()
        .start()
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
    world.verify_passing(&url).await;
    bench(S, "scenario_wall", world.seconds());
}
