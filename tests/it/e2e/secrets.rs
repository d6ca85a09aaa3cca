//! Secrets in git, Flux alone: the API key sealed with `osbx secret set` (SOPS, age) and pushed;
//! the real kustomize-controller decrypts it with the age key Secret the operator created, the
//! HelmRelease becomes Ready, and the real OpenSandbox server, started with the key the Secret
//! holds (as the chart's pod reads it), accepts that key and refuses another. A new value
//! committed and pushed reaches the Secret through Flux alone, the render's
//! `osbx.io/api-key-revision` pod annotation rolls the server's Deployment (the chart reads the
//! key from the Secret only at start and has no checksum of its own), and the restarted server
//! accepts the new key and refuses the old one. No `OSBX_API_KEY` is set anywhere in the test,
//! and neither key nor the age identity appears in any osbx output, controller log or file of
//! the Flux repository.
//!
//! What the plane cannot show: kwok runs no container, so "the server restarts with the new key"
//! is the Deployment's pod template changing (a rollout) plus the test starting the real server
//! again with what the Secret then holds, as the new pod would read it.

use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use super::world::World;
use super::{bench, flux};
use crate::cluster::wait_for;
use crate::support::outputs;

const FLUX_APPLIES: Duration = Duration::from_secs(240);
const FIRST: &str = "sops-e2e-first-7c1d9a4b";
const SECOND: &str = "sops-e2e-second-52e80f3a";

/// The age identity of the cluster (and the test, which plays the operator holding it).
struct AgeKey {
    file: std::path::PathBuf,
    text: String,
    secret: String,
    recipient: String,
}

impl AgeKey {
    fn new(dir: &std::path::Path) -> Self {
        use age::secrecy::ExposeSecret as _;
        let id = age::x25519::Identity::generate();
        let recipient = id.to_public().to_string();
        let secret = id.to_string().expose_secret().to_owned();
        let text = format!("# created by the e2e test\n# public key: {recipient}\n{secret}\n");
        let file = dir.join("cluster.agekey");
        std::fs::write(&file, &text).unwrap();
        Self { file, text, secret, recipient }
    }
}

/// What every osbx run of the scenario printed, for the final search.
#[derive(Default)]
struct Printed(Vec<String>);

impl Printed {
    fn keep(&mut self, out: &std::process::Output) -> (String, String) {
        let (stdout, stderr) = outputs(out);
        self.0.push(format!("{stdout}{stderr}"));
        (stdout, stderr)
    }
}

async fn secret_value(world: &World, ns: &str) -> Option<(String, Vec<String>)> {
    let s = Api::<Secret>::namespaced(world.client.clone(), ns).get_opt("opensandbox-api-key").await.ok()??;
    let value = String::from_utf8(s.data.as_ref()?.get("api-key")?.0.clone()).ok()?;
    let managers = s.metadata.managed_fields.iter().flatten().filter_map(|m| m.manager.clone()).collect();
    Some((value, managers))
}

async fn revision(world: &World, ns: &str) -> Option<String> {
    let d = Api::<Deployment>::namespaced(world.client.clone(), ns).get_opt("opensandbox-server").await.ok()??;
    d.spec?.template.metadata?.annotations?.get("osbx.io/api-key-revision").cloned()
}

/// `osbx secret set opensandbox-api-key --commit` with `value` on stdin.
async fn set(world: &World, dir: &str, value: &str) -> std::process::Output {
    let args = ["secret", "set", "opensandbox-api-key", "--out", dir, "--commit"];
    world.osbx_with(&args, &[], Some(format!("{value}\n").as_bytes())).await.0
}

/// GET /v1/sandboxes with `key`: the status.
async fn status_with(url: &str, key: &str) -> u16 {
    reqwest::Client::new()
        .get(format!("{url}/v1/sandboxes"))
        .header("OPEN-SANDBOX-API-KEY", key)
        .send()
        .await
        .expect("the real server answers")
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)]
async fn flux_alone_decrypts_the_sealed_api_key_and_a_rotation_through_git_reaches_the_server() {
    const S: &str = "sops";
    let keydir = tempfile::tempdir().unwrap();
    let age = AgeKey::new(keydir.path());
    let recipient = age.recipient.clone();
    let mut world = World::scenario(S).profile(|p| p["secrets"] = json!({"sops": {"age": [recipient]}})).start().await;
    let layout = world.layout();
    let cp = layout.control_plane.clone();
    let flux_dir = world.flux.dir.display().to_string();
    let mut printed = Printed::default();

    // The operator's one step outside git: the cluster's age key, as Flux's guide has it.
    let decryption = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "sops-age", "namespace": layout.flux},
        "stringData": {"age.agekey": age.text}});
    Api::<Secret>::namespaced(world.client.clone(), &layout.flux)
        .create(&PostParams::default(), &serde_json::from_value(decryption).unwrap())
        .await
        .expect("create the decryption Secret");

    // The value, sealed and committed; Flux alone takes it from there.
    let out = set(&world, &flux_dir, FIRST).await;
    let (stdout, stderr) = printed.keep(&out);
    assert_eq!(out.status.code(), Some(0), "osbx secret set: {stdout}{stderr}");
    let sealed_path = world.flux.dir.join("platform/opensandbox/opensandbox-api-key.sops.yaml");
    let sealed = std::fs::read_to_string(&sealed_path).expect("the sealed file");
    assert!(sealed.contains("ENC[AES256_GCM,") && sealed.contains(&age.recipient), "{sealed}");
    assert_eq!(world.flux.dirty(), "", "secret set --commit left changes behind");
    let commit = world.flux.push();
    let asked = Instant::now();
    world.request_reconcile().await;
    flux::wait_applied(&world.client, &layout, "opensandbox", &commit, FLUX_APPLIES).await;
    flux::wait_applied(&world.client, &layout, "opensandbox-pools", &commit, FLUX_APPLIES).await;
    bench(S, "flux_ready_after_push", asked.elapsed().as_secs_f64());
    flux::assert_layers_ready(&world.client, &layout, "after Flux applied the sealed key").await;

    // kustomize-controller decrypted it (it, not osbx, wrote the Secret).
    let (value, managers) = secret_value(&world, &cp).await.expect("the API key Secret");
    assert_eq!(value, FIRST);
    assert!(managers.iter().any(|m| m == "kustomize-controller"), "managers: {managers:?}");
    let first_revision = revision(&world, &cp).await.expect("the server's pod template carries the key's revision");

    // The real server with the key the Secret holds: that key in, another out.
    let url = world.start_server_with_key(&value).await;
    assert_eq!(status_with(&url, FIRST).await, 200);
    assert_eq!(status_with(&url, "not-the-key").await, 401);

    // Rotation through git.
    let out = set(&world, &flux_dir, SECOND).await;
    let (stdout, stderr) = printed.keep(&out);
    assert_eq!(out.status.code(), Some(0), "osbx secret set (rotation): {stdout}{stderr}");
    let commit = world.flux.push();
    let asked = Instant::now();
    world.request_reconcile().await;
    flux::wait_applied(&world.client, &layout, "opensandbox", &commit, FLUX_APPLIES).await;
    let rolled = wait_for("the server's pod template at the new key's revision", FLUX_APPLIES, || {
        let (world, cp, first) = (&world, cp.clone(), first_revision.clone());
        async move { revision(world, &cp).await.filter(|r| *r != first) }
    })
    .await;
    bench(S, "rotation_rolled_after_push", asked.elapsed().as_secs_f64());
    assert_ne!(rolled, first_revision);
    let (value, _) = secret_value(&world, &cp).await.expect("the API key Secret");
    assert_eq!(value, SECOND, "Flux did not apply the new value");
    world.server = None;
    let url = world.start_server_with_key(&value).await;
    assert_eq!(status_with(&url, SECOND).await, 200);
    assert_eq!(status_with(&url, FIRST).await, 401, "the old key still works after the rotation");

    // osbx keeps working on a cluster whose Secrets live in git: apply decrypts the sealed file
    // as Flux does (and leaves the existing decryption Secret alone), diff sees nothing to do,
    // verify reads the key from the cluster's Secret.
    let key_file = age.file.display().to_string();
    let out = world
        .osbx_with(&["apply", "--repo", &flux_dir, "--age-key-file", &key_file, "--timeout", "3m"], &[], None)
        .await
        .0;
    let (stdout, stderr) = printed.keep(&out);
    assert_eq!(out.status.code(), Some(0), "osbx apply: {stdout}{stderr}");
    assert!(!stderr.contains("does not exist: creating it"), "apply replaced the decryption Secret: {stderr}");
    let out = world.osbx_with(&["diff", "--repo", &flux_dir, "--age-key-file", &key_file], &[], None).await.0;
    let (stdout, stderr) = printed.keep(&out);
    assert_eq!(out.status.code(), Some(0), "osbx diff after Flux and apply: {stdout}{stderr}");
    let out = world
        .osbx_with(&["verify", "--only", "opensandbox.server,opensandbox.lifecycle", "--server-url", &url], &[], None)
        .await
        .0;
    let (stdout, stderr) = printed.keep(&out);
    assert_eq!(out.status.code(), Some(0), "osbx verify with the key from the Secret: {stdout}{stderr}");

    // Neither key nor the identity anywhere but in the sealed file.
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let needles = [FIRST.to_owned(), SECOND.to_owned(), b64(FIRST), b64(SECOND), age.secret.clone()];
    let mut leaks = Vec::new();
    for (i, text) in printed.0.iter().enumerate() {
        leaks.extend(
            needles.iter().filter(|n| text.contains(n.as_str())).map(|n| format!("osbx run {i} printed {}…", &n[..6])),
        );
    }
    for entry in std::fs::read_dir(world.plane.dir()).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "log") {
            let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
            leaks.extend(
                needles
                    .iter()
                    .filter(|n| text.contains(n.as_str()))
                    .map(|n| format!("{} holds {}…", path.display(), &n[..6])),
            );
        }
    }
    for (path, text) in crate::support::tree(&world.flux.dir) {
        leaks.extend(
            needles
                .iter()
                .filter(|n| text.contains(n.as_str()))
                .map(|n| format!("flux repo {path} holds {}…", &n[..6])),
        );
    }
    assert!(leaks.is_empty(), "a secret leaked:\n{}", leaks.join("\n"));
    bench(S, "total", world.seconds());
}
