//! The played OpenSandbox controller (`tests/played/opensandbox.rs`) against the real API server,
//! held to what the real controller was measured to do (`../shared/reference/real-controllers.md`,
//! `opensandbox.md` §4): without Ready pods it creates one pod and waits; a Pool fills to its
//! buffer with the status fields the CRD requires; a pooled BatchSandbox gets a pod of the pool
//! (the allocation annotation, the finalizer, its endpoints and a Ready status) and the pool
//! refills; a deleted sandbox's pod is deleted, the finalizer goes and the pool refills; a changed
//! template replaces the idle pods. Pods are run by the test (bound, Running and Ready), as a
//! kubelet would, only once it says so.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::cluster::{self, standin, wait_for};
use crate::played::opensandbox::{
    ANNO_ALLOC_STATUS, ANNO_ENDPOINTS, FINALIZER_POOL_ALLOCATION, LABEL_POOL_NAME, LABEL_POOL_REVISION, pool_resource,
    sandbox_resource,
};

const WAIT: Duration = Duration::from_secs(30);

/// The pods of `pool` that are not being deleted.
async fn pods(client: &kube::Client, ns: &str, pool: &str) -> Vec<Pod> {
    let lp = ListParams::default().labels(&format!("{LABEL_POOL_NAME}={pool}"));
    let list = Api::<Pod>::namespaced(client.clone(), ns).list(&lp).await.unwrap();
    list.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
}

/// Wait until the Pool's status satisfies `ok`; returns it.
async fn pool_status(api: &Api<DynamicObject>, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    wait_for(what, WAIT, || async {
        let pool = api.get("p").await.ok()?;
        let status = pool.data["status"].clone();
        (status["observedGeneration"] == json!(pool.metadata.generation) && ok(&status)).then_some(status)
    })
    .await
}

/// Run the pool's pods as a kubelet would: bound and Ready; deleted ones gone at once.
fn kubelet(client: kube::Client, ns: String) -> standin::AbortOnDrop {
    standin::AbortOnDrop::spawn(async move {
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        loop {
            for pod in
                api.list(&ListParams::default().labels(LABEL_POOL_NAME)).await.map(|l| l.items).unwrap_or_default()
            {
                let name = pod.metadata.name.clone().unwrap_or_default();
                if pod.metadata.deletion_timestamp.is_some() {
                    let now = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
                    // The loop's next pass sees what this step did not do; the test's assertions read the result.
                    let _ = api.delete(&name, &now).await;
                } else if pod.status.as_ref().and_then(|s| s.container_statuses.as_ref()).is_none() {
                    // A pod not yet startable is tried again on the next pass.
                    let _ = standin::try_pod_running(&client, &ns, &name, "it-node-played").await;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_played_opensandbox_controller_keeps_the_recorded_contract() {
    let client = cluster::client().await;
    cluster::install_crds(&client, "opensandbox").await;
    let ns = cluster::namespace(&client, "played").await;
    let pools: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &pool_resource());
    let sandboxes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &sandbox_resource());
    let pool = json!({"apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": "Pool", "metadata": {"name": "p", "namespace": ns},
        "spec": {"template": {"metadata": {"labels": {"team": "a"}},
                              "spec": {"containers": [{"name": "sandbox", "image": "example.com/sandbox:v1"}]}},
                 "capacitySpec": {"bufferMin": 2, "bufferMax": 2, "poolMin": 2, "poolMax": 4}}});
    pools.create(&PostParams::default(), &serde_json::from_value(pool).unwrap()).await.unwrap();
    let uid = pools.get("p").await.unwrap().metadata.uid.unwrap();
    let (_controller, _) = standin::opensandbox_controller(&client, &ns);

    // No pod Ready yet: one pod, and it waits.
    let first =
        wait_for("the first pool pod", WAIT, || async { pods(&client, &ns, "p").await.into_iter().next() }).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(pods(&client, &ns, "p").await.len(), 1, "more than one pod while none is Ready");
    let meta = &first.metadata;
    assert_eq!(meta.generate_name.as_deref(), Some("p-"));
    let labels = meta.labels.clone().unwrap();
    assert_eq!(labels["team"], "a", "the template's labels");
    let revision = labels[LABEL_POOL_REVISION].clone();
    assert!(revision.len() == 16 && revision.chars().all(|c| c.is_ascii_hexdigit()), "revision {revision}");
    let owner = &meta.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("Pool", uid.as_str(), Some(true)));
    assert_eq!(first.spec.as_ref().unwrap().containers[0].image.as_deref(), Some("example.com/sandbox:v1"));

    // Pods run: the pool fills to its buffer.
    let _kubelet = kubelet(client.clone(), ns.clone());
    let status = pool_status(&pools, "the pool filled", |s| s["available"] == 2).await;
    assert_eq!(
        status,
        json!({"observedGeneration": 1, "total": 2, "allocated": 0, "available": 2, "revision": revision, "updated": 2})
    );

    // A pooled sandbox takes one pod; the pool refills its buffer.
    let sandbox = json!({"apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": "BatchSandbox",
        "metadata": {"name": "s", "namespace": ns}, "spec": {"replicas": 1, "poolRef": "p", "template": null}});
    sandboxes.create(&PostParams::default(), &serde_json::from_value(sandbox).unwrap()).await.unwrap();
    let held = wait_for("the sandbox Ready", WAIT, || async {
        let s = sandboxes.get("s").await.ok()?;
        (s.data["status"]["ready"] == 1).then_some(s)
    })
    .await;
    let alloc: Value = serde_json::from_str(&held.metadata.annotations.as_ref().unwrap()[ANNO_ALLOC_STATUS]).unwrap();
    let pod = alloc["pods"][0].as_str().unwrap().to_owned();
    assert_eq!(alloc["pods"].as_array().unwrap().len(), 1, "{alloc}");
    assert!(
        pods(&client, &ns, "p").await.iter().any(|p| p.metadata.name.as_deref() == Some(&pod)),
        "{pod} is not the pool's"
    );
    assert_eq!(held.metadata.finalizers.as_deref(), Some(&[FINALIZER_POOL_ALLOCATION.to_owned()][..]));
    assert_eq!(held.metadata.annotations.as_ref().unwrap()[ANNO_ENDPOINTS], r#"["10.244.0.10"]"#);
    let st = &held.data["status"];
    assert_eq!((&st["replicas"], &st["allocated"], &st["phase"]), (&json!(1), &json!(1), &json!("Succeed")), "{st}");
    let status =
        pool_status(&pools, "the pool refilled after the allocation", |s| s["total"] == 3 && s["available"] == 2).await;
    assert_eq!(status["allocated"], 1, "{status}");

    // Deleted: the pod goes, the finalizer goes, the sandbox goes, the pool is back to its buffer.
    sandboxes.delete("s", &DeleteParams::default()).await.unwrap();
    wait_for("the sandbox gone", WAIT, || async { sandboxes.get_opt("s").await.unwrap().is_none().then_some(()) })
        .await;
    let left: Vec<String> = pods(&client, &ns, "p").await.into_iter().filter_map(|p| p.metadata.name).collect();
    assert!(!left.contains(&pod), "the released pod {pod} is still in the pool: {left:?}");
    pool_status(&pools, "the pool after the release", |s| {
        s["total"] == 2 && s["allocated"] == 0 && s["available"] == 2
    })
    .await;

    // A new template: the idle pods are replaced by pods of the new revision.
    let patch = json!({"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}});
    pools.patch("p", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let status =
        pool_status(&pools, "the pool updated", |s| s["revision"] != revision && s["updated"] == 2 && s["total"] == 2)
            .await;
    assert_eq!(status["available"], 2, "{status}");
    for p in pods(&client, &ns, "p").await {
        assert_eq!(p.metadata.labels.unwrap()["team"], "b");
    }
}
