//! The `sandbox-quota` component through the whole loop: Flux applies the ResourceQuota and the
//! LimitRange the profile asks for into the sandbox namespace, the real quota controller
//! (kube-controller-manager) counts the pools' pods against it, and the real API server's
//! admission gives a container without requests the profile's defaults and refuses the pod one
//! past the quota.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use super::bench;
use super::world::World;

/// Wait until the quota controller has counted the namespace: `status.used.pods` is set.
async fn used_pods(quotas: &Api<ResourceQuota>, name: &str) -> (i64, i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let q = quotas.get(name).await.unwrap_or_else(|e| panic!("ResourceQuota {name}: {e}"));
        let status = q.status.unwrap_or_default();
        let read = |m: Option<
            &std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
        >| { m.and_then(|m| m.get("pods")).and_then(|q| q.0.parse::<i64>().ok()) };
        if let (Some(hard), Some(used)) = (read(status.hard.as_ref()), read(status.used.as_ref())) {
            return (hard, used);
        }
        assert!(Instant::now() < deadline, "the quota controller never counted {name}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn bare_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "example.com/idle:v1"}]},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_holds_the_sandboxes_to_the_quota() {
    const S: &str = "quota";
    let mut world = World::scenario(S)
        .profile(|p| {
            p["layers"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "sandbox-quota", "component": "sandbox-quota", "dependsOn": ["opensandbox"]}));
            p["sandboxQuota"] = json!({
                "name": "agents",
                "hard": {"pods": 20},
                "containerDefaults": {"requests": {"cpu": "50m"}, "limits": {"memory": "128Mi"}},
            });
        })
        .applied()
        .start()
        .await;
    let ns = world.layout().sandbox;
    let quotas: Api<ResourceQuota> = Api::namespaced(world.client.clone(), &ns);
    let (hard, used) = used_pods(&quotas, "agents").await;
    assert_eq!(hard, 20, "the quota Flux applied");
    assert!(used >= 2, "the pools' pods are counted: {used}");

    // Leave room for exactly one more pod, through the repository and apply like any change.
    world.profile["sandboxQuota"]["hard"]["pods"] = json!(used + 1);
    world.render_commit_push().await;
    let (out, _, _) = world.apply("5m").await;
    assert_eq!(out.status.code(), Some(0), "{}", crate::support::outputs(&out).1);
    assert_eq!(used_pods(&quotas, "agents").await.0, used + 1);

    let pods: Api<Pod> = Api::namespaced(world.client.clone(), &ns);
    let admitted =
        pods.create(&PostParams::default(), &bare_pod("within-quota")).await.expect("a pod within the quota");
    let resources = admitted.spec.unwrap().containers[0].resources.clone().unwrap_or_default();
    assert_eq!(resources.requests.unwrap_or_default()["cpu"].0, "50m", "LimitRange defaultRequest");
    assert_eq!(resources.limits.unwrap_or_default()["memory"].0, "128Mi", "LimitRange default");
    // The quota controller counts it before the next admission decision.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match pods.create(&PostParams::default(), &bare_pod("past-quota")).await {
            Err(kube::Error::Api(e)) if e.code == 403 => {
                assert!(e.message.contains("exceeded quota: agents"), "{}", e.message);
                break;
            }
            Err(e) => panic!("{e}"),
            Ok(_) => {
                // Admitted before the first pod was counted: remove it and try again.
                // The retry below asserts the outcome; a pod already gone is fine.
                let _ = pods.delete("past-quota", &kube::api::DeleteParams::default()).await;
                assert!(Instant::now() < deadline, "the pod past the quota is admitted");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    bench(S, "scenario_wall", world.seconds());
}
