//! The platform from the mirror alone. A profile with `images.mirror` (`osbx.test` onto
//! `registry.osbx.test/mirror`, every other registry under `registry.osbx.test/public`) names
//! its images on the mirror; the node's real containerd pulls them from a real registry on
//! loopback (go-containerregistry's, `crane registry serve`, holding images pushed by the real
//! `crane` from the node's own image tarballs) through its registry hosts configuration (a
//! `hosts.toml` in `CONTAINERD_HOSTS_DIR` that serves `registry.osbx.test` from
//! `http://127.0.0.1:PORT`): a runc Pool's pod (its main container and its execd installer init
//! container) and the guest-kernel probe of `osbx verify`, under names the node never imported,
//! so that nothing but the mirror could have given them. A mirror without the probe's image
//! fails the probe naming the image it could not pull.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::ContainerStatus;
use serde_json::json;

use super::sandboxes::{apply_pools, delete_pools, ready_pod, with_execd};
use super::{NodePlane, assert_check, profile, report};
use crate::review::sources::{crane, registry};
use crate::turns::{self, Need};

/// The mirror's registry name: what the profile maps onto, what containerd's hosts
/// configuration serves from the loopback registry.
const MIRROR: &str = "registry.osbx.test";

/// containerd's hosts configuration for [`MIRROR`] (plain HTTP to the registry on loopback;
/// no other host, so a pull never leaves the machine), removed on drop.
struct Hosts(PathBuf);

impl Hosts {
    fn serve(node: &NodePlane, port: u16) -> Self {
        let dir = PathBuf::from(node.var("CONTAINERD_HOSTS_DIR")).join(MIRROR);
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("http://127.0.0.1:{port}");
        std::fs::write(
            dir.join("hosts.toml"),
            format!("server = \"{url}\"\n\n[host.\"{url}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"),
        )
        .unwrap();
        Self(dir)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Best effort: a later run of up-node.sh starts with an empty hosts directory anyway.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_and_a_probe_pull_from_the_mirror_alone() {
    let _turn = turns::take(Need::Node).await;
    let node = NodePlane::get();
    let client = node.client().await;
    crate::cluster::install_crds(&client, "opensandbox").await;
    super::runtime::runc_class_on_a_kata_node(&client, node.var("NODE_NAME")).await;

    let (_registry, port) = registry();
    let _hosts = Hosts::serve(node, port);
    // The node's own images, each made an image of its own (a label in its config, so another
    // config digest: the kubelet tracks what it pulled by that digest, and an imported image
    // of the same digest would from then on count as pulled under the mirror's name only,
    // KEP-2535), under names the node never imported, on the mirror's layout.
    let tars = PathBuf::from(node.var("NODE_IMAGES"));
    let mut digests = std::collections::BTreeMap::new();
    for (tar, name) in [("busybox.tar", "sandbox:1.35"), ("busybox.tar", "probe:1.35"), ("execd.tar", "execd:played")] {
        let staged = format!("127.0.0.1:{port}/staging/{name}");
        crane(&["push", tars.join(tar).to_str().unwrap(), &staged]);
        let at = format!("127.0.0.1:{port}/mirror/{name}");
        crane(&["mutate", &staged, "--label", &format!("test.osbx.dev/mirrored={name}"), "-t", &at]);
        digests.insert(name, crane(&["digest", &at]));
    }

    let mirror = json!({"mirror": {"osbx.test": format!("{MIRROR}/mirror"), "*": format!("{MIRROR}/public")}});
    let p = with_execd(profile().pool("mirrored", "runc", [1, 1, 1, 2]), node, "mirrored")
        .pool_set("mirrored", "image", "osbx.test/sandbox:1.35")
        .pool("vm", "kata", [0, 1, 0, 1])
        .pool_set("vm", "runtimeClassName", "runc")
        .set("verify.probeImage", "osbx.test/probe:1.35")
        .set("images", mirror);

    // `osbx images` lists every image of the profile on the mirror, these among them.
    let dir = tempfile::tempdir().unwrap();
    let mut images = crate::support::osbx();
    images.args(["images", "--no-charts", "-o", "json", "-p"]).arg(p.write_to(dir.path()));
    let out = images.output().unwrap();
    let (stdout, stderr) = crate::support::outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let listed: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    assert!(listed.keys().all(|i| i.starts_with("registry.osbx.test/")), "{:?}", listed.keys());
    for image in ["mirror/sandbox:1.35", "mirror/execd:played", "mirror/probe:1.35"] {
        assert!(listed.contains_key(&format!("{MIRROR}/{image}")), "{image}: {:?}", listed.keys());
    }

    // What osbx renders names the mirror; containerd pulls it from there. Everything is read
    // before any assertion: the node is shared, the pools go first.
    apply_pools(&client, &p, 2).await;
    let pod = ready_pod(&client, "mirrored").await;
    // verify's probe, from the mirror too.
    let (_, checks, _) = node.verify(&p, "opensandbox.pools,kata.guest-kernel", &[]).await;
    // A mirror without the probe's image.
    let absent = p.clone().set("verify.probeImage", "osbx.test/absent:1.35").set("verify.probeDeadlineSeconds", 15);
    let (_, absent_checks, _) = node.verify(&absent, "kata.guest-kernel", &[]).await;
    delete_pools(&client, &["mirrored", "vm"]).await;
    // What the node's containerd holds now: the probe's image under the mirror's name only.
    let ctr = std::process::Command::new(PathBuf::from(node.var("NODE_BIN")).join("ctr"))
        .args(["--address", node.var("CONTAINERD_SOCKET"), "-n", "k8s.io", "images", "ls", "-q"])
        .output()
        .unwrap();
    let held = String::from_utf8_lossy(&ctr.stdout).into_owned();

    let (spec, status) = (pod.spec.unwrap(), pod.status.unwrap());
    assert_eq!(spec.containers[0].image.as_deref(), Some("registry.osbx.test/mirror/sandbox:1.35"));
    let init = spec.init_containers.unwrap_or_default();
    assert_eq!(init[0].image.as_deref(), Some("registry.osbx.test/mirror/execd:played"));
    // Pulled from the mirror, by the digests it holds.
    let pulled = |statuses: Option<Vec<ContainerStatus>>| {
        statuses.unwrap_or_default().into_iter().map(|c| c.image_id).collect::<Vec<_>>()
    };
    assert_eq!(
        pulled(status.container_statuses),
        [format!("registry.osbx.test/mirror/sandbox@{}", digests["sandbox:1.35"])]
    );
    assert_eq!(
        pulled(status.init_container_statuses),
        [format!("registry.osbx.test/mirror/execd@{}", digests["execd:played"])]
    );

    report(&checks);
    assert_check(&checks, "opensandbox.pools", "PASS", &["mirrored: total 1, available 1"]);
    // The probe's container ran (runc: its kernel is the host's), from the image pulled by the
    // mirror's name (the node never had it by any other).
    assert_check(&checks, "kata.guest-kernel", "FAIL", &["its kernel is the host's"]);
    assert!(held.lines().any(|l| l == "registry.osbx.test/mirror/probe:1.35"), "{held}");
    assert!(!held.lines().any(|l| l.starts_with("osbx.test/probe")), "{held}");
    // The probe names the image it could not pull.
    report(&absent_checks);
    assert_check(
        &absent_checks,
        "kata.guest-kernel",
        "FAIL",
        // Its container's waiting state (ErrImagePull, or ImagePullBackOff quoting it), whichever
        // the kubelet last wrote.
        &[
            "pod failed before its container ran",
            "failed to pull and unpack image \"registry.osbx.test/mirror/absent:1.35\"",
            "not found",
        ],
    );
}
