//! `spire.*`: SPIRE setups whose smoke identity would prove nothing or never be issued.

use serde_json::Value;

use super::{Linter, Severity};
use crate::components::spire::{agents as spire_agents, smoke as spire_smoke};

pub(super) fn spire(l: &mut Linter<'_>) {
    let Some(s) = &l.loaded.profile.sections.spire else { return };
    let values = s.values.clone().unwrap_or(Value::Null);
    let server_on = values["spire-server"]["enabled"] == true;
    let default_id =
        &values["spire-server"]["controllerManager"]["identities"]["clusterSPIFFEIDs"]["default"]["enabled"];
    if server_on && default_id != &Value::Bool(false) {
        l.add(
            "spire.catch-all",
            Severity::Error,
            "spire.values",
            "the chart's default ClusterSPIFFEID (a catch-all fallback identity) would give every pod an identity: spiffe.denied could never pass".into(),
            "set spire-server.controllerManager.identities.clusterSPIFFEIDs.default.enabled: false",
        );
    }
    if s.class_name.as_deref().is_some_and(|c| c.trim().is_empty()) {
        l.add(
            "spire.class-name",
            Severity::Warning,
            "spire.className",
            "no className: a spire-controller-manager with a className ignores the smoke ClusterSPIFFEID".into(),
            "set it to the className of the controller manager that serves this cluster (<namespace>-<release> in the hardened chart)",
        );
    }
    let agent = &values["spire-agent"];
    let bundle_in_values = ["trustBundleURL", "trustBundleHostPath", "bundleConfigMap"]
        .iter()
        .any(|k| agent[*k].as_str().is_some_and(|v| !v.is_empty()));
    let agents_layer = l.loaded.profile.rendering(&spire_agents::COMPONENT).is_some();
    if agents_layer && s.trust_bundle.is_none() && !bundle_in_values && !server_on {
        l.add(
            "spire.no-trust-bundle",
            Severity::Error,
            "spire",
            "the SPIRE agents join an external server but have no trust bundle: the chart mounts a ConfigMap spire-bundle that only an in-cluster server creates, so the agent pods never start".into(),
            "set spire.trustBundle: {url: <the server's bundle endpoint>, format: spiffe}, {hostPath: <file on every node>} or {configMap: <a ConfigMap you provide>}",
        );
    }
    let smoke_layer = l.loaded.profile.rendering(&spire_smoke::COMPONENT).is_some();
    if !smoke_layer && l.loaded.profile.verify.spiffe.is_none() {
        l.add(
            "spire.no-smoke",
            Severity::Warning,
            "spire",
            "no spire-smoke layer: `osbx verify` will look for a smoke identity nobody renders".into(),
            "add a layer with component: spire-smoke",
        );
    }
}
