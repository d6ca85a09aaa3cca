//! `verify` under load: 50 pools on the stand-in cluster, the Lifecycle checks against the real
//! OpenSandbox server. Every check runs, the client keeps `--qps` and `--concurrency` (towards
//! the API server and towards the Lifecycle API), every sandbox and probe pod is gone at the end,
//! and what a SIGKILLed run left is swept by the next run.
#![allow(clippy::print_stderr)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;

use crate::cluster::wait_for;
use crate::support::outputs;
use crate::verify::{World, leftovers, profile};

/// Pools in the profile (the two of the verify world and 48 more).
const POOLS: usize = 50;
const QPS: u32 = 40;
const CONCURRENCY: usize = 4;
const KEY: &str = "osbx-load-key-7c3e91";
/// The label the Lifecycle checks' sandboxes carry (the run that created them).
const SANDBOX_RUN_LABEL: &str = "osbx-smoke";

async fn batch_sandboxes(client: &kube::Client) -> Vec<String> {
    let gvk = kube::core::GroupVersionKind::gvk("sandbox.opensandbox.io", "v1alpha1", "BatchSandbox");
    let (ar, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "vf-sbx", &ar);
    api.list(&ListParams::default().labels(SANDBOX_RUN_LABEL))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|b| b.metadata.name)
        .collect()
}

/// Wait until `whose` sandboxes, probe namespaces and probe pods are gone.
async fn nothing_left(client: &kube::Client, whose: &str) {
    wait_for(&format!("{whose}'s sandboxes to go"), Duration::from_secs(30), || async {
        batch_sandboxes(client).await.is_empty().then_some(())
    })
    .await;
    wait_for(&format!("{whose}'s probes to go"), Duration::from_secs(30), || async {
        leftovers(client).await.is_empty().then_some(())
    })
    .await;
}

fn verify(world: &World, url: &str, extra: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_osbx"));
    cmd.env("OSBX_COLOR", "never")
        .env("OSBX_API_KEY", KEY)
        .args(["verify", "--server-url", url, "--qps", &QPS.to_string(), "--concurrency", &CONCURRENCY.to_string()])
        .args(extra)
        .arg("--profile")
        .arg(world.profile_path())
        .arg("--kubeconfig")
        .arg(&world.plane.kubeconfig)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd
}

/// Total requests of a `RequestCounts` object.
fn total(counts: &Value) -> u64 {
    ["reads", "dry_runs", "writes", "reviews"].iter().map(|k| counts[k].as_u64().unwrap_or(0)).sum()
}

/// The least wall time `requests` take at `qps` per second (the first second's are free).
#[allow(clippy::cast_precision_loss)]
fn floor_secs(requests: u64) -> f64 {
    (requests.saturating_sub(u64::from(QPS))) as f64 / f64::from(QPS)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_with_fifty_pools_keeps_the_client_limits_and_leaves_nothing() {
    // The verify world's 4 s probe deadline is for its failure tests; here 50 sandboxes are
    // created and released at once by the played controller (one polling loop, not the real
    // one's 256 concurrent syncs), so a release may take longer than 10 s on a busy machine.
    // What this test measures is the client's limits, so the deadline is an ordinary one.
    let pools = (0..POOLS - 2)
        .fold(profile(), |p, i| p.pool(&format!("p{i:02}"), "runc", [1, 1, 1, 1]))
        .set("verify.probeDeadlineSeconds", 60);
    let world = World::start_with(&pools).await;
    let lifecycle = world.lifecycle(KEY, "30").await;
    let server = &lifecycle.server;

    // Every check, once (but exec: the stand-in's pods run no execd).
    let started = Instant::now();
    let out = tokio::task::spawn_blocking({
        let mut cmd = verify(&world, &server.url, &["-o", "json", "--skip", "opensandbox.exec"]);
        move || cmd.output().unwrap()
    })
    .await
    .unwrap();
    let wall = started.elapsed().as_secs_f64();
    let (stdout, stderr) = outputs(&out);
    assert!(!stdout.contains(KEY) && !stderr.contains(KEY), "the API key was printed");
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}{stderr}"));
    let checks = report["checks"].as_array().unwrap();
    let lifecycle: Vec<&Value> =
        checks.iter().filter(|c| c["id"].as_str().unwrap().starts_with("opensandbox.lifecycle.")).collect();
    assert_eq!(lifecycle.len(), POOLS, "one Lifecycle check per pool");
    for c in checks {
        // The Kata annotation checks prove the kata layer's policy and drop-ins; this world's
        // profile renders no kata layer, so they say so (SKIP) rather than pass.
        let expected = if c["id"].as_str().unwrap().starts_with("kata.annotations") { "SKIP" } else { "PASS" };
        assert_eq!(c["outcome"], expected, "{c}\n{stderr}");
    }
    assert_eq!(out.status.code(), Some(0), "{stderr}");

    // The limits, seen from the counts and the clock.
    let (api, life) = (&report["requests"]["api"], &report["requests"]["lifecycle"]);
    let (api_total, life_total) = (total(api), total(life));
    eprintln!(
        "reliability-bench: verify {POOLS} pools: {wall:.1} s wall; API server {api_total} requests ({api}), \
         Lifecycle API {life_total} requests ({life}); --qps {QPS} --concurrency {CONCURRENCY}"
    );
    assert!(api["peak_in_flight"].as_u64().unwrap() <= CONCURRENCY as u64, "{api}");
    assert!(life["peak_in_flight"].as_u64().unwrap() <= CONCURRENCY as u64, "{life}");
    assert!(life_total >= 3 * POOLS as u64, "create, read and delete per pool: {life}");
    let floor = floor_secs(api_total).max(floor_secs(life_total));
    assert!(wall >= floor, "{wall:.1} s for {api_total} + {life_total} requests at {QPS}/s (at least {floor:.1} s)");

    // Nothing left: no sandbox, no probe namespace or pod.
    nothing_left(&world.client, "the run").await;

    // A run killed while its sandboxes exist: the next run sweeps them (once the killed run's
    // time is up), with its probe namespace.
    let mut child =
        verify(&world, &server.url, &["--only", "opensandbox.lifecycle", "--verify-timeout", "5s"]).spawn().unwrap();
    let created: BTreeSet<String> = wait_for("sandboxes of the run to kill", Duration::from_secs(60), || async {
        let now = batch_sandboxes(&world.client).await;
        (now.len() >= 3).then_some(now.into_iter().collect())
    })
    .await;
    child.kill().unwrap();
    child.wait().expect("reap the killed osbx");
    assert!(!created.is_empty());
    // The killed run expires 5 s after its --verify-timeout (from its start).
    tokio::time::sleep(Duration::from_secs(12)).await;
    let out = tokio::task::spawn_blocking({
        let mut cmd = verify(&world, &server.url, &["--only", "nodes.ready"]);
        move || cmd.output().unwrap()
    })
    .await
    .unwrap();
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("removed what earlier interrupted runs left") && stderr.contains("sandboxes of run"),
        "{stderr}"
    );
    nothing_left(&world.client, "the killed run").await;
    drop(lifecycle);
}
