//! Parts of the platform that no package registry serves, played by test code.
//!
//! Every binary the tests run comes from a package registry or is our own code. A part that no
//! registry has is played here, bound to recorded facts (`../shared/reference/`), and does what
//! those facts say and no more; each module says where its facts come from and what it cannot
//! show. The same code runs in two hosts: inside the integration tests (`tests/it`, as tasks on
//! the test's runtime, with behaviours a test can change while it runs) and as the process
//! `osbx-played` (`tests/played/main.rs`, built by `tests/cluster/build played` and started by
//! `tests/cluster/up --with-controllers` for the end-to-end loop and the by-hand loop).

// The Kata shim is played inside the tests only (the stand-in kubelet hands it Kata pods).
#[cfg_attr(not(test), allow(dead_code))]
pub mod kata;
pub mod opensandbox;

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// A client for the cluster of `kubeconfig`.
///
/// # Errors
/// An unreadable or invalid kubeconfig.
pub async fn client(kubeconfig: &Path) -> Result<Client, String> {
    let kc = Kubeconfig::read_from(kubeconfig).map_err(|e| format!("{}: {e}", kubeconfig.display()))?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("{}: {e}", kubeconfig.display()))?;
    Client::try_from(config).map_err(|e| e.to_string())
}
