//! A regression between rollouts, seen where people look (issue 54, item 8): with the platform
//! unchanged (no commit, no new revision), under the acceptance layer's serving pod — the osbx
//! image as rendered, run by the real kubelet and containerd, as its rendered identity — two
//! faults in turn: the node cordoned (its next runs fail `nodes.ready`), and a pool's image made
//! unpullable (gone from the node's containerd, no registry to pull it from, the pool's pod
//! replaced: `opensandbox.pools` fails as the Pool counts none available). Its metrics, the
//! report it publishes (same revision), a Warning Event and `osbx status` say so; repaired
//! (uncordoned; the image back and the stuck pod replaced), each clears the same way. Each within
//! two intervals of the fault taking effect (a run that began just before it may miss it; the
//! next one, an interval after that run's end, cannot); the times are printed (`node-bench:`)
//! and recorded in docs/verify.md.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::acceptance::{apply_layer, job_end, logs, on_this_node, outcome, rendered, report};
use super::image::osbx_image;
use super::runtime::runc_class_on_a_kata_node;
use super::sandboxes::{apply_pools, delete_pools, ready_pod};
use super::{NodePlane, profile};
use crate::turns::{self, Need};

const NS: &str = "nd-regress";
const PROBES: &str = "nd-regress-probes";
/// The serving pod's interval.
const INTERVAL: Duration = Duration::from_secs(10);
/// The pool's image: the node's probe image under a name of this test's own, which the node's
/// containerd holds only while the test says so (no registry serves it).
const POOL_IMAGE: &str = "registry.osbx.test/regress/pool:1.35";

/// A fault this test injects, and repairs.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// The node cordoned: `nodes.ready`.
    Cordon,
    /// The pool's image gone from the node: `opensandbox.pools`.
    Image,
}

impl Fault {
    /// The check that sees it.
    fn check(self) -> &'static str {
        match self {
            Self::Cordon => "nodes.ready",
            Self::Image => "opensandbox.pools",
        }
    }

    /// What it is, broken or repaired.
    fn what(self, broken: bool) -> &'static str {
        match (self, broken) {
            (Self::Cordon, true) => "node cordoned",
            (Self::Cordon, false) => "node uncordoned",
            (Self::Image, true) => "pool's image gone",
            (Self::Image, false) => "pool's image back",
        }
    }

    /// Break (or repair) the platform, and return once the fault is (or is no longer) in
    /// effect: the node's state patched; the image removed (or put back) and the pool's pod
    /// replaced, until the Pool counts none (or one) available.
    async fn set(self, client: &kube::Client, node: &NodePlane, broken: bool) {
        match self {
            Self::Cordon => {
                cordon(client, node, broken).await.unwrap();
            }
            Self::Image => {
                hold_pool_image(node, !broken);
                let pods = Api::<Pod>::namespaced(client.clone(), "nd-sbx");
                let lp = ListParams::default().labels("sandbox.opensandbox.io/pool-name=vm");
                pods.delete_collection(&DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() }, &lp)
                    .await
                    .unwrap();
                if broken {
                    // In effect: the Pool counts none available, and its new pod cannot pull.
                    let deadline = Instant::now() + Duration::from_secs(60);
                    while available(client).await != Some(0) || !pulls_nothing(&pods, &lp).await {
                        assert!(Instant::now() < deadline, "the Pool's new pod never failed to pull its image");
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                } else {
                    ready_pod(client, "vm").await;
                }
            }
        }
    }
}

/// Whether a pod `lp` selects waits on its image (`ErrImagePull`, `ImagePullBackOff`).
async fn pulls_nothing(pods: &Api<Pod>, lp: &ListParams) -> bool {
    let Ok(list) = pods.list(lp).await else { return false };
    list.items.iter().any(|p| {
        p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).is_some_and(|cs| {
            cs.iter().any(|c| {
                c.state
                    .as_ref()
                    .and_then(|s| s.waiting.as_ref())
                    .and_then(|w| w.reason.as_deref())
                    .is_some_and(|r| matches!(r, "ErrImagePull" | "ImagePullBackOff"))
            })
        })
    })
}

/// The Pool `vm`'s `status.available`.
async fn available(client: &kube::Client) -> Option<i64> {
    let object = json!({"apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": "Pool",
                        "metadata": {"name": "vm", "namespace": "nd-sbx"}});
    let (api, name) = crate::cluster::api_for(client, &object).await;
    api.get(&name).await.ok().and_then(|p| p.data["status"]["available"].as_i64())
}

/// `ctr -n k8s.io ARGS` on the node.
fn ctr(node: &NodePlane, args: &[&str]) -> std::process::Output {
    std::process::Command::new(std::path::PathBuf::from(node.var("NODE_BIN")).join("ctr"))
        .args(["--address", node.var("CONTAINERD_SOCKET"), "-n", "k8s.io"])
        .args(args)
        .output()
        .unwrap()
}

/// Whether the node's containerd holds [`POOL_IMAGE`] (the probe image, tagged).
fn hold_pool_image(node: &NodePlane, held: bool) {
    let out = if held {
        ctr(node, &["images", "tag", "--force", node.var("PROBE_IMAGE"), POOL_IMAGE])
    } else {
        ctr(node, &["images", "rm", POOL_IMAGE])
    };
    assert!(out.status.success(), "ctr: {}", String::from_utf8_lossy(&out.stderr));
}

/// Uncordons the node when dropped (an assertion that fails must not leave the shared node
/// unschedulable for the tests after it).
struct Uncordon(&'static NodePlane);

impl Drop for Uncordon {
    fn drop(&mut self) {
        let node = self.0;
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let client = node.client().await;
                let _ = cordon(&client, node, false).await;
            });
        })
        .join();
    }
}

async fn cordon(client: &kube::Client, node: &NodePlane, on: bool) -> kube::Result<Node> {
    let patch = json!({"spec": {"unschedulable": on}});
    Api::<Node>::all(client.clone()).patch(node.var("NODE_NAME"), &PatchParams::default(), &Patch::Merge(&patch)).await
}

/// One GET of the serving pod's `/metrics` (`None`: no pod address yet, or no answer).
async fn metrics(client: &kube::Client) -> Option<String> {
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let selector = ListParams::default().labels("app.kubernetes.io/component=acceptance-serve");
    let ip = pods.list(&selector).await.ok()?.items.into_iter().find_map(|p| p.status?.pod_ip)?;
    reqwest::get(format!("http://{ip}:9464/metrics")).await.ok()?.text().await.ok()
}

/// `osbx status -o json`'s `acceptance`, as the admin.
async fn status(node: &NodePlane, profile: &std::path::Path) -> Value {
    let mut cmd = crate::support::osbx();
    cmd.args(["status", "-o", "json", "--profile"]).arg(profile).arg("--kubeconfig").arg(&node.kubeconfig);
    let out = crate::support::output_off_runtime(cmd).await;
    serde_json::from_slice::<Value>(&out.stdout).map_or(Value::Null, |v| v["acceptance"].clone())
}

/// The newest `AcceptanceCheckFailed` Event for `fault`'s check saying why (its last time, in
/// seconds): the node cordoned; the pool with none available.
async fn newest_event(client: &kube::Client, fault: Fault) -> Option<i64> {
    let events = Api::<Event>::namespaced(client.clone(), NS).list(&ListParams::default()).await.ok()?;
    let says = |m: &str| match fault {
        Fault::Cordon => m.starts_with("nodes.ready FAIL: ") && m.contains("cordoned"),
        Fault::Image => m.starts_with("opensandbox.pools FAIL: ") && m.contains("vm"),
    };
    events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("AcceptanceCheckFailed"))
        .filter(|e| e.message.as_deref().is_some_and(says))
        .filter_map(|e| e.last_timestamp.as_ref().map(|t| t.0.as_second()))
        .max()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stderr, clippy::too_many_lines)]
async fn a_regression_with_the_platform_unchanged_shows_and_clears_within_two_intervals() {
    let _turn = turns::take(Need::Node).await;
    let node = NodePlane::get();
    let client = node.client().await;
    let image = osbx_image(node);
    runc_class_on_a_kata_node(&client, node.var("NODE_NAME")).await;
    hold_pool_image(node, true);
    let profile = profile()
        .pool("vm", "kata", [1, 1, 1, 1])
        .pool_set("vm", "runtimeClassName", "runc")
        .pool_set("vm", "image", POOL_IMAGE)
        .acceptance(json!({
        "image": image, "namespace": NS, "name": "acc", "probeNamespace": PROBES,
        "interval": format!("{}s", INTERVAL.as_secs()), "deepInterval": null,
        "only": ["nodes.ready", "kata.runtimeclass", "opensandbox.pools"]}));
    crate::cluster::install_crds(&client, "opensandbox").await;
    apply_pools(&client, &profile, 1).await;
    ready_pod(&client, "vm").await;
    let (objects, revision) = rendered(&profile);
    apply_layer(&client, node, &objects, NS).await;
    let (end, reason) = job_end(&client, NS, Duration::from_secs(240)).await;
    assert_eq!(end, "Complete", "{reason}: {}", logs(&client, NS).await);
    let serve = objects.iter().find(|o| o["kind"] == "Deployment").unwrap().clone();
    let (api, name) = crate::cluster::api_for(&client, &serve).await;
    let serve = on_this_node(node, serve);
    api.patch(&name, &PatchParams::apply("osbx-node-test").force(), &Patch::Apply(&serve)).await.unwrap();
    // The serving pod has run the checks itself once (the Job's report counts as one run).
    let deadline = Instant::now() + Duration::from_secs(120);
    while !metrics(&client).await.is_some_and(|t| t.contains("osbx_acceptance_runs_total{result=\"ready\"} 2")) {
        assert!(Instant::now() < deadline, "the serving pod never ran: {}", logs(&client, NS).await);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let dir = tempfile::tempdir().unwrap();
    let path = profile.write_to(dir.path());
    let _uncordon = Uncordon(node);
    let mut measured = Vec::new();
    for (fault, broken) in [(Fault::Cordon, true), (Fault::Cordon, false), (Fault::Image, true), (Fault::Image, false)]
    {
        let what = fault.what(broken);
        let since = Timestamp::now().as_second();
        fault.set(&client, node, broken).await;
        let changed = Instant::now();
        let (state, verdict) = if broken { ("fail", "FAIL") } else { ("pass", "PASS") };
        let line = format!("osbx_acceptance_check{{check=\"{}\",pool=\"\",state=\"{state}\"}} 1", fault.check());
        // When each place said so: the metrics, the report, an Event (a new one while it fails;
        // none newer than the first passing run once repaired), `osbx status`.
        let mut seen: [Option<Duration>; 4] = [None; 4];
        let mut passed_at = None;
        while seen.iter().any(Option::is_none) {
            assert!(
                changed.elapsed() < 2 * INTERVAL + Duration::from_secs(30),
                "the {what}: not everywhere yet (metrics, report, Event, status: {seen:?}): {}",
                logs(&client, NS).await
            );
            if seen[0].is_none() && metrics(&client).await.is_some_and(|t| t.lines().any(|l| l == line)) {
                seen[0] = Some(changed.elapsed());
            }
            if seen[1].is_none() {
                let r = report(&client, NS).await;
                let started = r["started"].as_str().and_then(|t| t.parse::<Timestamp>().ok()).map(Timestamp::as_second);
                if r["writer"]["kind"] == "Pod"
                    && r["revision"] == revision.as_str()
                    && outcome(&r, fault.check()) == verdict
                {
                    assert_eq!(r["ready"].as_bool(), Some(!broken), "{r:#}");
                    seen[1] = Some(changed.elapsed());
                    passed_at = started;
                }
            }
            if seen[2].is_none() {
                let newest = newest_event(&client, fault).await;
                let said = if broken {
                    newest.is_some_and(|t| t >= since)
                } else {
                    passed_at.is_some_and(|p| newest.is_none_or(|t| t < p))
                };
                if said {
                    seen[2] = Some(changed.elapsed());
                }
            }
            if seen[3].is_none() {
                let a = status(node, &path).await;
                if a["current"] == true && a["ready"] == !broken && a["revision"] == revision.as_str() {
                    seen[3] = Some(changed.elapsed());
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let [metrics, report, event, status] = seen.map(|d| d.unwrap_or_default().as_secs_f64());
        eprintln!(
            "node-bench: the {what}: the metrics said so after {metrics:.1}s, the report {report:.1}s, an Event {event:.1}s, osbx status {status:.1}s (interval {}s)",
            INTERVAL.as_secs()
        );
        measured.push((what, metrics.max(report).max(event).max(status)));
    }
    for (what, took) in measured {
        assert!(
            took <= 2.0 * INTERVAL.as_secs_f64(),
            "the {what}: seen everywhere only after {took:.1}s, more than two intervals"
        );
    }
    delete_pools(&client, &["vm"]).await;
    hold_pool_image(node, false);
    for ns in [NS, PROBES] {
        let _ = Api::<Namespace>::all(client.clone()).delete(ns, &DeleteParams::default()).await;
    }
}
