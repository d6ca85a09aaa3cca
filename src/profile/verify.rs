//! The `verify` section: probe images, host paths and the SPIFFE smoke identity.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::components::spire::smoke::SpireSmoke;

/// `osbx verify` settings.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Verify {
    /// Image of in-sandbox probes (needs `sh`, `uname`, `grep`, `awk`).
    pub probe_image: String,
    /// Image of host probes (needs `python3`; runs privileged on the node).
    pub host_probe_image: String,
    /// `activeDeadlineSeconds` of every probe pod.
    pub probe_deadline_seconds: i64,
    /// Where the node's containerd keeps task bundles (`<dir>/<containerID>/config.json`).
    pub containerd_task_dir: String,
    /// The directory of the Kata sandboxes' sockets (`<dir>/<sandboxID>/<API socket>`); default:
    /// the shim's (`/run/vc/vm` for the Go runtime, `/run/kata` for runtime-rs).
    pub kata_run_dir: Option<String>,
    /// The Kata shim behind the Kata pools' RuntimeClass (`clh`, `qemu-runtime-rs`, …), when
    /// the class is not named `kata-<shim>` as kata-deploy names it.
    pub kata_shim: Option<String>,
    /// The SPIFFE smoke identity; without it (and without a `spire` section) the SPIFFE checks
    /// are skipped.
    pub spiffe: Option<SpiffeSmoke>,
    /// The build pools' workload probe: dockerd, a BuildKit build and kind's preconditions in a
    /// pod of the pool's class (`workload.docker.<pool>`, `workload.kind.<pool>`).
    pub workload: Workload,
}

/// How `osbx verify` proves a build pool can build: its probe image, an optional limit on the
/// build, and kind's node image.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Workload {
    /// Image of the workload probe: needs `sh`, `dockerd` and a `docker` CLI that builds with
    /// BuildKit (`DOCKER_BUILDKIT=1`, Docker 20.10 or later), and `kind` when `kindNodeImage` is
    /// set. It runs privileged under the build pool's RuntimeClass.
    pub docker_image: String,
    /// Fail `workload.docker.<pool>` when the probe's build takes longer than this (seconds).
    pub build_limit_seconds: Option<u64>,
    /// kind's node image (e.g. `kindest/node:v1.35.0`): with it, `workload.kind.<pool>` also runs
    /// `kind create cluster` and deletes it (the node image must be pullable from the pod, or
    /// preloaded); without it, only kind's preconditions are checked.
    pub kind_node_image: Option<String>,
}

impl Default for Workload {
    fn default() -> Self {
        Self { docker_image: "docker:27-dind".into(), build_limit_seconds: None, kind_node_image: None }
    }
}

impl Default for Verify {
    fn default() -> Self {
        Self {
            probe_image: "busybox:1.37".into(),
            host_probe_image: "python:3.13-alpine".into(),
            probe_deadline_seconds: 180,
            containerd_task_dir: "/run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io".into(),
            kata_run_dir: None,
            kata_shim: None,
            spiffe: None,
            workload: Workload::default(),
        }
    }
}

/// The SPIFFE identity a smoke ServiceAccount must get, and a wrong one must not.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("required" = ["id"]))]
pub struct SpiffeSmoke {
    /// Namespace of the smoke ServiceAccount (probe pods run there).
    pub namespace: String,
    /// The smoke ServiceAccount.
    pub service_account: String,
    /// The SPIFFE ID it must get exactly.
    pub id: String,
    /// Image with the `spire-agent` binary at `/opt/spire/bin/spire-agent`.
    pub image: String,
    /// CSI driver that exposes the Workload API socket (what the hardened SPIRE chart deploys).
    pub csi_driver: String,
    /// Instead of the CSI volume, mount this directory of the node (where the agent puts its
    /// socket, e.g. `/run/spire/agent-sockets`): clusters without the SPIFFE CSI driver give
    /// workloads the socket this way.
    pub socket_host_path: Option<String>,
    /// Socket file name inside the CSI volume.
    pub socket: String,
    /// The ClusterSPIFFEID that gives the smoke identity (read to explain a missing identity).
    pub cluster_spiffe_id: Option<String>,
    /// How long the positive probe retries (the agent syncs entries every 5 s).
    pub retry_seconds: u64,
}

impl Default for SpiffeSmoke {
    fn default() -> Self {
        let fixture = SpireSmoke::default();
        Self {
            namespace: fixture.namespace,
            service_account: fixture.service_account,
            id: String::new(),
            image: "ghcr.io/spiffe/spire-agent:1.15.3".into(),
            csi_driver: "csi.spiffe.io".into(),
            socket_host_path: None,
            socket: "spire-agent.sock".into(),
            cluster_spiffe_id: None,
            retry_seconds: 90,
        }
    }
}

impl Verify {
    /// Every probe image onto the mirror (`images.mirror`).
    pub(super) fn mirror(&mut self, images: &crate::spec::Images, v: &mut crate::spec::Violations) {
        images.rewrite(&mut self.probe_image, "verify.probeImage", v);
        images.rewrite(&mut self.host_probe_image, "verify.hostProbeImage", v);
        images.rewrite(&mut self.workload.docker_image, "verify.workload.dockerImage", v);
        if let Some(image) = &mut self.workload.kind_node_image {
            images.rewrite(image, "verify.workload.kindNodeImage", v);
        }
        if let Some(spiffe) = &mut self.spiffe {
            images.rewrite(&mut spiffe.image, "verify.spiffe.image", v);
        }
    }
}
