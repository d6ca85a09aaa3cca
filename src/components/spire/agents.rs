//! The `spire-agents` component: SPIRE agents and the SPIFFE CSI driver from the hardened SPIRE
//! chart (a Flux `HelmRepository` and `HelmRelease`s), joined to an existing SPIRE server.

use serde_json::Value;
use tera::Context;

use super::{Spire, TrustBundle, section};
use crate::components::{Component, Sections, Site};
use crate::spec::mirror::{ChartImage, Shape};
use crate::spec::{Images, Violations};

/// The table entry of this component.
pub(crate) static COMPONENT: Component = Component {
    name: "spire-agents",
    about: "SPIRE agents and the SPIFFE CSI driver",
    section: "spire",
    validate,
    view,
    pin: |object| Some(if object.name == "spire-crds" { "spire.chart.crdsVersion" } else { "spire.chart.version" }),
    values: |s| s.spire.as_ref()?.values.as_ref(),
    supplied: |_| None,
    health: &[],
    after_others: false,
    pulled: |_| Vec::new(),
    images,
};

/// The images of the chart's agents and CSI driver (the parts osbx enables), by their values
/// (`registry` and `repository` beside a `tag`), with the chart's defaults.
const CHART_IMAGES: &[ChartImage] = &[
    image("spire-agent.image", "ghcr.io/spiffe/spire-agent", "the SPIRE agent"),
    image("spire-agent.fsGroupFix.image", "cgr.dev/chainguard/bash", "the agent's fsGroup fix"),
    image("spire-agent.socketAlternate.image", "cgr.dev/chainguard/bash", "the agent's socket links"),
    image("spire-agent.hostCert.image", "cgr.dev/chainguard/min-toolkit-debug", "the agent's host certificate reader"),
    image(
        "spire-agent.nodeAttestor.tpmDirect.plugin.image",
        "ghcr.io/spiffe/spire-tpm-plugin-tpm-attestor-agent",
        "the agent's TPM plugin",
    ),
    image(
        "spire-agent.nodeAttestor.tpmDirect.pubHash.image",
        "ghcr.io/spiffe/spire-tpm-plugin-get-tpm-pubhash",
        "the agent's TPM hash reader",
    ),
    image(
        "spire-agent.dynamicRegistration.image",
        "ghcr.io/spiffe/spire-controller-manager-dynamic-registration/spire-controller-manager-dynamic-registration-agent",
        "the agent's dynamic registration",
    ),
    image("spire-agent.tools.kubectl.image", "registry.k8s.io/kubectl", "the agent's kubectl"),
    image("spire-agent.tools.busybox.image", "busybox", "the agent's busybox"),
    image("spiffe-csi-driver.image", "ghcr.io/spiffe/spiffe-csi-driver", "the SPIFFE CSI driver"),
    image(
        "spiffe-csi-driver.nodeDriverRegistrar.image",
        "registry.k8s.io/sig-storage/csi-node-driver-registrar",
        "the CSI driver's registrar",
    ),
    image(
        "spiffe-csi-driver.selinux.image",
        "registry.access.redhat.com/ubi10/ubi-minimal",
        "the CSI driver's SELinux fix",
    ),
];

const fn image(path: &'static str, default: &'static str, about: &'static str) -> ChartImage {
    ChartImage { path, shape: Shape::RegistryRepository, default, about }
}

/// The agents' and the CSI driver's images onto the mirror and the pull Secrets to their pods,
/// through the chart's values. `global.spire.image.registry` would put every image on one
/// registry over the per-image ones the mirror writes: with a mirror, it may not be set.
fn images(sections: &mut Sections, images: &Images, v: &mut Violations) {
    let Some(s) = &mut sections.spire else { return };
    if images.mirror.is_set() {
        let global = s.values.as_ref().map(|values| &values["global"]["spire"]["image"]["registry"]);
        if global.and_then(Value::as_str).is_some_and(|r| !r.is_empty()) {
            v.push(
                "spire.values.global.spire.image.registry",
                "overrides the registry of every image the mirror rewrites (images.mirror): remove it",
            );
        }
    }
    images.chart_values(&mut s.values, CHART_IMAGES, "spire.values", v);
    images.chart_pull_secrets(&mut s.values, &["spire-agent.imagePullSecrets", "spiffe-csi-driver.imagePullSecrets"]);
}

fn validate(sections: &Sections, site: &Site<'_>, v: &mut Violations) {
    let Some(s) = section(sections, site.layer_of(&COMPONENT), v) else { return };
    if s.trust_domain.is_empty() {
        v.missing("spire.trustDomain");
    } else if s.trust_domain.contains("://") || s.trust_domain.contains('/') {
        v.push(
            "spire.trustDomain",
            format!("{:?} is not a trust domain (a name like example.org, without scheme or path)", s.trust_domain),
        );
    }
    v.dns_label("spire.namespace", &s.namespace);
    if s.server.address.is_empty() {
        v.push("spire.server.address", "name the SPIRE server the agents join (osbx creates no second trust root)");
    }
    v.duration("spire.chart.interval", &s.chart.interval);
    v.shape("spire.chart.repository", &s.chart.repository, |u| crate::refs::url(u, &["https://", "http://"]));
    v.shape("spire.chart.name", &s.chart.name, crate::refs::chart_name);
    v.shape("spire.chart.version", &s.chart.version, crate::refs::version);
    v.shape("spire.chart.crdsVersion", &s.chart.crds_version, crate::refs::version);
    if let Some(b) = &s.trust_bundle {
        trust_bundle(b, v);
    }
    if let Some(values) = &s.values {
        moved_agents(s, values, v);
    }
}

/// `spire.values` may not move the agents or the CSI driver out of `spire.namespace` (the
/// release namespace, where the chart puts them by default): a `namespaceOverride`, or the
/// recommended namespace layout, which puts them into `global.spire.namespaces.system.name`.
fn moved_agents(s: &Spire, values: &Value, v: &mut Violations) {
    let ns = s.namespace.as_str();
    for chart in ["spire-agent", "spiffe-csi-driver"] {
        let set = &values[chart]["namespaceOverride"];
        if !set.is_null() && set.as_str() != Some(ns) && set.as_str() != Some("") {
            v.push(
                format!("spire.values.{chart}.namespaceOverride"),
                format!("{set} would install the {chart} chart outside `spire.namespace` ({ns:?}): set that instead"),
            );
        }
    }
    let recommendations = &values["global"]["spire"]["recommendations"];
    if recommendations["enabled"] == true && recommendations["namespaceLayout"] != false {
        let system = values["global"]["spire"]["namespaces"]["system"]["name"].as_str().unwrap_or("spire-system");
        if system != ns {
            v.push(
                "spire.values.global.spire.recommendations.enabled",
                format!(
                    "the recommended namespace layout would install the agents into {system:?}, not `spire.namespace` \
                     ({ns:?}): set `global.spire.namespaces.system.name: {ns}` or `recommendations.namespaceLayout: false`"
                ),
            );
        }
    }
}

fn trust_bundle(b: &TrustBundle, v: &mut Violations) {
    let sources = [b.url.is_some(), b.host_path.is_some(), b.config_map.is_some()];
    if sources.iter().filter(|s| **s).count() != 1 {
        v.push("spire.trustBundle", "set exactly one of url (with format), hostPath and configMap");
    }
    if let Some(url) = &b.url
        && !(url.starts_with("https://") || url.starts_with("http://"))
    {
        v.push("spire.trustBundle.url", format!("{url:?} must start with https:// (or http://)"));
    }
    if b.format.is_some() && b.url.is_none() {
        v.push("spire.trustBundle.format", "format describes a bundle at a url; a hostPath bundle is PEM");
    }
    if let Some(path) = &b.host_path
        && !path.starts_with('/')
    {
        v.push("spire.trustBundle.hostPath", format!("{path:?} must be an absolute path on the node"));
    }
    if let Some(name) = &b.config_map {
        v.dns_subdomain("spire.trustBundle.configMap", name);
    }
}

/// `spire`: the section with the chart values.
fn view(sections: &Sections, site: &Site<'_>, ctx: &mut Context) {
    if let Some(s) = &sections.spire {
        let mut v = serde_json::to_value(s).unwrap_or(Value::Null);
        v["chartValues"] = s.chart_values(&site.cluster.name);
        ctx.insert("spire", &v);
    }
}
