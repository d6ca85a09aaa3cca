//! Rules for the `kata` and `spire` sections and the layers that render them.

use super::{FLUX_UNITS, Findings, check_dns_subdomain};
use crate::profile::types::{Component, Kata, Profile};

fn renders(p: &Profile, c: Component) -> Option<usize> {
    p.layers.iter().position(|l| !l.external && l.component == Some(c))
}

pub(super) fn kata(p: &Profile, f: &mut Findings) {
    let layer = renders(p, Component::Kata);
    let Some(k) = &p.kata else {
        if let Some(i) = layer {
            f.push(format!("layers[{i}].component"), "a kata layer needs a top-level `kata` section");
        }
        return;
    };
    f.dns_label("kata.namespace", &k.namespace);
    f.dns_label("kata.release", &k.release);
    f.duration("kata.interval", &k.interval, FLUX_UNITS);
    f.duration("kata.timeout", &k.timeout, FLUX_UNITS);
    f.duration("kata.chart.interval", &k.chart.interval, FLUX_UNITS);
    if !k.chart.url.starts_with("oci://") {
        f.push("kata.chart.url", format!("{:?} must be an oci:// URL", k.chart.url));
    }
    if k.shims.is_empty() {
        f.push("kata.shims", "enable at least one shim (e.g. clh-runtime-rs)");
    }
    if !k.shims.contains(&k.default_shim) {
        f.push(
            "kata.defaultShim",
            format!("{:?} is not among the enabled shims [{}]: kata-deploy refuses to install (DEFAULT_SHIM must be one of the configured SHIMS)", k.default_shim, k.shims.join(", ")),
        );
    }
    if !matches!(k.deployment_mode.as_str(), "job" | "daemonset") {
        f.push("kata.deploymentMode", format!("{:?} is neither job nor daemonset", k.deployment_mode));
    }
    if layer.is_some() {
        let installed: Vec<String> = k.shims.iter().map(|s| Kata::runtime_class(s)).collect();
        for (i, pool) in p.effective_pools().iter().enumerate() {
            if let Some(rc) = &pool.runtime_class_name
                && !installed.contains(rc)
            {
                f.push(
                    format!("pools.items[{i}].runtimeClassName"),
                    format!(
                        "RuntimeClass {rc} is not installed by the kata layer (it installs {})",
                        installed.join(", ")
                    ),
                );
            }
        }
    }
}

pub(super) fn spire(p: &Profile, f: &mut Findings) {
    let layers = [renders(p, Component::SpireAgents), renders(p, Component::SpireSmoke)];
    let Some(s) = &p.spire else {
        for i in layers.into_iter().flatten() {
            f.push(format!("layers[{i}].component"), "a SPIRE layer needs a top-level `spire` section");
        }
        return;
    };
    if s.trust_domain.is_empty() || s.trust_domain.contains("://") || s.trust_domain.contains('/') {
        f.push(
            "spire.trustDomain",
            format!("{:?} is not a trust domain (a name like example.org, without scheme or path)", s.trust_domain),
        );
    }
    f.dns_label("spire.namespace", &s.namespace);
    f.dns_label("spire.smoke.namespace", &s.smoke.namespace);
    f.dns_label("spire.smoke.serviceAccount", &s.smoke.service_account);
    if let Err(why) = check_dns_subdomain(&s.smoke.name) {
        f.push("spire.smoke.name", why);
    }
    if !s.smoke.path.starts_with('/') {
        f.push("spire.smoke.path", "must start with '/'");
    }
    if s.server.address.is_empty() {
        f.push("spire.server.address", "name the SPIRE server the agents join (osbx creates no second trust root)");
    }
    f.duration("spire.chart.interval", &s.chart.interval, FLUX_UNITS);
}
