//! Faults: the API server killed mid-apply, expired credentials, a wrong context.

use crate::cluster;
use crate::support::outputs;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use std::process::Output;
use std::time::Duration;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_api_server_mid_apply_is_a_clear_error_and_a_rerun_converges() {
    let (plane, client) = flux_installed(&["flux", "opensandbox"], "ka-flux").await;
    let dir = tempfile::tempdir().unwrap();
    let pools: Vec<(String, &str, [i64; 4])> = (0..12).map(|i| (format!("p{i}"), "runc", [0, 1, 0, 2])).collect();
    let pools: Vec<(&str, &str, [i64; 4])> = pools.iter().map(|(n, r, c)| (n.as_str(), *r, *c)).collect();
    std::fs::write(dir.path().join("profile.yaml"), profile("ka", &pools)).unwrap();

    // A slow apply (2 requests per second), killed part-way.
    let bin = assert_cmd::cargo::cargo_bin("osbx");
    let child = std::process::Command::new(bin)
        .current_dir(dir.path())
        .args([
            "apply",
            "--no-wait",
            "--qps",
            "2",
            "--request-timeout",
            "5s",
            "--profile",
            "profile.yaml",
            "--kubeconfig",
        ])
        .arg(&plane.kubeconfig)
        .env("OSBX_COLOR", "never")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pool_api = cluster::pool_api_in(&client, "ka-sbx").await;
    // Wait until the apply is in the middle of the pools.
    cluster::wait_for("some pools applied", Duration::from_secs(60), || {
        let pool_api = pool_api.clone();
        async move { (pool_api.list(&ListParams::default()).await.ok()?.items.len() >= 2).then_some(()) }
    })
    .await;
    let argv = plane.kill_apiserver();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("stack backtrace"), "{stderr}");
    let in_flight = stderr.lines().find(|l| l.starts_with("error:")).unwrap_or_default().to_owned();
    assert!(
        in_flight.contains("Pool/ka-sbx/p") || in_flight.contains("/ka-"),
        "the error names the object in flight: {stderr}"
    );

    // After a restart, the rerun converges: every object once, nothing lost, inventory complete.
    let (plane_dir, kc) = (plane.dir().to_path_buf(), plane.kubeconfig.clone());
    tokio::task::spawn_blocking(move || cluster::restart_apiserver_in(&plane_dir, &kc, &argv)).await.unwrap();
    // The inventory was written with the first objects: it already lists every pool, so what the
    // killed run created is tracked (and prunable) even though the run never finished.
    let client = cluster::client_for(&plane.kubeconfig).await;
    let inventories = Api::<ConfigMap>::namespaced(client, "ka-flux")
        .list(&kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=osbx"))
        .await
        .unwrap();
    let entries: Vec<Value> =
        serde_json::from_str(&inventories.items[0].data.as_ref().unwrap()["inventory.json"]).unwrap();
    for i in 0..12 {
        assert!(
            entries.iter().any(|e| e["kind"] == "Pool" && e["name"] == format!("p{i}") && e["created"] == true),
            "pool p{i} not in the inventory: {entries:?}"
        );
    }
    let out = run(&plane.kubeconfig, dir.path(), &["apply", "--no-wait", "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    let report = json_of(&out);
    let got = actions(&report);
    assert_eq!(got.len(), 19, "{got:?}");
    assert!(got.iter().all(|(_, a)| a == "created" || a == "unchanged"), "{got:?}");
    let client = cluster::client_for(&plane.kubeconfig).await;
    let pool_api = cluster::pool_api_in(&client, "ka-sbx").await;
    let mut names: Vec<String> =
        pool_api.list(&ListParams::default()).await.unwrap().into_iter().filter_map(|p| p.metadata.name).collect();
    names.sort();
    let mut want: Vec<String> = (0..12).map(|i| format!("p{i}")).collect();
    want.sort();
    assert_eq!(names, want, "no pool lost or duplicated");
    let out = run(&plane.kubeconfig, dir.path(), &["diff"]).await;
    assert_eq!(out.status.code(), Some(0), "converged: {}", outputs(&out).0);
}

/// Runs with an expired client certificate, every one of which must get the server's 401.
const EXPIRED_RUNS: usize = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_credentials_and_a_wrong_context_are_distinct_actionable_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("profile.yaml"), profile("ex", &[("pod", "runc", [0, 1, 0, 2])])).unwrap();
    let kubeconfig = cluster::plane().kubeconfig.clone();
    let plane_dir = kubeconfig.parent().unwrap();
    // A client certificate from the plane's own CA that expired yesterday.
    let script = r#"
import datetime, sys
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID, ExtendedKeyUsageOID
ca_cert = x509.load_pem_x509_certificate(open(sys.argv[1], "rb").read())
ca_key = serialization.load_pem_private_key(open(sys.argv[2], "rb").read(), password=None)
key = ec.generate_private_key(ec.SECP256R1())
now = datetime.datetime.now(datetime.timezone.utc)
cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "admin"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters")]))
    .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
    .not_valid_before(now - datetime.timedelta(days=2)).not_valid_after(now - datetime.timedelta(days=1))
    .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    .sign(ca_key, hashes.SHA256()))
open(sys.argv[3], "wb").write(cert.public_bytes(serialization.Encoding.PEM))
open(sys.argv[4], "wb").write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
"#;
    let (crt, key) = (dir.path().join("expired.crt"), dir.path().join("expired.key"));
    let status = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(plane_dir.join("client-ca.crt"))
        .arg(plane_dir.join("client-ca.key"))
        .arg(&crt)
        .arg(&key)
        .status()
        .unwrap();
    assert!(status.success());
    let b64 = |p: &std::path::Path| {
        let out = std::process::Command::new("base64").arg("-w0").arg(p).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let mut kc: Value = serde_saphyr::from_str(&std::fs::read_to_string(&kubeconfig).unwrap()).unwrap();
    kc["users"][0]["user"] = json!({"client-certificate-data": b64(&crt), "client-key-data": b64(&key)});
    let expired = dir.path().join("expired.kubeconfig");
    std::fs::write(&expired, serde_json::to_string(&kc).unwrap()).unwrap();

    let out = run(&expired, dir.path(), &["apply"]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("401 Unauthorized") && stderr.contains("expired"), "{stderr}");
    // The server closes the connection of a client it does not authenticate (GOAWAY), at times
    // before the 401 arrives: the request is sent again on a new connection, so no run loses the
    // 401 (4 of 40 runs did before that retry, ce92d27).
    let runs: Vec<Output> = futures::stream::iter((1..EXPIRED_RUNS).map(|_| run(&expired, dir.path(), &["apply"])))
        .buffer_unordered(4)
        .collect()
        .await;
    let lost: Vec<String> = runs
        .iter()
        .map(|out| outputs(out).1)
        .filter(|stderr| !(stderr.contains("401 Unauthorized") && stderr.contains("expired")))
        .collect();
    assert!(lost.is_empty(), "{} of {EXPIRED_RUNS} runs lost the 401: {lost:?}", lost.len());

    let out = run(&kubeconfig, dir.path(), &["apply", "--context", "no-such-context"]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let line = format!(
        "error: kubeconfig {} has no context \"no-such-context\" (its contexts: osbx-test); give --context one of them, or --kubeconfig the file that has it",
        kubeconfig.display()
    );
    assert!(stderr.lines().any(|l| l == line), "{stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("stack backtrace"));
}
