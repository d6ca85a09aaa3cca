//! Profiles and fleets for tests, built field by field instead of formatted YAML text.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// A profile document under construction.
#[derive(Debug, Clone)]
pub struct TestProfile {
    doc: Value,
}

impl TestProfile {
    /// The two-layer profile (opensandbox, then pools) the cluster tests use, with every
    /// namespace named after `p` (`<p>-flux`, `<p>-system`, `<p>-sbx`) so tests can share a
    /// plane, and no pools yet.
    pub fn new(p: &str) -> Self {
        let doc = json!({
            "apiVersion": "osbx.dev/v1alpha1",
            "kind": "Profile",
            "metadata": {"name": p},
            "cluster": {"name": p, "fluxNamespace": format!("{p}-flux")},
            "layers": [
                {"name": "opensandbox", "component": "opensandbox"},
                {"name": "opensandbox-pools", "component": "pools", "dependsOn": ["opensandbox"]},
            ],
            "opensandbox": {
                "namespaces": {"controlPlane": format!("{p}-system"), "sandbox": format!("{p}-sbx")},
                "source": {"url": "https://github.com/opensandbox-group/OpenSandbox.git", "ref": {"tag": "helm/opensandbox/0.2.2"}},
                "release": {"install": {"strategy": "RetryOnFailure", "retryInterval": "5m"}},
                "server": {
                    "apiKey": {"secretRef": {"name": "api-key"}},
                    "config": {"runtime": {"execdImage": "example.com/execd:v1.0.22"}},
                },
            },
            "pools": {"defaults": {"image": "example.com/sandbox:v1", "command": ["sleep", "infinity"]}, "items": []},
        });
        Self { doc }
    }

    /// Add a pool: `[bufferMin, bufferMax, poolMin, poolMax]`.
    #[must_use]
    pub fn pool(mut self, name: &str, runtime: &str, [buffer_min, buffer_max, pool_min, pool_max]: [i64; 4]) -> Self {
        let capacity =
            json!({"bufferMin": buffer_min, "bufferMax": buffer_max, "poolMin": pool_min, "poolMax": pool_max});
        if let Some(items) = self.doc["pools"]["items"].as_array_mut() {
            items.push(json!({"name": name, "runtime": runtime, "capacity": capacity}));
        }
        self
    }

    /// Set `key` of the pool `pool` (added before).
    #[must_use]
    pub fn pool_set(mut self, pool: &str, key: &str, value: impl Into<Value>) -> Self {
        let items = self.doc["pools"]["items"].as_array_mut().expect("pools.items");
        let item = items.iter_mut().find(|i| i["name"] == pool).unwrap_or_else(|| panic!("no pool {pool}"));
        item[key] = value.into();
        self
    }

    /// Add an acceptance layer after the pools layer, with `section` as the `acceptance` section.
    #[must_use]
    pub fn acceptance(mut self, section: Value) -> Self {
        if let Some(layers) = self.doc["layers"].as_array_mut() {
            layers.push(json!({"name": "acceptance", "component": "acceptance", "dependsOn": ["opensandbox-pools"]}));
        }
        self.doc["acceptance"] = section;
        self
    }

    /// Set the field at a dotted path (`verify.probeDeadlineSeconds`), creating mappings on the
    /// way.
    #[must_use]
    pub fn set(mut self, path: &str, value: impl Into<Value>) -> Self {
        set(&mut self.doc, path, value.into());
        self
    }

    /// The document as YAML.
    pub fn yaml(&self) -> String {
        serde_saphyr::to_string(&self.doc).expect("a profile serializes")
    }

    /// Write it to `dir/profile.yaml`; returns the path.
    pub fn write_to(&self, dir: &Path) -> PathBuf {
        let path = dir.join("profile.yaml");
        std::fs::write(&path, self.yaml()).expect("write the profile");
        path
    }
}

/// A fleet document under construction.
#[derive(Debug, Clone)]
pub struct TestFleet {
    doc: Value,
}

impl TestFleet {
    /// A fleet named `name` over the profile `base` (embedded name or path), without clusters.
    pub fn new(name: &str, base: &str) -> Self {
        Self {
            doc: json!({"apiVersion": "osbx.dev/v1alpha1", "kind": "Fleet", "metadata": {"name": name}, "base": base, "clusters": []}),
        }
    }

    /// Add a cluster with these overrides (`Value::Null`: none).
    #[must_use]
    pub fn cluster(mut self, name: &str, overrides: Value) -> Self {
        let mut entry = json!({"name": name});
        if !overrides.is_null() {
            entry["overrides"] = overrides;
        }
        if let Some(clusters) = self.doc["clusters"].as_array_mut() {
            clusters.push(entry);
        }
        self
    }

    /// Set `rollout.waves`.
    #[must_use]
    pub fn waves(mut self, waves: &Value) -> Self {
        self.doc["rollout"] = json!({"waves": waves});
        self
    }

    /// Set `rollout.acceptNoEvidence` (after [`TestFleet::waves`]).
    #[must_use]
    pub fn accept_no_evidence(mut self, accept: bool) -> Self {
        self.doc["rollout"]["acceptNoEvidence"] = json!(accept);
        self
    }

    /// The document as YAML.
    pub fn yaml(&self) -> String {
        serde_saphyr::to_string(&self.doc).expect("a fleet serializes")
    }
}

fn set(doc: &mut Value, path: &str, value: Value) {
    let mut at = doc;
    let mut keys = path.split('.').peekable();
    while let Some(key) = keys.next() {
        if !at.is_object() {
            *at = json!({});
        }
        if keys.peek().is_none() {
            at[key] = value;
            return;
        }
        at = &mut at[key];
    }
}
