//! The Lifecycle API checks against the real OpenSandbox server (PyPI `opensandbox-server`,
//! pinned in tests/opensandbox) on loopback; the OpenSandbox controller is played (`tests/played`).

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use super::{Lifecycle, World, assert_check};
use crate::played::opensandbox::Behaviour;
use crate::support::{osbx, output_off_runtime, outputs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_against_the_real_opensandbox_server() {
    let world = World::start().await;
    let key = "osbx-test-key-5f1d2c";
    let lifecycle = world.lifecycle(key, "6").await;
    let Lifecycle { server, behaviour, .. } = &lifecycle;

    let run = |only: &'static str| {
        let url = server.url.clone();
        let world = &world;
        async move {
            let mut cmd = osbx();
            cmd.current_dir(world.dir.path()).env("OSBX_API_KEY", key);
            cmd.args(["verify", "--only", only, "--server-url", &url, "-o", "json"]);
            cmd.arg("--profile").arg(world.profile_path()).arg("--kubeconfig").arg(&world.plane.kubeconfig);
            let out = output_off_runtime(cmd).await;
            let (stdout, stderr) = outputs(&out);
            assert!(!stdout.contains(key) && !stderr.contains(key), "the API key was printed");
            let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout} {stderr}"));
            (out.status.code(), v["checks"].as_array().unwrap().clone())
        }
    };

    // The stand-in's pods are no containers: the sandboxes are Running, yet nothing listens on
    // execd's port, and the real server's proxy answers 502 (the #1692 class).
    let (code, checks) = run("opensandbox").await;
    assert_check(&checks, "opensandbox.server", "PASS", "no key → 401 MISSING_API_KEY");
    assert_check(&checks, "opensandbox.lifecycle.pod", "PASS", "deleted, BatchSandbox and pods gone, GET → 404");
    assert_check(&checks, "opensandbox.lifecycle.vm", "PASS", "Running on pool vm");
    for pool in ["pod", "vm"] {
        let id = format!("opensandbox.exec.{pool}");
        assert_check(&checks, &id, "FAIL", "/proxy/44772/ping (");
        assert_check(&checks, &id, "FAIL", "→ 502");
        assert_check(&checks, &id, "FAIL", "Could not connect to the backend sandbox");
        assert_check(&checks, &id, "FAIL", "the Pool template does not start execd (OpenSandbox #1692)");
        assert_check(&checks, &id, "FAIL", &format!("in pool {pool}'s sandbox"));
    }
    // The reclaim of the Kata pool's sandbox, with the stand-in's host probe results.
    assert_check(&checks, "opensandbox.reclaim.vm", "PASS", "after it no process names the sandbox");
    assert_eq!(code, Some(1), "{checks:?}");

    // The controller never allocates: the server times out the create.
    *behaviour.lock().unwrap() = Behaviour { allocate: false, release: true };
    let (code, checks) = run("opensandbox.lifecycle.pod").await;
    assert_eq!(code, Some(1));
    assert_check(
        &checks,
        "opensandbox.lifecycle.pod",
        "FAIL",
        "did not become Running within the server's create timeout",
    );

    // The controller never releases: the BatchSandbox stays behind after delete.
    *behaviour.lock().unwrap() = Behaviour { allocate: true, release: false };
    let (code, checks) = run("opensandbox.lifecycle.pod").await;
    assert_eq!(code, Some(1));
    assert_check(&checks, "opensandbox.lifecycle.pod", "FAIL", "was left behind");
    *behaviour.lock().unwrap() = Behaviour { allocate: true, release: true };

    // Without OSBX_API_KEY, the key comes from the Secret the profile names.
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "api-key", "namespace": "vf-system"},
                        "stringData": {"api-key": key}});
    let (api, name) = crate::cluster::api_for(&world.client, &secret).await;
    api.patch(&name, &PatchParams::apply("test"), &Patch::Apply(&secret)).await.unwrap();
    let mut args: Vec<String> = ["verify", "--only", "opensandbox.lifecycle.pod", "--server-url", &server.url]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    args.extend(["--profile".into(), world.profile_path().display().to_string()]);
    args.extend(["--kubeconfig".into(), world.plane.kubeconfig.display().to_string()]);
    let out = tokio::task::spawn_blocking(move || osbx().env_remove("OSBX_API_KEY").args(args).output().unwrap())
        .await
        .unwrap();
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(!stdout.contains(key) && !stderr.contains(key));
    drop(lifecycle);
}
