//! `osbx lint`: domain rules no general tool knows, each with an id, a severity, the profile
//! location and the fix. `osbx render` runs them too: errors stop it, warnings are printed.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::components::pools::Runtime;
use crate::components::spire_smoke;
use crate::object::ObjectRef;
use crate::profile::{Diagnostic, LoadedProfile, Pos};
use crate::render::{Rendered, RenderedObject};

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Will not work, or leaks a secret: `render` refuses.
    Error,
    /// Works, but probably not as intended.
    Warning,
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// Stable rule id.
    pub id: &'static str,
    /// Severity.
    pub severity: Severity,
    /// Profile file.
    pub file: String,
    /// Line.
    pub line: usize,
    /// Column.
    pub column: usize,
    /// Field path.
    pub field: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub fix: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(
            f,
            "{}:{}:{}: {sev}[{}]: {}: {} (fix: {})",
            self.file, self.line, self.column, self.id, self.field, self.message, self.fix
        )
    }
}

struct Linter<'a> {
    loaded: &'a LoadedProfile,
    out: Vec<Finding>,
}

impl Linter<'_> {
    fn add(&mut self, id: &'static str, severity: Severity, field: &str, message: String, fix: &str) {
        let Pos { line, column } = self.loaded.locations.find(field);
        self.out.push(Finding {
            id,
            severity,
            file: self.loaded.origin.clone(),
            line,
            column,
            field: field.to_owned(),
            message,
            fix: fix.to_owned(),
        });
    }
}

/// Pool spec fields a chart version's (stale) Pool CRD does not know: the API server prunes them
/// silently, and the Pool shows endless drift (opensandbox-group/OpenSandbox#1336, #1423).
const STALE_POOL_CRDS: &[(&str, &[&str])] = &[
    ("helm/opensandbox/0.1.0", &["scaleStrategy", "updateStrategy", "recycleStrategy"]),
    ("helm/opensandbox/0.2.0", &["scaleStrategy", "updateStrategy", "recycleStrategy"]),
];

/// Run every rule over a valid profile and its render. `pool_crd` is a Pool CRD to check the
/// rendered Pools against (the one the pinned chart installs); without it, known stale chart
/// versions are checked from a table.
#[must_use]
pub fn lint(loaded: &LoadedProfile, rendered: &Rendered, pool_crd: Option<&Value>) -> Vec<Finding> {
    let mut l = Linter { loaded, out: Vec::new() };
    api_key(&mut l);
    let objects = rendered.objects();
    pools(&mut l, &objects, pool_crd);
    images(&mut l);
    spire(&mut l);
    duplicates(&mut l, &objects);
    l.out.sort_by(|a, b| (a.severity, a.line, a.column, a.id).cmp(&(b.severity, b.line, b.column, b.id)));
    l.out
}

fn api_key(l: &mut Linter<'_>) {
    let server = &l.loaded.profile.opensandbox.server;
    let insecure = server.insecure();
    match server.api_key.inline.as_deref() {
        Some("") if !insecure => l.add(
            "api-key.empty",
            Severity::Warning,
            "opensandbox.server.apiKey.inline",
            "the API key is empty: servers ≥ v0.1.13 refuse to start (`Startup blocked: server.api_key is empty`) unless OPENSANDBOX_INSECURE_SERVER=YES".into(),
            "use apiKey.secretRef and create the Secret with `osbx apply` (OSBX_API_KEY or --api-key-file)",
        ),
        Some(k) if !k.is_empty() => l.add(
            "api-key.in-configmap",
            Severity::Error,
            "opensandbox.server.apiKey.inline",
            "the API key would be written into the values ConfigMap, i.e. committed to git in clear text".into(),
            "use apiKey.secretRef; the key then lives in a Secret that is never committed",
        ),
        _ => {}
    }
}

fn pools(l: &mut Linter<'_>, objects: &[RenderedObject], pool_crd: Option<&Value>) {
    let p = &l.loaded.profile;
    let timeout = p.opensandbox.server.config.kubernetes.create_timeout();
    for (i, pool) in p.pools.effective().iter().enumerate() {
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
    let pin = p.opensandbox.source.git_ref.tag.clone().unwrap_or_default();
    for (i, o) in objects.iter().filter(|o| o.object.id.kind() == "Pool").enumerate() {
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

/// Whether an image reference names a tag or a digest.
#[must_use]
pub fn pinned(image: &str) -> bool {
    if image.contains('@') {
        return true;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    last.split_once(':').is_some_and(|(_, tag)| !tag.is_empty() && tag != "latest")
}

fn images(l: &mut Linter<'_>) {
    let p = &l.loaded.profile;
    let mut seen: Vec<(String, String)> = Vec::new();
    if let Some(img) = &p.pools.defaults.image {
        seen.push(("pools.defaults.image".into(), img.clone()));
    }
    for (i, c) in p.pools.defaults.init_containers.iter().flatten().enumerate() {
        seen.push((
            format!("pools.defaults.initContainers[{i}].image"),
            c["image"].as_str().unwrap_or_default().to_owned(),
        ));
    }
    for (i, pool) in p.pools.items.iter().enumerate() {
        if let Some(img) = &pool.image {
            seen.push((format!("pools.items[{i}].image"), img.clone()));
        }
        for (j, c) in pool.init_containers.iter().flatten().enumerate() {
            seen.push((
                format!("pools.items[{i}].initContainers[{j}].image"),
                c["image"].as_str().unwrap_or_default().to_owned(),
            ));
        }
    }
    let cfg = &p.opensandbox.server.config;
    seen.push(("opensandbox.server.config.runtime.execdImage".into(), cfg.runtime.execd_image.clone()));
    if let Some(e) = &cfg.egress {
        seen.push(("opensandbox.server.config.egress.image".into(), e.image.clone()));
    }
    seen.push(("verify.probeImage".into(), p.verify.probe_image.clone()));
    seen.push(("verify.hostProbeImage".into(), p.verify.host_probe_image.clone()));
    for (field, image) in seen {
        if !image.is_empty() && !pinned(&image) {
            l.add(
                "image.unpinned",
                Severity::Warning,
                &field,
                format!("image {image:?} has no tag or digest: every node may run something different"),
                "pin a tag, or better a digest (image@sha256:…)",
            );
        }
    }
}

fn spire(l: &mut Linter<'_>) {
    let Some(s) = &l.loaded.profile.spire else { return };
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

fn duplicates(l: &mut Linter<'_>, objects: &[RenderedObject]) {
    let mut owners: BTreeMap<&ObjectRef, Vec<&str>> = BTreeMap::new();
    for o in objects {
        let layers = owners.entry(&o.object.id).or_default();
        if !layers.contains(&o.layer.as_str()) {
            layers.push(&o.layer);
        }
    }
    for (object, layers) in owners.into_iter().filter(|(_, l)| l.len() > 1) {
        l.add(
            "layers.duplicate-object",
            Severity::Error,
            "layers",
            format!(
                "{object} is written by layers {}: their Flux Kustomizations would fight over it",
                layers.join(" and ")
            ),
            "render it in one layer only (e.g. put shared namespaces in one layer)",
        );
    }
}

/// Lint errors: `render` refuses to write.
#[derive(Debug, thiserror::Error)]
#[error("lint found errors; nothing written (run `osbx lint` for details):\n{}", .0.iter().map(|f| format!("  {f}")).collect::<Vec<_>>().join("\n"))]
pub struct LintErrors(pub Vec<Finding>);

/// The gate `render` passes through: errors refuse the render, warnings are returned.
///
/// # Errors
/// [`LintErrors`] with every error found.
pub fn gate(loaded: &LoadedProfile, rendered: &Rendered) -> Result<Vec<Finding>, LintErrors> {
    let (errors, warnings): (Vec<Finding>, Vec<Finding>) =
        lint(loaded, rendered, None).into_iter().partition(|f| f.severity == Severity::Error);
    if errors.is_empty() { Ok(warnings) } else { Err(LintErrors(errors)) }
}

/// The same finding for many clusters of a fleet (one from the base profile) once, with the
/// number of other clusters it applies to; in first-seen order.
#[must_use]
pub fn group(findings: &[Finding]) -> Vec<(&Finding, usize)> {
    let mut groups: Vec<(&Finding, usize)> = Vec::new();
    for f in findings {
        match groups.iter_mut().find(|(g, _)| (g.id, &g.field, &g.message) == (f.id, &f.field, &f.message)) {
            Some((_, n)) => *n += 1,
            None => groups.push((f, 0)),
        }
    }
    groups
}

impl From<Diagnostic> for Finding {
    /// An invalid profile as a lint result.
    fn from(d: Diagnostic) -> Self {
        Finding {
            id: "profile.invalid",
            severity: Severity::Error,
            file: d.file,
            line: d.pos.line,
            column: d.pos.column,
            field: d.field.unwrap_or_default(),
            message: d.message,
            fix: "see the message".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn image_pins() {
        assert!(pinned("busybox:1.37"));
        assert!(pinned("registry:5000/x/y:v1"));
        assert!(pinned("x@sha256:abc"));
        assert!(!pinned("busybox"));
        assert!(!pinned("registry:5000/x/y"));
        assert!(!pinned("busybox:latest"));
    }

    #[test]
    fn unknown_fields_against_a_schema() {
        let schema = json!({"properties": {"capacitySpec": {"properties": {"poolMax": {}}}, "template": {"x-kubernetes-preserve-unknown-fields": true}}});
        let spec =
            json!({"capacitySpec": {"poolMax": 1, "poolMinn": 0}, "template": {"anything": 1}, "scaleStrategy": {}});
        assert_eq!(unknown_fields(&spec, &schema, "spec"), ["spec.capacitySpec.poolMinn", "spec.scaleStrategy"]);
    }
}
