//! Day two through git: a change and a removal, rendered, committed and pushed, reach the
//! cluster through Flux alone (no `osbx apply`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::flux;
use super::world::World;
use super::{Findings, assert_outcome, bench, checks};
use crate::cluster::wait_for;
use crate::support::outputs;

/// How long Flux may take from the reconcile request to the applied, Ready layer.
const FLUX_APPLIES: Duration = Duration::from_secs(120);

fn pool_items(profile: &mut Value) -> &mut Vec<Value> {
    profile["pools"]["items"].as_array_mut().expect("pools.items")
}

/// `osbx diff`: exit status and stdout.
async fn diff(world: &World) -> (Option<i32>, String) {
    let (out, _) = world.osbx(&["diff"]).await;
    let (stdout, stderr) = outputs(&out);
    assert!(out.status.code() != Some(2), "osbx diff failed: {stdout}{stderr}");
    (out.status.code(), stdout)
}

/// A pool's `poolMax` changed in the profile and pushed: `osbx diff` shows exactly that change
/// while Flux has not fetched it; once Flux is asked to reconcile (as `flux reconcile` does), the
/// real kustomize-controller applies it, the layer is Ready at its generation with the new
/// revision, and `osbx verify` passes the Flux and Pool checks. Afterwards the cluster is what
/// git says, so `osbx diff` has nothing to show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_through_git_reaches_the_cluster_through_flux() {
    const S: &str = "git_change";
    let mut world = World::scenario(S).applied().start().await;
    let mut findings = Findings::default();
    let layout = world.layout();
    let sbx = layout.sandbox.as_str();

    let pod = pool_items(&mut world.profile).iter_mut().find(|p| p["name"] == "pod").expect("pool pod");
    assert_eq!(pod["capacity"]["poolMax"], 8, "the default profile changed: {pod}");
    pod["capacity"]["poolMax"] = json!(6);
    let commit = world.render_commit_push().await;

    // Before Flux fetches: the change, and only it.
    let (code, stdout) = diff(&world).await;
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("► Pool/opensandbox/pod configured"), "{stdout}");
    assert!(stdout.contains("-    poolMax: 8") && stdout.contains("+    poolMax: 6"), "{stdout}");
    assert!(stdout.contains("0 to create, 1 to change, 9 unchanged, 0 to prune"), "{stdout}");
    let live = flux::pool(&world.client, sbx, "pod").await.unwrap();
    assert_eq!(live["spec"]["capacitySpec"]["poolMax"], 8, "Flux applied before it was asked");

    let asked = Instant::now();
    world.request_reconcile().await;
    let layer = flux::wait_applied(&world.client, &layout, "opensandbox-pools", &commit, FLUX_APPLIES).await;
    bench(S, "flux_applied_after_request", asked.elapsed().as_secs_f64());
    let live = flux::pool(&world.client, sbx, "pod").await.unwrap();
    assert_eq!(live["spec"]["capacitySpec"]["poolMax"], 6, "{live}");
    assert!(flux::not_ready(&layer).is_none());
    flux::wait_applied(&world.client, &layout, "opensandbox", &commit, FLUX_APPLIES).await;
    // The OpenSandbox controller sees the new generation.
    wait_for("Pool pod at its new generation", Duration::from_secs(30), || {
        let client = world.client.clone();
        async move {
            let p = flux::pool(&client, sbx, "pod").await?;
            (p["status"]["observedGeneration"] == p["metadata"]["generation"]).then_some(())
        }
    })
    .await;

    let (out, _) = world.osbx(&["verify", "--only", "flux.layers,opensandbox.pools", "-o", "json"]).await;
    let (stdout, stderr) = outputs(&out);
    let got = checks(&stdout, &stderr);
    assert_outcome(&got, "flux.layers", "PASS");
    assert_outcome(&got, "opensandbox.pools", "PASS");
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");

    let (code, stdout) = diff(&world).await;
    findings.expect(code == Some(0), || {
        format!("after Flux applied the pushed render, `osbx diff` still exits {code:?}:\n{stdout}")
    });
    bench(S, "scenario_wall", world.seconds());
    drop(world);
    findings.assert_none();
}

/// A pool dropped from the profile and pushed: after the next reconcile the real
/// kustomize-controller prunes it (and the garbage collector its pods), and `osbx verify` no
/// longer checks it; with the Kata pool gone, every check passes or is skipped on this plane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_dropped_from_the_profile_is_pruned_by_flux() {
    const S: &str = "prune";
    let mut world = World::scenario(S).applied().start().await;
    let mut findings = Findings::default();
    let layout = world.layout();
    let sbx = layout.sandbox.as_str();
    assert!(!flux::pool_pods(&world.client, sbx, "vm").await.is_empty(), "the vm pool has no pods to prune");

    pool_items(&mut world.profile).retain(|p| p["name"] != "vm");
    let commit = world.render_commit_push().await;
    let asked = Instant::now();
    world.request_reconcile().await;
    let layer = flux::wait_applied(&world.client, &layout, "opensandbox-pools", &commit, FLUX_APPLIES).await;
    wait_for("Pool vm pruned", FLUX_APPLIES, || {
        let client = world.client.clone();
        async move { flux::pool(&client, sbx, "vm").await.is_none().then_some(()) }
    })
    .await;
    bench(S, "flux_pruned_after_request", asked.elapsed().as_secs_f64());
    wait_for("the vm pool's pods gone", Duration::from_secs(60), || {
        let client = world.client.clone();
        async move { flux::pool_pods(&client, sbx, "vm").await.is_empty().then_some(()) }
    })
    .await;
    bench(S, "pool_pods_gone_after_request", asked.elapsed().as_secs_f64());
    let inventory = layer["status"]["inventory"]["entries"].to_string();
    assert!(!inventory.contains(&format!("{sbx}_vm_")), "still in Flux's inventory: {inventory}");
    let pod = flux::pool(&world.client, sbx, "pod").await.expect("the pod pool stays");
    flux::assert_pool_filled(&pod);

    let url = world.start_server().await;
    // Every check but exec: kwok's pods are no containers, so no execd answers in them (exec is
    // proven on the real node, `node::sandboxes`).
    let (out, took) = world.osbx(&["verify", "--server-url", &url, "--skip", "opensandbox.exec", "-o", "json"]).await;
    bench(S, "verify_full_wall", took.as_secs_f64());
    let (stdout, stderr) = outputs(&out);
    let got = checks(&stdout, &stderr);
    assert!(got.iter().all(|c| c["id"] != "opensandbox.lifecycle.vm"), "the pruned pool is still checked: {got:#?}");
    assert_outcome(&got, "opensandbox.lifecycle.pod", "PASS");
    assert_outcome(&got, "opensandbox.pools", "PASS");
    for id in ["kata.runtimeclass", "kata.guest-kernel", "kata.host-kvm", "kata.vmm-shared-memory"] {
        assert_outcome(&got, id, "SKIP");
    }
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");

    let (code, stdout) = diff(&world).await;
    findings.expect(code == Some(0), || format!("after Flux pruned the pool, `osbx diff` exits {code:?}:\n{stdout}"));
    bench(S, "scenario_wall", world.seconds());
    drop(world);
    findings.assert_none();
}
