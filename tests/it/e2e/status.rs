//! `osbx status` against the e2e plane (the real Flux controllers, the played OpenSandbox
//! controller, kwok, the real server): every field from real objects; a stuck layer, an empty
//! pool and an unreachable server each shown as such; `--watch` showing a change within a second
//! of it, measured from the change (the moment an independent watch of the test sees it).

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::api::{Patch, PatchParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

use super::bench;
use super::world::World;
use crate::cluster::{api_for, wait_for};
use crate::support::outputs;

async fn status(world: &World, extra: &[&str]) -> (Option<i32>, Value, String) {
    let repo = world.flux.dir.display().to_string();
    let mut args = vec!["status", "--repo", repo.as_str(), "-o", "json"];
    args.extend(extra);
    let (out, _) = world.osbx(&args).await;
    let (stdout, stderr) = outputs(&out);
    let doc = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("status -o json: {e}: {stdout}{stderr}"));
    (out.status.code(), doc, stderr)
}

fn find<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array().unwrap().iter().find(|x| x["name"] == name).unwrap_or_else(|| panic!("no {name} in {list:#}"))
}

/// `osbx status --watch` (text) as a child: its stdout lines arrive on a channel.
struct Watching {
    child: Child,
    lines: mpsc::Receiver<(Instant, String)>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        // Best effort when dropped: kill fails only if the watch already exited, and wait then reaps it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Watching {
    fn start(world: &World, server_url: &str) -> Self {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_osbx"))
            .env("OSBX_COLOR", "never")
            .env("OSBX_API_KEY", super::KEY)
            .args(["status", "--watch", "--repo"])
            .arg(&world.flux.dir)
            .args(["--server-url", server_url, "--profile"])
            .arg(world.profile_path())
            .arg("--kubeconfig")
            .arg(&world.plane.kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send((Instant::now(), line)).is_err() {
                    return;
                }
            }
        });
        Self { child, lines }
    }

    /// The first line containing `what` within `timeout`, and when it came.
    fn line_with(&self, what: &str, timeout: Duration) -> Option<(Instant, String)> {
        let until = Instant::now() + timeout;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok((at, l)) if l.contains(what) => return Some((at, l)),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    }
}

/// When a watch of the test's own sees the Kustomization `name` of `api` not Ready (the watch
/// starts before the call returns).
async fn not_ready_at(api: kube::Api<kube::api::DynamicObject>, name: &str) -> tokio::task::JoinHandle<Instant> {
    let current = api.get(name).await.unwrap().metadata.resource_version.unwrap_or_default();
    let params = WatchParams::default().fields(&format!("metadata.name={name}")).timeout(120);
    let mut events = api.watch(&params, &current).await.unwrap().boxed();
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            let Ok(WatchEvent::Added(k) | WatchEvent::Modified(k)) = event else { continue };
            let not_ready = k.data["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .is_some_and(|c| c["status"] == "False");
            if not_ready {
                return Instant::now();
            }
        }
        panic!("the watch ended before the Kustomization was not Ready");
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_platform_and_what_is_wrong_and_watch_follows_changes() {
    const S: &str = "status";
    let mut world = World::scenario(S).applied().start().await;
    let layout = world.layout();
    let url = world.start_server().await;
    let head = world.flux.head();

    // Everything Ready: exit 0, each field from the real objects.
    let (code, doc, stderr) = status(&world, &["--server-url", &url]).await;
    assert_eq!(code, Some(0), "{doc:#}{stderr}");
    assert_eq!(doc["ready"], true);
    for name in ["opensandbox", "opensandbox-pools"] {
        let l = find(&doc["layers"], name);
        assert_eq!((l["ready"].as_bool(), l["againstHead"].as_str()), (Some(true), Some("same")), "{l}");
        assert_eq!(l["revision"], format!("main@sha1:{head}"), "{l}");
    }
    assert_eq!(find(&doc["layers"], "opensandbox-pools")["dependsOn"], json!(["opensandbox"]));
    let release = &doc["releases"][0];
    assert_eq!((release["name"].as_str(), release["ready"].as_bool()), (Some("opensandbox"), Some(true)), "{release}");
    assert_eq!(release["chart"], "opensandbox", "{release}");
    assert!(release["version"].as_str().is_some_and(|v| !v.is_empty()), "{release}");
    assert_eq!((doc["server"]["reachable"].as_bool(), doc["server"]["healthy"].as_bool()), (Some(true), Some(true)));
    for pool in ["pod", "vm"] {
        let p = find(&doc["pools"], pool);
        assert_eq!(p["healthy"], true, "{p}");
        assert!(p["total"].as_i64().unwrap() >= p["poolMin"].as_i64().unwrap(), "{p}");
    }
    let kata = &doc["runtimes"][0];
    assert_eq!((kata["class"].as_str(), kata["nodes"].clone()), (Some("kata-clh-runtime-rs"), json!(["kwok-node-0"])));

    // The text: the layer tree, a bar per pool.
    let repo = world.flux.dir.display().to_string();
    let (out, _) = world.osbx(&["status", "--repo", &repo, "--server-url", &url]).await;
    let (text, _) = outputs(&out);
    assert!(text.contains("  ✔ opensandbox  main@") && text.contains("  └─ ✔ opensandbox-pools"), "{text}");
    assert!(text.lines().any(|l| l.contains("✔ pod") && l.contains('[') && l.contains("total")), "{text}");
    let (out, _) = world.osbx(&["status", "--repo", &repo, "-o", "mermaid", "--server-url", &url]).await;
    assert!(outputs(&out).0.contains("opensandbox --> opensandbox_pools"), "{}", outputs(&out).0);

    // The server through the service proxy: kwok runs no container behind it, so it is
    // unreachable, and said so.
    let (code, doc, _) = status(&world, &[]).await;
    assert_eq!(code, Some(1));
    assert_eq!(
        (doc["server"]["reachable"].as_bool(), doc["ready"].as_bool()),
        (Some(false), Some(false)),
        "{:#}",
        doc["server"]
    );

    // --watch: a change shows within a second of the object's change.
    let watching = tokio::task::block_in_place(|| Watching::start(&world, &url));
    tokio::task::block_in_place(|| watching.line_with("cluster sandbox: Ready", Duration::from_secs(20)))
        .expect("the first draw");
    // A stuck layer: a path the repository does not have.
    let k = json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                   "metadata": {"name": "opensandbox-pools", "namespace": layout.flux}});
    let (api, name) = api_for(&world.client, &k).await;
    // The moment of the change: when a watch of the test's own sees Flux fail the layer (not
    // the test's poll, which would add its interval).
    let failed = not_ready_at(api.clone(), &name).await;
    let patch = json!({"spec": {"path": "./no/such/path"}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let stuck = tokio::time::timeout(Duration::from_secs(60), failed)
        .await
        .expect("Flux failing the layer within 60 s")
        .unwrap();
    let shown = tokio::task::block_in_place(|| watching.line_with("✘ opensandbox-pools", Duration::from_secs(5)));
    let (at, _) = shown.expect("--watch did not show the stuck layer");
    let latency = at.saturating_duration_since(stuck);
    assert!(latency < Duration::from_secs(1), "--watch showed the change {latency:?} after it");
    bench(S, "watch_latency", latency.as_secs_f64());
    drop(watching);
    let (code, doc, _) = status(&world, &["--server-url", &url]).await;
    assert_eq!(code, Some(1));
    let l = find(&doc["layers"], "opensandbox-pools");
    assert!(l["message"].as_str().is_some_and(|m| m.contains("no/such/path")), "{l}");

    // An empty pool (the layer is stuck, so Flux does not revert the change).
    let pool = json!({"apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": "Pool",
                      "metadata": {"name": "pod", "namespace": layout.sandbox}});
    let (pools, _) = api_for(&world.client, &pool).await;
    // Its pods go where no node is: replaced by ones that stay Pending.
    let patch = json!({"spec": {"template": {"spec": {"nodeSelector": {"osbx-e2e/no-such-node": "true"}}}}});
    pools.patch("pod", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let doc = wait_for("the pool emptied", Duration::from_secs(90), || {
        let (world, url) = (&world, url.clone());
        async move {
            let (_, doc, _) = status(world, &["--server-url", &url]).await;
            (find(&doc["pools"], "pod")["available"] == 0).then_some(doc)
        }
    })
    .await;
    let p = find(&doc["pools"], "pod");
    assert_eq!(p["healthy"], false, "a pool with nothing available is not healthy: {p}");
    assert!(p["message"].as_str().unwrap().contains("available 0 < 1"), "{p}");
    world.server = None;
    bench(S, "total", world.seconds());
}
