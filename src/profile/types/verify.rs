//! The `verify` section: probe images, host paths and the SPIFFE smoke identity.

use serde::{Deserialize, Serialize};

/// `osbx verify` settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Verify {
    /// Image of in-sandbox probes (needs `sh`, `uname`, `grep`, `awk`).
    #[serde(default = "default_probe_image")]
    pub probe_image: String,
    /// Image of host probes (needs `python3`; runs privileged on the node).
    #[serde(default = "default_host_probe_image")]
    pub host_probe_image: String,
    /// `activeDeadlineSeconds` of every probe pod.
    #[serde(default = "default_probe_deadline")]
    pub probe_deadline_seconds: i64,
    /// Where the node's containerd keeps task bundles (`<dir>/<containerID>/config.json`).
    #[serde(default = "default_task_dir")]
    pub containerd_task_dir: String,
    /// The Kata runtime-rs sandbox directory (`<dir>/<sandboxID>/ch-api.sock`).
    #[serde(default = "default_kata_run_dir")]
    pub kata_run_dir: String,
    /// The SPIFFE smoke identity; without it the SPIFFE checks are skipped.
    #[serde(default)]
    pub spiffe: Option<SpiffeSmoke>,
}

impl Default for Verify {
    fn default() -> Self {
        Self {
            probe_image: default_probe_image(),
            host_probe_image: default_host_probe_image(),
            probe_deadline_seconds: default_probe_deadline(),
            containerd_task_dir: default_task_dir(),
            kata_run_dir: default_kata_run_dir(),
            spiffe: None,
        }
    }
}

fn default_probe_image() -> String {
    "busybox:1.37".into()
}
fn default_host_probe_image() -> String {
    "python:3.13-alpine".into()
}
fn default_probe_deadline() -> i64 {
    180
}
fn default_task_dir() -> String {
    "/run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io".into()
}
fn default_kata_run_dir() -> String {
    "/run/kata".into()
}

/// The SPIFFE identity a smoke ServiceAccount must get, and a wrong one must not.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpiffeSmoke {
    /// Namespace of the smoke ServiceAccount (probe pods run there).
    pub namespace: String,
    /// The smoke ServiceAccount.
    pub service_account: String,
    /// The SPIFFE ID it must get exactly.
    pub id: String,
    /// Image with the `spire-agent` binary at `/opt/spire/bin/spire-agent`.
    #[serde(default = "default_spire_image")]
    pub image: String,
    /// CSI driver that exposes the Workload API socket.
    #[serde(default = "default_csi_driver")]
    pub csi_driver: String,
    /// Socket file name inside the CSI volume.
    #[serde(default = "default_socket_name")]
    pub socket: String,
    /// The ClusterSPIFFEID that gives the smoke identity (read to explain a missing identity).
    #[serde(default)]
    pub cluster_spiffe_id: Option<String>,
    /// How long the positive probe retries (the agent syncs entries every 5 s).
    #[serde(default = "default_spiffe_retry")]
    pub retry_seconds: u64,
}

fn default_spire_image() -> String {
    "ghcr.io/spiffe/spire-agent:1.15.3".into()
}
fn default_csi_driver() -> String {
    "csi.spiffe.io".into()
}
fn default_socket_name() -> String {
    "spire-agent.sock".into()
}
fn default_spiffe_retry() -> u64 {
    90
}

/// Profile metadata.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metadata {
    /// Profile name (shown by `osbx profiles`).
    pub name: String,
    /// One-line description.
    #[serde(default)]
    pub description: Option<String>,
}

/// The cluster the profile renders for.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cluster {
    /// Cluster name: the tree goes to `clusters/<name>/`.
    pub name: String,
    /// Namespace of the Flux controllers and of every layer Kustomization.
    #[serde(default = "default_flux_namespace")]
    pub flux_namespace: String,
    /// Name of the root `GitRepository` that Flux syncs this repository from.
    #[serde(default = "default_flux_namespace")]
    pub source_ref: String,
}

fn default_flux_namespace() -> String {
    "flux-system".into()
}
