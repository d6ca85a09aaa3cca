//! `kata.advisory`, `kata.annotations-reopened`, `kata.allowed-annotation`: who may reconfigure
//! a sandbox's VM through `io.katacontainers.*` annotations ([`annotations`]).

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Linter, Severity};
use crate::components::kata::{self, annotations, shim};

pub(super) fn kata(l: &mut Linter<'_>) {
    let p = &l.loaded.profile;
    if p.site().layer_of(&kata::COMPONENT).is_none() {
        return;
    }
    let Some(k) = p.sections.kata.clone() else { return };
    advisory(l, &k.chart.version);
    reopened(l, &k);
    allowed(l);
}

/// `kata.advisory`: a kata-deploy pin below the release that stopped registering runtimes with
/// `io.katacontainers.*`.
fn advisory(l: &mut Linter<'_>, version: &str) {
    let (Ok(pinned), Ok(fixed)) =
        (semver::Version::parse(version.trim_start_matches('v')), semver::Version::parse(annotations::FIXED_IN))
    else {
        return;
    };
    if pinned >= fixed {
        return;
    }
    l.add(
        "kata.advisory",
        Severity::Warning,
        "kata.chart.version",
        format!(
            "kata-deploy {version} is below {}: {}; the kata layer closes it: every class's drop-in sets enable_annotations = [] in its hypervisor table (but for the names a pool is allowed), and ValidatingAdmissionPolicy {} rejects pods carrying io.katacontainers.* annotations in the pools' and verify's namespaces (`osbx verify --only kata.annotations` proves it)",
            annotations::FIXED_IN,
            annotations::ADVISORY,
            annotations::POLICY
        ),
        &format!(
            "pin kata-deploy {} or later once osbx knows it, and review the existing Kata configurations, as its notes ask; until then keep the kata layer applied",
            annotations::FIXED_IN
        ),
    );
}

/// `kata.annotations-reopened`: chart values (`kata.values`, merged over osbx's) that let pods
/// set hypervisor annotations no pool is allowed: a shim's `dropIn` or `allowedHypervisorAnnotations`
/// replaced, a custom runtime's drop-in.
fn reopened(l: &mut Linter<'_>, k: &kata::Kata) {
    let Some(extra) = k.values.clone() else { return };
    let p = &l.loaded.profile;
    let demands = p.sections.pools.kata_demands();
    let values = k.chart_values(&demands);
    let mut found: Vec<(String, String)> = Vec::new();
    let pools_allowed = |class: &str| demands.allowed_on(class);
    for (name, enabled_by) in enabled_shims(&values["shims"], &extra["shims"]) {
        let shim_values = &values["shims"][name.as_str()];
        let allowed = pools_allowed(&kata::runtime_class(&name));
        let at = format!("kata.values.shims.{name}");
        if !k.shims.contains(&name) {
            // osbx gave it no drop-in: the shim's own defaults (or the extra values' drop-in) hold.
            let why = if shim::by_name(&name).is_none() {
                Some(format!(
                    "shim {name} is enabled by {enabled_by}, and osbx knows no hypervisor table for it, so it renders no drop-in: the shim's defaults enable what they enable"
                ))
            } else {
                drop_in_opens(&name, shim_values["dropIn"].as_str().unwrap_or_default(), &allowed)
                    .map(|why| format!("shim {name} is enabled by {enabled_by}, not by kata.shims: {why}"))
            };
            if let Some(why) = why {
                found.push((enabled_by, why));
            }
            continue;
        }
        if extra["shims"][name.as_str()].get("allowedHypervisorAnnotations").is_some() {
            let extra_names: Vec<String> = shim_values["allowedHypervisorAnnotations"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .filter(|a| !allowed.contains(*a))
                .map(str::to_owned)
                .collect();
            if !extra_names.is_empty() {
                found.push((
                    format!("{at}.allowedHypervisorAnnotations"),
                    format!(
                        "shim {name}: allowedHypervisorAnnotations {extra_names:?} re-open hypervisor annotations no pool is allowed (kata-deploy appends them to the shim's enable_annotations)"
                    ),
                ));
            }
        }
        if extra["shims"][name.as_str()].get("dropIn").is_some()
            && let Some(why) = drop_in_opens(&name, shim_values["dropIn"].as_str().unwrap_or_default(), &allowed)
        {
            found.push((format!("{at}.dropIn"), format!("shim {name}: {why}")));
        }
    }
    for (name, runtime) in values["customRuntimes"]["runtimes"].as_object().into_iter().flatten() {
        if extra["customRuntimes"]["runtimes"].get(name).is_none() {
            continue;
        }
        let base = runtime["baseConfig"].as_str().unwrap_or_default();
        let allowed = pools_allowed(name);
        if let Some(why) = drop_in_opens(base, runtime["dropIn"].as_str().unwrap_or_default(), &allowed) {
            found
                .push((format!("kata.values.customRuntimes.runtimes.{name}"), format!("custom runtime {name}: {why}")));
        }
    }
    for (field, why) in found {
        l.add(
            "kata.annotations-reopened",
            Severity::Error,
            &field,
            format!(
                "{why}: pods could reconfigure their VM again ({}); the admission policy {} is then the only gate",
                annotations::ADVISORY,
                annotations::POLICY
            ),
            "remove the value (osbx renders enable_annotations = [] for every class), or allow a name for one pool with pools.items[].kata.allowedAnnotations",
        );
    }
}

/// The shims kata-deploy 4.1.0 enables with `shims` (osbx's values, `extra` merged over them),
/// each with the value that enables it: `enabled: true`, or, with `disableAll` false, every shim
/// of the chart whose `enabled` is not `false` (the chart's `isShimEnabled`: null follows
/// `disableAll`).
fn enabled_shims(shims: &Value, extra: &Value) -> Vec<(String, String)> {
    let disable_all = shims["disableAll"].as_bool().unwrap_or(false);
    let mut names: BTreeSet<String> =
        shims.as_object().into_iter().flatten().map(|(n, _)| n.clone()).filter(|n| n != "disableAll").collect();
    if !disable_all {
        names.extend(shim::SHIMS.iter().map(|s| s.name.to_owned()));
    }
    names
        .into_iter()
        .filter_map(|name| {
            let enabled = &shims[name.as_str()]["enabled"];
            let by = if *enabled == Value::Bool(true) {
                if extra[name.as_str()].get("enabled").is_some() {
                    format!("kata.values.shims.{name}.enabled")
                } else {
                    "kata.shims".to_owned()
                }
            } else if enabled.is_null() && !disable_all {
                "kata.values.shims.disableAll".to_owned()
            } else {
                return None;
            };
            Some((name, by))
        })
        .collect()
}

/// Why a drop-in for a class on `shim` re-opens hypervisor annotations beyond `allowed`, if it
/// does: it leaves `enable_annotations` out of the shim's hypervisor table (the base file's
/// defaults stay), or lists other names.
fn drop_in_opens(shim: &str, text: &str, allowed: &BTreeSet<String>) -> Option<String> {
    let table = shim::by_name(shim)?.hypervisor_table();
    let Some(list) = enable_annotations(text, table) else {
        return Some(format!(
            "its drop-in replaces osbx's and sets no [hypervisor.{table}] enable_annotations osbx can read (one line of quoted names), so the shim's defaults (kernel_params, default_memory, …) may be enabled again"
        ));
    };
    let extra: Vec<String> = list.into_iter().filter(|n| !allowed.contains(n)).collect();
    (!extra.is_empty())
        .then(|| format!("its drop-in enables hypervisor annotations {extra:?} in [hypervisor.{table}], which no pool on it is allowed"))
}

/// The `enable_annotations` a TOML drop-in sets in `[hypervisor.<table>]` (a table header and
/// the key, or the dotted key), when it is written on one line as an array of quoted names;
/// `None` when it sets none or osbx cannot read it.
fn enable_annotations(text: &str, table: &str) -> Option<Vec<String>> {
    let header = format!("hypervisor.{table}");
    let mut current = String::new();
    let mut found = None;
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            name.trim().clone_into(&mut current);
            continue;
        }
        let Some((key, value)) = line.split_once('=') else { continue };
        let key = key.trim();
        let full = if current.is_empty() { key.to_owned() } else { format!("{current}.{key}") };
        if full == format!("{header}.enable_annotations") {
            let inner = value.split('#').next()?.trim().strip_prefix('[')?.strip_suffix(']')?;
            let names: Option<Vec<String>> = inner
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(|n| n.strip_prefix('"').and_then(|n| n.strip_suffix('"')).map(str::to_owned))
                .collect();
            found = Some(names?);
        }
    }
    found
}

/// `kata.allowed-annotation`: what each annotation a pool is allowed opens, and that the class's
/// configuration enables it for every pod on that class.
fn allowed(l: &mut Linter<'_>) {
    let p = &l.loaded.profile;
    let mut found = Vec::new();
    for (i, pool) in p.sections.pools.effective().iter().enumerate() {
        let class = pool.runtime_class_name.clone().unwrap_or_default();
        for (j, key) in pool.allowed_annotations().iter().enumerate() {
            let name = key.strip_prefix(annotations::HYPERVISOR_PREFIX).unwrap_or(key);
            found.push((
                format!("pools.items[{i}].kata.allowedAnnotations[{j}]"),
                format!(
                    "pool {} may set {key}: it opens {}; RuntimeClass {class}'s Kata configuration enables {name} for every pod on that class, and only the admission policy {} keeps it to this pool's pods (by namespace and the {} label)",
                    pool.pool.name,
                    annotations::opens(name),
                    annotations::POLICY,
                    annotations::POOL_LABEL
                ),
            ));
        }
    }
    for (field, why) in found {
        l.add(
            "kata.allowed-annotation",
            Severity::Warning,
            &field,
            why,
            "allow only what the pool needs, and give the pool a RuntimeClass no other pool uses (another shim's) so no other pod's VM accepts it",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::enable_annotations;

    #[test]
    fn reads_enable_annotations_of_one_hypervisor_table() {
        let text = "[runtime]\nemptydir_mode = \"block-plain\"\n[hypervisor.clh]\nenable_annotations = [\"default_memory\", \"kernel_params\"]\n";
        assert_eq!(
            enable_annotations(text, "clh"),
            Some(vec!["default_memory".to_owned(), "kernel_params".to_owned()])
        );
        assert_eq!(enable_annotations(text, "qemu"), None);
        assert_eq!(enable_annotations("[hypervisor.qemu]\nenable_annotations = []\n", "qemu"), Some(vec![]));
        assert_eq!(
            enable_annotations("hypervisor.qemu.enable_annotations = [\".*\"]", "qemu"),
            Some(vec![".*".to_owned()])
        );
        assert_eq!(enable_annotations("[hypervisor.qemu]\nenable_annotations = [\n\"a\"]", "qemu"), None);
    }
}
