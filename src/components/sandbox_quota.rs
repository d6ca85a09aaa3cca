//! The `sandbox-quota` component: a ResourceQuota and a LimitRange in the OpenSandbox sandbox
//! namespace, from the `sandboxQuota` section. The API server enforces them itself (its
//! ResourceQuota and LimitRanger admission, with the quota controller of kube-controller-manager
//! keeping the usage): no pod beyond the quota is admitted, whoever creates it (the controller
//! filling a pool, the server creating a sandbox), and a container that sets no requests or
//! limits gets the section's defaults.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tera::Context;

use super::{Component, Sections, Site};
use crate::spec::Violations;
use crate::spec::values::{Quantity, Resources};

/// The table entry of this component.
pub(crate) static COMPONENT: Component = Component::without_chart(
    "sandbox-quota",
    "a ResourceQuota and a LimitRange capping what sandboxes may take in the sandbox namespace",
    "sandboxQuota",
    validate,
    view,
);

/// What the sandboxes may take together, and what a container takes when it says nothing.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("required" = ["hard"]))]
pub struct SandboxQuota {
    /// Name of the ResourceQuota and of the LimitRange.
    pub name: String,
    /// The ResourceQuota's hard limits, by the resource names Kubernetes uses: `pods`,
    /// `requests.cpu`, `requests.memory`, `limits.cpu`, `limits.memory`,
    /// `count/batchsandboxes.sandbox.opensandbox.io`, ….
    pub hard: BTreeMap<String, Quantity>,
    /// Requests and limits of containers that set none (the LimitRange's `defaultRequest` and
    /// `default`): with a quota on `requests.*` or `limits.*`, a pod whose containers set
    /// neither is refused.
    pub container_defaults: Option<Resources>,
}

impl Default for SandboxQuota {
    fn default() -> Self {
        Self { name: "sandbox-quota".into(), hard: BTreeMap::new(), container_defaults: None }
    }
}

/// The resource names a quota on compute resources uses; a pod whose containers leave these
/// unset is refused once the quota names them.
const COMPUTE: &[&str] = &["cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"];

fn validate(s: &Sections, site: &Site<'_>, v: &mut Violations) {
    let Some(q) = &s.sandbox_quota else {
        if let Some((i, _)) = site.layer_of(&COMPONENT) {
            v.push(format!("layers[{i}].component"), "a sandbox-quota layer needs a top-level `sandboxQuota` section");
        }
        return;
    };
    v.dns_subdomain("sandboxQuota.name", &q.name);
    if q.hard.is_empty() {
        v.push("sandboxQuota.hard", "name at least one limit (e.g. pods: 50, requests.cpu: \"20\")");
    }
    for key in q.hard.keys() {
        if key.is_empty() || key.contains(char::is_whitespace) || key.starts_with('/') || key.ends_with('/') {
            v.push(format!("sandboxQuota.hard.{key}"), format!("{key:?} is not a Kubernetes resource name"));
        }
    }
    let compute: Vec<&str> = q.hard.keys().map(String::as_str).filter(|k| COMPUTE.contains(k)).collect();
    let defaulted = q.container_defaults.as_ref().is_some_and(|d| !d.requests.is_empty() || !d.limits.is_empty());
    if !compute.is_empty() && !defaulted && s.pools.defaults.resources.is_none() {
        v.push(
            "sandboxQuota.containerDefaults",
            format!(
                "the quota names {} but neither containerDefaults nor pools.defaults.resources sets them: every sandbox pod would be refused",
                compute.join(", ")
            ),
        );
    }
}

/// `sandboxQuota`: the section, with the namespace it applies to.
fn view(s: &Sections, _: &Site<'_>, ctx: &mut Context) {
    if let Some(q) = &s.sandbox_quota {
        let mut v = serde_json::to_value(q).unwrap_or_default();
        v["namespace"] = json!(s.opensandbox.namespaces.sandbox);
        ctx.insert("sandboxQuota", &v);
    }
}
