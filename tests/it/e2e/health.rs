//! Flux's Ready means what verify means: the pools layer's Kustomization carries the pools
//! component's health rule as `healthCheckExprs`, and the real kustomize-controller evaluates it.
//! A Pool whose pods no node can take (a nodeSelector no node has, so the real scheduler leaves
//! them Pending and the played controller reports nothing available) keeps the layer not Ready
//! in Flux itself, its message naming the Pool, while `osbx verify` fails the same Pool; once a
//! node takes the pods (the test labels it), Flux turns the layer Ready on its own, with no osbx
//! command in between, and verify passes.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use super::world::World;
use super::{assert_outcome, bench, checks, flux};
use crate::cluster::wait_for;
use crate::support::outputs;

const LABEL: &str = "osbx-e2e/fill";

async fn layer(world: &World, name: &str) -> Option<Value> {
    let layout = world.layout();
    flux::get(&world.client, "kustomize.toolkit.fluxcd.io/v1", "Kustomization", &layout.flux, name).await
}

async fn verify_pools(world: &World) -> String {
    let (out, _) = world.osbx(&["verify", "--only", "opensandbox.pools", "-o", "json"]).await;
    let (stdout, stderr) = outputs(&out);
    let got = checks(&stdout, &stderr);
    super::check(&got, "opensandbox.pools")["outcome"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_holds_the_pools_layer_until_the_pools_are_filled_and_verify_agrees() {
    const S: &str = "health";
    let world = World::scenario(S)
        .profile(|p| {
            p["pools"]["items"] = json!([{"name": "pod", "runtime": "runc",
                "capacity": {"bufferMin": 1, "bufferMax": 2, "poolMin": 1, "poolMax": 4},
                "nodeSelector": {LABEL: "yes"}}]);
            let layers = p["layers"].as_array_mut().expect("layers");
            let pools = layers.iter_mut().find(|l| l["name"] == "opensandbox-pools").expect("the pools layer");
            pools["timeout"] = json!("20s");
            pools["retryInterval"] = json!("5s");
        })
        .start()
        .await;
    let layout = world.layout();
    let sbx = layout.sandbox.clone();

    // Flux alone reconciles the render: the pools layer's Kustomization holds the rule.
    let k =
        wait_for("the pools layer's Kustomization", Duration::from_secs(120), || layer(&world, "opensandbox-pools"))
            .await;
    let exprs = &k["spec"]["healthCheckExprs"];
    assert_eq!(exprs[0]["kind"], "Pool", "{k:#}");
    assert!(exprs[0]["current"].as_str().unwrap().contains("status.total >= spec.capacitySpec.poolMin"), "{exprs}");

    // Nothing can be filled: Flux says so, naming the Pool, and so does verify.
    let subject = format!("Pool/{sbx}/pod");
    let held = wait_for("Flux holding the pools layer on the Pool", Duration::from_secs(240), || {
        let (world, subject) = (&world, &subject);
        async move {
            let k = layer(world, "opensandbox-pools").await?;
            let message = flux::not_ready(&k)?;
            message.contains(subject.as_str()).then_some(message)
        }
    })
    .await;
    bench(S, "flux_held_after_start", world.seconds());
    let pool = flux::pool(&world.client, &sbx, "pod").await.expect("the Pool exists");
    assert!(pool["status"]["available"].as_i64().unwrap_or(0) < 1, "the Pool filled after all: {pool}\nFlux: {held}");
    assert_eq!(verify_pools(&world).await, "FAIL", "verify passes a Pool Flux holds back");

    // A node takes the pods: Flux turns Ready by itself.
    let nodes: Api<Node> = Api::all(world.client.clone());
    let patch = json!({"metadata": {"labels": {LABEL: "yes"}}});
    nodes.patch("kwok-node-0", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("label the node");
    let filled = Instant::now();
    wait_for("Flux calling the pools layer Ready", Duration::from_secs(180), || {
        let world = &world;
        async move { flux::not_ready(&layer(world, "opensandbox-pools").await?).is_none().then_some(()) }
    })
    .await;
    bench(S, "flux_ready_after_fill", filled.elapsed().as_secs_f64());
    let pool = flux::pool(&world.client, &sbx, "pod").await.expect("the Pool");
    flux::assert_pool_filled(&pool);
    let (out, _) = world.osbx(&["verify", "--only", "opensandbox.pools", "-o", "json"]).await;
    let (stdout, stderr) = outputs(&out);
    assert_outcome(&checks(&stdout, &stderr), "opensandbox.pools", "PASS");
    bench(S, "total", world.seconds());
}
