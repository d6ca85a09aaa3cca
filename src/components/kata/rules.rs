//! The kata section's rules: the chart's URL and version, the shims (each one the pinned chart
//! knows and one osbx can close with a drop-in), the default shim, the deployment mode, what the
//! build pools need of Kata, and the pools' hypervisor annotations.

use super::{
    BLOCK_PLAIN_SINCE, COMPONENT, DEFAULT_SHIM, Sections, Site, Violations, annotations, build_runtime_class,
    known_shims, shim,
};

pub(super) fn validate(s: &Sections, site: &Site<'_>, v: &mut Violations) {
    let layer = site.layer_of(&COMPONENT);
    let Some(k) = &s.kata else {
        if let Some((i, _)) = layer {
            v.push(format!("layers[{i}].component"), "a kata layer needs a top-level `kata` section");
        }
        return;
    };
    v.dns_label("kata.namespace", &k.namespace);
    v.dns_label("kata.release", &k.release);
    v.duration("kata.interval", &k.interval);
    v.duration("kata.timeout", &k.timeout);
    v.duration("kata.chart.interval", &k.chart.interval);
    if k.chart.url.starts_with("oci://") {
        v.shape("kata.chart.url", &k.chart.url, |u| {
            crate::refs::url(u, &["oci://"])?;
            crate::refs::chart_name(u.trim_end_matches('/').rsplit('/').next().unwrap_or_default())
                .map_err(|why| format!("its last segment names the chart, and {why}"))
        });
    } else {
        v.push("kata.chart.url", format!("{:?} must be an oci:// URL", k.chart.url));
    }
    v.shape("kata.chart.version", &k.chart.version, crate::refs::oci_tag);
    if k.shims.is_empty() {
        v.push("kata.shims", format!("enable at least one shim (e.g. {DEFAULT_SHIM})"));
    }
    if let Some(known) = known_shims(&k.chart.version) {
        for (i, shim) in k.shims.iter().enumerate() {
            if !known.contains(&shim.as_str()) {
                v.push(
                    format!("kata.shims[{i}]"),
                    format!(
                        "kata-deploy {} has no shim {shim:?}: it would install no RuntimeClass for it (known: {})",
                        k.chart.version,
                        known.join(", ")
                    ),
                );
            }
        }
    }
    // Every enabled shim gets the drop-in that closes io.katacontainers.* annotations in its
    // hypervisor table: a shim osbx knows no table for would be enabled open.
    for (i, shim) in k.shims.iter().enumerate() {
        let named_above = known_shims(&k.chart.version).is_some_and(|known| !known.contains(&shim.as_str()));
        if shim::by_name(shim).is_none() && !named_above {
            v.push(
                format!("kata.shims[{i}]"),
                format!(
                    "osbx knows no hypervisor table for shim {shim:?}, so it cannot render the drop-in that sets enable_annotations = [] for it ({}); enable a shim osbx knows",
                    annotations::ADVISORY
                ),
            );
        }
    }
    if !k.shims.contains(&k.default_shim) {
        v.push(
            "kata.defaultShim",
            format!("{:?} is not among the enabled shims [{}]: kata-deploy refuses to install (DEFAULT_SHIM must be one of the configured SHIMS)", k.default_shim, k.shims.join(", ")),
        );
    }
    if !matches!(k.deployment_mode.as_str(), "job" | "daemonset") {
        v.push("kata.deploymentMode", format!("{:?} is neither job nor daemonset", k.deployment_mode));
    }
    if layer.is_some() {
        let builds = s.pools.effective().iter().filter(|p| p.builds()).count();
        let major = semver::Version::parse(k.chart.version.trim_start_matches('v')).ok().map(|v| v.major);
        if builds > 0
            && let Some(major) = major.filter(|m| *m < BLOCK_PLAIN_SINCE)
        {
            v.push(
                "kata.chart.version",
                format!(
                    "the build pools need emptydir_mode = \"block-plain\", which Kata {major}.x does not know (it refuses the configuration): pin kata-deploy {BLOCK_PLAIN_SINCE}.0 or later"
                ),
            );
        }
        pool_annotations(s, v);
        let installed = k.runtime_classes(&s.pools.build_classes());
        for (i, pool) in s.pools.effective().iter().enumerate() {
            if let Some(rc) = &pool.runtime_class_name
                && !installed.contains(rc)
            {
                let builds = if pool.builds() {
                    let classes: Vec<String> = k.shims.iter().map(|s| build_runtime_class(s)).collect();
                    format!("; for a build pool, the build class of an enabled shim: {}", classes.join(", "))
                } else {
                    String::new()
                };
                v.push(
                    format!("pools.items[{i}].runtimeClassName"),
                    format!(
                        "RuntimeClass {rc} is not installed by the kata layer (it installs {}{builds})",
                        installed.join(", ")
                    ),
                );
            }
        }
    }
}

/// A pool whose own annotations carry an `io.katacontainers.*` key it is not allowed: the kata
/// layer's admission policy would reject every pod of it.
fn pool_annotations(s: &Sections, v: &mut Violations) {
    for (i, pool) in s.pools.effective().iter().enumerate() {
        let allowed = pool.allowed_annotations();
        for key in pool.template.annotations.iter().flatten().map(|(k, _)| k) {
            if key.starts_with(annotations::PREFIX) && !allowed.contains(key) {
                let field = if pool.pool.annotations.is_some() {
                    format!("pools.items[{i}].annotations")
                } else {
                    "pools.defaults.annotations".to_owned()
                };
                v.push(
                        field,
                        format!(
                            "pool {} would carry {key}: the kata layer's admission policy {} rejects its pods (list it in pools.items[{i}].kata.allowedAnnotations to allow it for this pool)",
                            pool.pool.name,
                            annotations::POLICY
                        ),
                    );
            }
        }
    }
}
