//! The OpenSandbox server's `config.toml`, as the chart assembles it, read by the real server:
//! PyPI `opensandbox-server` of the version the pinned chart deploys, in a venv of its own
//! (`tests/opensandbox/venv`), through `tests/opensandbox/check_config.py`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use serde_json::Value;

use super::OnceMap;
use super::manifest::Baseline;
use crate::support::{outputs, root};

/// The server version the `helm/opensandbox/0.2.2` chart deploys (image `server:v0.2.2`).
pub const SERVER_VERSION: &str = "0.2.2";

/// The ConfigMap the server subchart renders, and its key.
pub const CONFIG_MAP: &str = "opensandbox-server-config";
const CONFIG_KEY: &str = "config.toml";

/// The venv's python (`tests/opensandbox/venv 0.2.2`, run once; builds the venv only when missing).
fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let script = root().join("tests/opensandbox/venv");
        let out = Command::new(&script).arg(SERVER_VERSION).output().expect("run tests/opensandbox/venv");
        let (stdout, stderr) = outputs(&out);
        assert!(out.status.success(), "{} {SERVER_VERSION} failed:\n{stderr}", script.display());
        PathBuf::from(stdout.trim())
    })
}

/// What the real server made of a config.toml.
#[derive(Debug)]
pub struct Verdict {
    /// The loader's errors (TOML syntax, pydantic validation).
    pub errors: Vec<String>,
    /// Keys no model field accepts (`server.bogus`).
    pub unknown: Vec<String>,
    /// The loaded configuration (`AppConfig.model_dump(mode="json")`), when it loaded.
    pub config: Value,
}

/// The chart's `config.toml` in a baseline render, or why there is none.
pub fn config_toml(b: &Baseline) -> Result<&str, String> {
    let cm = b.find("ConfigMap", CONFIG_MAP).ok_or_else(|| format!("the chart renders no ConfigMap {CONFIG_MAP}"))?;
    cm["data"][CONFIG_KEY].as_str().ok_or_else(|| format!("ConfigMap {CONFIG_MAP} has no data.{CONFIG_KEY}"))
}

/// The real server's verdict on `text` (once per distinct text per test binary).
pub fn verdict(text: &str) -> Arc<Result<Verdict, String>> {
    static CACHE: OnceMap<String, Arc<Result<Verdict, String>>> = OnceMap::new();
    CACHE.get_or_init(text.to_owned(), || Arc::new(check(text)))
}

fn check(text: &str) -> Result<Verdict, String> {
    let file = tempfile::Builder::new().suffix(".toml").tempfile().map_err(|e| format!("temp file: {e}"))?;
    std::fs::write(file.path(), text).map_err(|e| format!("write {}: {e}", file.path().display()))?;
    let script = root().join("tests/opensandbox/check_config.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(file.path())
        .env_remove("OPENSANDBOX_SERVER_API_KEY")
        .env_remove("SANDBOX_CONFIG_PATH")
        .output()
        .map_err(|e| format!("run {}: {e}", script.display()))?;
    let (stdout, stderr) = outputs(&out);
    let report: Value = serde_json::from_str(stdout.trim())
        .map_err(|e| format!("{} printed no JSON ({e}); exit {}, stderr:\n{stderr}", script.display(), out.status))?;
    let strings = |v: &Value| v.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect();
    Ok(Verdict {
        errors: strings(&report["errors"]),
        unknown: strings(&report["unknown"]),
        config: report["config"].clone(),
    })
}
