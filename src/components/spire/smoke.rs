//! The `spire-smoke` component: the SPIFFE smoke fixture `osbx verify` probes (a namespace, a
//! ServiceAccount, and a ClusterSPIFFEID giving that ServiceAccount, and no one else, an
//! identity), from `spire.smoke`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tera::Context;

use super::section;
use crate::components::{Component, Sections, Site};
use crate::object::KnownKind;
use crate::spec::Violations;

/// The table entry of this component.
pub(crate) static COMPONENT: Component = Component::without_chart(
    "spire-smoke",
    "the SPIFFE smoke fixture (namespace, ServiceAccount, ClusterSPIFFEID)",
    "spire",
    validate,
    view,
);

/// spire-controller-manager's ClusterSPIFFEID, the kind of the smoke identity this component
/// renders (verify reads it to explain a missing identity).
pub(crate) const CLUSTER_SPIFFE_ID: KnownKind = KnownKind::new("spire.spiffe.io", "v1alpha1", "ClusterSPIFFEID");

/// The SPIFFE smoke fixture.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct SpireSmoke {
    /// Namespace of the fixture (the SPIFFE probes run there).
    pub namespace: String,
    /// The ServiceAccount the identity is given to, and no other.
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

fn validate(sections: &Sections, site: &Site<'_>, v: &mut Violations) {
    let Some(s) = section(sections, site.layer_of(&COMPONENT), v) else { return };
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
fn view(sections: &Sections, _: &Site<'_>, ctx: &mut Context) {
    if let Some(s) = &sections.spire {
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
