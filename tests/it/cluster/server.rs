//! The real OpenSandbox server (`tests/opensandbox/serve`: PyPI `opensandbox-server`, the version
//! the pinned chart deploys) on loopback against a plane.

use std::path::{Path, PathBuf};

use crate::support::root;

/// A running server; stopped when dropped (and by its own watchdog if the test process dies).
pub struct RealServer {
    dir: PathBuf,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
}

impl RealServer {
    /// Start a server in `dir` against the plane of `kubeconfig`, serving the sandboxes of
    /// `namespace` with the API key `key`, plus `env` (e.g. `OSBX_OPENSANDBOX_CREATE_TIMEOUT`).
    /// Blocks until it answers; call it from a blocking thread in async tests.
    pub fn start(dir: &Path, kubeconfig: &Path, namespace: &str, key: &str, env: &[(&str, &str)]) -> Self {
        let out = std::process::Command::new(root().join("tests/opensandbox/serve"))
            .args(["--watch-pid", &std::process::id().to_string()])
            .arg(dir)
            .arg(kubeconfig)
            .arg(namespace)
            .env("OPENSANDBOX_SERVER_API_KEY", key)
            .envs(env.iter().copied())
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("tests/opensandbox/serve");
        assert!(out.status.success(), "tests/opensandbox/serve failed (see stderr)");
        let url = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_owned();
        Self { dir: dir.to_path_buf(), url }
    }
}

impl Drop for RealServer {
    fn drop(&mut self) {
        crate::support::stop_in_drop(std::process::Command::new(root().join("tests/opensandbox/stop")).arg(&self.dir));
    }
}
