//! `kata.*` and `pool.*`: pools that cannot work as written.

use serde_json::Value;

use super::{Linter, Severity};
use crate::components::kata::{self, shim};
use crate::components::pools::{POOL, Runtime};
use crate::render::RenderedObject;

/// Pool spec fields a chart version's (stale) Pool CRD does not know: the API server prunes them
/// silently, and the Pool shows endless drift (opensandbox-group/OpenSandbox#1336, #1423).
const STALE_POOL_CRDS: &[(&str, &[&str])] = &[
    ("helm/opensandbox/0.1.0", &["scaleStrategy", "updateStrategy", "recycleStrategy"]),
    ("helm/opensandbox/0.2.0", &["scaleStrategy", "updateStrategy", "recycleStrategy"]),
];

/// `kata.uncheckable-shim`: a Kata pool whose VM `osbx verify` cannot inspect.
fn uncheckable_shim(l: &mut Linter<'_>, at: &str, pool: &str, class: &str) {
    let p = &l.loaded.profile;
    let named = p.verify.kata_shim.as_deref();
    let shim = named.map_or_else(|| shim::of_class(class), shim::by_name);
    let (field, why) = match shim {
        None => (
            format!("{at}.runtimeClassName"),
            format!(
                "verify cannot tell which Kata shim runs RuntimeClass {class} (not kata-<shim>): kata.vmm-shared-memory is skipped"
            ),
        ),
        Some(s) => {
            let skipped: Vec<String> = [
                ("kata.host-kvm", s.host_kvm_not_applicable()),
                ("kata.vmm-shared-memory", s.shared_memory_not_applicable()),
            ]
            .into_iter()
            .filter_map(|(check, why)| why.map(|w| format!("{check} ({w})")))
            .collect();
            if skipped.is_empty() {
                return;
            }
            let field = if named.is_some() { "verify.kataShim".to_owned() } else { format!("{at}.runtimeClassName") };
            (
                field,
                format!(
                    "verify cannot check the VM of shim {} (pool {pool}): it skips {}",
                    s.name,
                    skipped.join(" and ")
                ),
            )
        }
    };
    l.add(
        "kata.uncheckable-shim",
        Severity::Warning,
        &field,
        why,
        "name the pool's RuntimeClass kata-<shim> (or set verify.kataShim), or check the VM by other means",
    );
}

/// `kata.build-storage`: a build pool whose RuntimeClass is not one the rendered kata layer
/// gives block-backed emptyDirs: on virtio-fs, dockerd's overlay2 fails or falls back to `vfs`.
fn build_storage(l: &mut Linter<'_>) {
    let p = &l.loaded.profile;
    let site = p.site();
    let layer = site.layer_of(&kata::COMPONENT).map(|(_, name)| name.to_owned());
    let kata_section = p.sections.kata.as_ref().filter(|_| layer.is_some());
    let block = kata_section.map(|k| k.block_storage_classes(&p.sections.pools.build_classes())).unwrap_or_default();
    let mut found = Vec::new();
    for (i, pool) in p.sections.pools.build_pools() {
        let Some(class) = pool.runtime_class_name.clone().filter(|c| !block.contains(c)) else { continue };
        let named = pool.pool.runtime_class_name.is_some();
        let field = format!("pools.items[{i}].{}", if named { "runtimeClassName" } else { "builds" });
        let why = match &layer {
            None => format!(
                "build pool {} runs on RuntimeClass {class}, which osbx does not install (it renders no kata layer; an external one it cannot see): it cannot tell that the class gives block-backed emptyDirs, and on virtio-fs (Kata's default, emptydir_mode = \"shared-fs\") Docker's overlay2 fails or falls back to vfs",
                pool.pool.name
            ),
            Some(layer) => format!(
                "build pool {} runs on RuntimeClass {class}, which the {layer} layer installs with virtio-fs emptyDirs (emptydir_mode = \"shared-fs\"): Docker's overlay2 fails or falls back to vfs; the layer gives block-backed emptyDirs to kata-<shim>-build of an enabled shim",
                pool.pool.name
            ),
        };
        found.push((field, why));
    }
    let fix = kata::block_storage_fix();
    for (field, why) in found {
        l.add("kata.build-storage", Severity::Warning, &field, why, &fix);
    }
}

pub(super) fn pools(l: &mut Linter<'_>, objects: &[RenderedObject], pool_crd: Option<&Value>) {
    build_storage(l);
    let p = &l.loaded.profile;
    let timeout = p.sections.opensandbox.server.config.kubernetes.create_timeout();
    for (i, pool) in p.sections.pools.effective().iter().enumerate() {
        let at = format!("pools.items[{i}]");
        if pool.pool.runtime == Runtime::Kata {
            for (j, v) in pool.template.volumes.iter().flatten().enumerate() {
                let csi = v["csi"]["driver"].as_str().is_some_and(|d| d.contains("spiffe"));
                let host =
                    v["hostPath"]["path"].as_str().is_some_and(|h| h.contains("spire") || h.contains("agent-sockets"));
                if csi || host {
                    let field = if pool.pool.volumes.is_some() {
                        format!("{at}.volumes[{j}]")
                    } else {
                        format!("pools.defaults.volumes[{j}]")
                    };
                    l.add(
                        "kata.host-socket",
                        Severity::Error,
                        &field,
                        format!("Kata pool {} mounts the host SPIFFE Workload API socket: Unix sockets do not cross the VM boundary (connect: connection refused)", pool.pool.name),
                        "run a SPIRE agent inside the pod (socket in a memory emptyDir) instead",
                    );
                }
            }
            if let Some(class) = &pool.runtime_class_name {
                uncheckable_shim(l, &at, &pool.pool.name, class);
            }
            if pool.pool.capacity.buffer_min == 0 && timeout < 120 {
                l.add(
                    "kata.cold-start",
                    Severity::Warning,
                    &format!("{at}.capacity.bufferMin"),
                    format!("Kata pool {} keeps no warm VM and the server's create timeout is {timeout}s: the first sandbox times out while its VM boots", pool.pool.name),
                    "set bufferMin ≥ 1, or raise opensandbox.server.config.kubernetes.sandboxCreateTimeoutSeconds",
                );
            }
        }
    }
    let pin = p.sections.opensandbox.source.git_ref.tag.clone().unwrap_or_default();
    for (i, o) in objects.iter().filter(|o| POOL.is(&o.object.id.gvk)).enumerate() {
        let spec = o.object.value["spec"].as_object().cloned().unwrap_or_default();
        let unknown: Vec<String> = match pool_crd {
            Some(crd) => unknown_fields(&o.object.value["spec"], &crd_spec_schema(crd), "spec"),
            None => STALE_POOL_CRDS
                .iter()
                .filter(|(v, _)| *v == pin)
                .flat_map(|(_, fields)| fields.iter().filter(|f| spec.contains_key(**f)).map(|f| format!("spec.{f}")))
                .collect(),
        };
        for field in unknown {
            l.add(
                "pool.unknown-field",
                Severity::Error,
                &format!("pools.items[{i}]"),
                format!("Pool {} sets {field}, which the Pool CRD of {} does not know: the API server drops it silently and the Pool drifts forever", o.object.id.name, if pool_crd.is_some() { "the given CRD".to_owned() } else { pin.clone() }),
                "remove the field, or pin a chart whose Pool CRD has it",
            );
        }
    }
}

fn crd_spec_schema(crd: &Value) -> Value {
    let versions = crd["spec"]["versions"].as_array().cloned().unwrap_or_default();
    let v = versions.iter().find(|v| v["storage"] == true).or(versions.first()).cloned().unwrap_or(Value::Null);
    v["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
}

/// Fields of `value` that `schema` does not declare (stops where the schema preserves unknown
/// fields or declares no properties).
fn unknown_fields(value: &Value, schema: &Value, at: &str) -> Vec<String> {
    if schema["x-kubernetes-preserve-unknown-fields"] == true {
        return Vec::new();
    }
    match value {
        Value::Object(map) => {
            let Some(props) = schema["properties"].as_object() else { return Vec::new() };
            map.iter()
                .flat_map(|(k, v)| match props.get(k) {
                    Some(s) => unknown_fields(v, s, &format!("{at}.{k}")),
                    None => vec![format!("{at}.{k}")],
                })
                .collect()
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .flat_map(|(i, v)| unknown_fields(v, &schema["items"], &format!("{at}[{i}]")))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::unknown_fields;

    #[test]
    fn unknown_fields_against_a_schema() {
        let schema = json!({"properties": {"capacitySpec": {"properties": {"poolMax": {}}}, "template": {"x-kubernetes-preserve-unknown-fields": true}}});
        let spec =
            json!({"capacitySpec": {"poolMax": 1, "poolMinn": 0}, "template": {"anything": 1}, "scaleStrategy": {}});
        assert_eq!(unknown_fields(&spec, &schema, "spec"), ["spec.capacitySpec.poolMinn", "spec.scaleStrategy"]);
    }
}
