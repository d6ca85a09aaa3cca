//! A request whose connection is lost before its answer arrives is sent again (`cluster::http2`).
//! For a create that the server had already carried out, the second attempt is refused as
//! existing: a verify run must then take its own probe namespace and pod as created (found by its
//! run label), and still refuse an object of the same name that another run made. The proxy
//! tests hit this only when a cut point happens to fall there; this test makes it happen.

use std::time::Duration;

use osbx::cluster::{Cluster, ConnectOptions};
use osbx::verify::probe::{self, Run};
use serde_json::json;

use crate::cluster::plane;

#[tokio::test]
async fn a_create_sent_again_takes_the_runs_own_object_and_refuses_another_runs() {
    let options = ConnectOptions {
        kubeconfig: Some(plane().kubeconfig.clone()),
        context: None,
        qps: std::num::NonZeroU32::new(50),
        concurrency: 4,
        request_timeout: Duration::from_secs(10),
    };
    let cluster = Cluster::connect(&options).await.unwrap();
    let run = Run::new(60, Duration::from_secs(60), None);
    // The same name, made by another run.
    let other = Run { id: format!("{}-other", run.id), ..run.clone() };

    run.create_namespace(&cluster).await.unwrap();
    run.create_namespace(&cluster).await.expect("the run's own namespace, created a second time");
    let refused = other.create_namespace(&cluster).await.expect_err("another run's namespace");
    assert!(refused.to_string().contains("already exists"), "{refused}");

    let spec = json!({"containers": [{"name": "probe", "image": "busybox"}]});
    let ours = probe::pod(&run, "sent-twice", "test", &spec);
    probe::create_pod(&cluster, &ours).await.unwrap();
    probe::create_pod(&cluster, &ours).await.expect("the run's own pod, created a second time");
    let theirs = probe::pod(&other, "sent-twice", "test", &spec);
    let refused = probe::create_pod(&cluster, &theirs).await.expect_err("another run's pod");
    // Said in one line: the server's message and code, not the client's debug form.
    let said = refused.to_string();
    assert!(said.contains("already exists (409)") && !said.contains("Status {"), "{said}");

    run.cleanup(&cluster, &[]).await;
}
