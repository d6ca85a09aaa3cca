//! The `spire-smoke` component: the SPIFFE smoke fixture `osbx verify` probes (a namespace, a
//! ServiceAccount, and a ClusterSPIFFEID giving that ServiceAccount, and no one else, an
//! identity), from `spire.smoke`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tera::Context;

use super::{Component, spire_agents};
use crate::profile::{Profile, Violations};

/// The table entry of this component.
pub static COMPONENT: Component = Component {
    name: "spire-smoke",
    about: "the SPIFFE smoke fixture (namespace, ServiceAccount, ClusterSPIFFEID)",
    validate,
    view,
};

/// The SPIFFE smoke fixture.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct SpireSmoke {
    /// Namespace.
    pub namespace: String,
    /// ServiceAccount.
    pub service_account: String,
    /// ClusterSPIFFEID name.
    pub name: String,
    /// Path of the identity under the trust domain.
    pub path: String,
}

impl Default for SpireSmoke {
    fn default() -> Self {
        Self {
            namespace: "spire-smoke".into(),
            service_account: "spire-smoke".into(),
            name: "sandbox-spire-smoke".into(),
            path: "/sandbox/smoke".into(),
        }
    }
}

impl SpireSmoke {
    /// The SPIFFE ID the smoke ServiceAccount gets in `trust_domain`.
    #[must_use]
    pub fn spiffe_id(&self, trust_domain: &str) -> String {
        format!("spiffe://{trust_domain}{}", self.path)
    }
}

fn validate(p: &Profile, layer: Option<usize>, v: &mut Violations) {
    let Some(s) = spire_agents::section(p, layer, v) else { return };
    v.dns_label("spire.smoke.namespace", &s.smoke.namespace);
    v.dns_label("spire.smoke.serviceAccount", &s.smoke.service_account);
    v.dns_subdomain("spire.smoke.name", &s.smoke.name);
    if !s.smoke.path.starts_with('/') {
        v.push("spire.smoke.path", "must start with '/'");
    }
    if s.class_name.is_none() {
        v.missing("spire.className");
    }
}

/// `smoke`: the fixture, its ClusterSPIFFEID's className and the identity it gives.
fn view(p: &Profile, ctx: &mut Context) {
    if let Some(s) = &p.spire {
        ctx.insert(
            "smoke",
            &json!({
                "namespace": s.smoke.namespace,
                "serviceAccount": s.smoke.service_account,
                "name": s.smoke.name,
                "className": s.class_name,
                "id": s.smoke.spiffe_id(&s.trust_domain),
            }),
        );
    }
}
