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
