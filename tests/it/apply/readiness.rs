//! Waiting for readiness the way Flux decides it: a stale Ready and a Pool without capacity time
//! out naming what is stalled (a terminal failure failing fast is proven with the real
//! helm-controller: `e2e::chart_failure`).

use crate::cluster::standin::Controllers;
use crate::support::outputs;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_ready_is_not_ready_and_the_timeout_names_what_is_stalled() {
    let (client, dir, kubeconfig) = setup("st", &[("pod", "runc", [0, 1, 0, 2])]).await;
    let _c = Controllers { stale: true, ..controllers("st") }.spawn(client.clone());
    let out = run(&kubeconfig, dir.path(), &["apply", "--timeout", "6s"]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("timeout waiting for"), "{stderr}");
    for subject in [
        "GitRepository/st-system/opensandbox",
        "HelmRelease/st-system/opensandbox",
        "Kustomization/st-flux/opensandbox",
    ] {
        assert!(
            stderr.contains(&format!("{subject} status: 'InProgress': generation 1 not yet observed (observed 0)")),
            "{subject}: {stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_without_capacity_times_out_naming_it() {
    let (client, dir, kubeconfig) = setup("pc", &[("pod", "runc", [1, 2, 1, 4])]).await;
    let _c = Controllers { pools_stay_empty: true, ..controllers("pc") }.spawn(client.clone());
    let out = run(&kubeconfig, dir.path(), &["apply", "--timeout", "8s"]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("Pool/pc-sbx/pod status: 'InProgress': no status yet"), "{stderr}");
}

/// Wait latency, side by side with `kubectl wait` (bench/run reads the `e2e-bench: wait` lines):
/// the stand-in holds the last Flux object osbx waits for; once osbx has been waiting on it alone
/// for a while, the test sets it Ready, and an independent watch notes when the server says so.
/// osbx's apply and `kubectl wait --for=condition=Ready` must each return after that moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_returns_on_the_ready_transition_itself() {
    use futures::StreamExt as _;
    use std::time::{Duration, Instant};

    let bin =
        std::process::Command::new(crate::support::root().join("tests/cluster/build")).arg("plane").output().unwrap();
    let kubectl = std::path::PathBuf::from(String::from_utf8(bin.stdout).unwrap().trim()).join("kubectl");
    let (mut osbx_ms, mut kubectl_ms) = (Vec::new(), Vec::new());
    for round in 1..=3 {
        // A fresh prefix per run: on a plane that kept an earlier run's objects, they are Ready.
        let p = format!("w{round}{:04}", std::process::id() % 10_000);
        let (client, dir, kubeconfig) = setup(&p, &[("pod", "runc", [0, 1, 0, 2])]).await;
        let held = "opensandbox-pools";
        let _c = Controllers { hold: vec![format!("Kustomization/{held}")], ..controllers(&p) }.spawn(client.clone());
        let gvk = kube::core::GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization");
        let (ar, _) = kube::discovery::pinned_kind(&client, &gvk).await.unwrap();
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &format!("{p}-flux"), &ar);
        // The independent watch: when the server first says the held object is Ready.
        let seen = {
            let api = api.clone();
            tokio::spawn(async move {
                let params = kube::api::WatchParams::default().fields(&format!("metadata.name={held}")).timeout(280);
                let mut events = std::pin::pin!(api.watch(&params, "0").await.unwrap());
                while let Some(Ok(event)) = events.next().await {
                    if let kube::api::WatchEvent::Added(o) | kube::api::WatchEvent::Modified(o) = event {
                        let v = serde_json::to_value(&o).unwrap();
                        if v["status"]["conditions"][0]["status"] == "True" {
                            return Instant::now();
                        }
                    }
                }
                panic!("the watch ended before the held object was Ready");
            })
        };
        let osbx_done = {
            let (kubeconfig, dir) = (kubeconfig.clone(), dir.path().to_path_buf());
            tokio::spawn(async move {
                let out = run(&kubeconfig, &dir, &["apply", "--timeout", "2m"]).await;
                (Instant::now(), out)
            })
        };
        // osbx has applied everything and waits on the held object alone.
        let held_obj = cluster::wait_for("the held Kustomization", Duration::from_secs(60), || async {
            api.get_opt(held).await.ok().flatten()
        })
        .await;
        let kubectl_done = {
            let (kubectl, kubeconfig, ns) = (kubectl.clone(), kubeconfig.clone(), format!("{p}-flux"));
            tokio::task::spawn_blocking(move || {
                let out = std::process::Command::new(kubectl)
                    .args([
                        "wait",
                        "--for=condition=Ready",
                        "--timeout=120s",
                        "-n",
                        &ns,
                        &format!("kustomization/{held}"),
                    ])
                    .env("KUBECONFIG", kubeconfig)
                    .output()
                    .unwrap();
                (Instant::now(), out)
            })
        };
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!osbx_done.is_finished(), "osbx returned before the held object was Ready");
        let v = serde_json::to_value(&held_obj).unwrap();
        let generation = v["metadata"]["generation"].as_i64().unwrap_or(1);
        let cond = crate::cluster::standin::Ready {
            status: true,
            reason: "ReconciliationSucceeded",
            message: "held, then released",
            observed: Some(generation),
        };
        crate::cluster::standin::flux_ready(&client, &ar, &format!("{p}-flux"), held, &cond).await;
        let seen = seen.await.unwrap();
        let (osbx_at, out) = osbx_done.await.unwrap();
        let (_, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let (kubectl_at, kout) = kubectl_done.await.unwrap();
        assert!(kout.status.success(), "{}", String::from_utf8_lossy(&kout.stderr));
        osbx_ms.push(osbx_at.saturating_duration_since(seen).as_millis());
        kubectl_ms.push(kubectl_at.saturating_duration_since(seen).as_millis());
    }
    osbx_ms.sort_unstable();
    kubectl_ms.sort_unstable();
    // Medians and the worst of three rounds, in seconds, for bench/run.
    #[allow(clippy::cast_precision_loss)]
    let s = |ms: u128| ms as f64 / 1000.0;
    #[allow(clippy::print_stderr)]
    let line = |metric: &str, v: f64| eprintln!("e2e-bench: wait {metric} {v:.3}");
    line("osbx_after_ready", s(osbx_ms[1]));
    line("osbx_after_ready_max", s(osbx_ms[2]));
    line("kubectl_after_ready", s(kubectl_ms[1]));
}
