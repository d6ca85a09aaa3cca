//! Generated variants of the shipped profiles: every setting that decides where a chart's objects
//! land or what they are called, changed, alone and all at once, on every shipped profile it
//! applies to (renamed namespaces, other release and source names, release namespaces apart from
//! the control plane, several pools and runtime classes, components on and off, extra chart
//! values); and the variants no chart can honour, which `osbx lint` must refuse.

// Every edit has the [`Edit`] signature, also those that apply to every profile.
#![allow(clippy::unnecessary_wraps)]

use serde_json::{Value, json};

/// One change to a profile; `None` when it does not apply to that profile.
type Edit = fn(&Value) -> Option<Value>;

/// The edits, by name.
const EDITS: &[(&str, Edit)] = &[
    ("renamed namespaces", renamed_namespaces),
    ("other names", other_names),
    ("release namespaces", release_namespaces),
    ("pools and classes", pools_and_classes),
    ("components off", components_off),
    ("components on", components_on),
    ("extra values", extra_values),
    ("mirror", mirror),
];

/// Every variant: (label, profile document).
pub fn variants() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for (name, base) in super::cases::shipped_documents() {
        let mut all = base.clone();
        for (edit, f) in EDITS {
            if let Some(v) = f(&base) {
                out.push((format!("variant \"{edit}\" of profile {name}"), v));
            }
            // Everything that composes, at once (turning components on or off changes the
            // shape: those stay alone).
            if !edit.starts_with("components")
                && let Some(v) = f(&all)
            {
                all = v;
            }
        }
        out.push((format!("variant \"all at once\" of profile {name}"), all));
    }
    out
}

fn with(base: &Value, f: impl FnOnce(&mut Value)) -> Value {
    let mut v = base.clone();
    f(&mut v);
    v
}

/// Whether the profile renders a layer of `component`.
fn renders(base: &Value, component: &str) -> bool {
    base["layers"].as_array().is_some_and(|ls| ls.iter().any(|l| l["component"] == component))
}

/// Every namespace a section names, renamed: OpenSandbox's control plane and sandboxes, kata-deploy's,
/// and SPIRE's (the agents' and the smoke fixture's) wherever the profile has the section or
/// renders the component (a section left to its defaults is written out renamed).
fn renamed_namespaces(base: &Value) -> Option<Value> {
    Some(with(base, |p| {
        p["opensandbox"]["namespaces"] = json!({"controlPlane": "sbx-system", "sandbox": "sbx"});
        if p.get("kata").is_some() || renders(base, "kata") {
            p["kata"]["namespace"] = json!("kata-runtime");
        }
        if p.get("spire").is_some() || renders(base, "spire-agents") || renders(base, "spire-smoke") {
            p["spire"]["namespace"] = json!("spiffe-agents");
            p["spire"]["smoke"]["namespace"] = json!("spiffe-smoke");
        }
    }))
}

/// Other release, source and values names.
fn other_names(base: &Value) -> Option<Value> {
    Some(with(base, |p| {
        let o = &mut p["opensandbox"];
        o["source"]["name"] = json!("sandbox-chart");
        o["release"]["name"] = json!("sandbox-platform");
        o["release"]["releaseName"] = json!("sbx");
        o["release"]["valuesConfigMap"] = json!("sandbox-platform-values");
        if p.get("kata").is_some() {
            p["kata"]["release"] = json!("kata-runtime-release");
        }
    }))
}

/// The HelmRelease and Helm's release record in namespaces of their own.
fn release_namespaces(base: &Value) -> Option<Value> {
    Some(with(base, |p| {
        p["opensandbox"]["release"]["namespace"] = json!("flux-apps");
        p["opensandbox"]["release"]["targetNamespace"] = json!("helm-releases");
    }))
}

/// Two runc pools and, where the profile has Kata pools, two Kata pools on two runtime classes
/// and two build pools on their build classes (with both shims installed where the profile
/// installs kata-deploy).
fn pools_and_classes(base: &Value) -> Option<Value> {
    let has_kata = base["pools"]["items"].as_array()?.iter().any(|p| p["runtime"] == "kata");
    Some(with(base, |p| {
        let capacity = json!({"bufferMin": 0, "bufferMax": 1, "poolMin": 0, "poolMax": 2});
        let mut items = vec![
            json!({"name": "batch", "runtime": "runc", "capacity": capacity}),
            json!({"name": "interactive", "runtime": "runc", "capacity": capacity}),
        ];
        if has_kata {
            items.push(json!({"name": "vm-clh", "runtime": "kata", "capacity": capacity}));
            items.push(
                json!({"name": "vm-qemu", "runtime": "kata", "runtimeClassName": "kata-qemu", "capacity": capacity}),
            );
            items.push(json!({"name": "build-clh", "runtime": "kata", "builds": true, "capacity": capacity}));
            items.push(json!({"name": "build-qemu", "runtime": "kata", "builds": true,
                              "runtimeClassName": "kata-qemu-build", "capacity": capacity}));
            if p.get("kata").is_some() {
                p["kata"]["shims"] = json!(["clh-runtime-rs", "qemu"]);
            }
        }
        p["pools"]["items"] = json!(items);
    }))
}

/// The layers that can go, gone: the pools layer of a profile without SPIRE; SPIRE (agents, the
/// smoke identity and the section) where it is rendered.
fn components_off(base: &Value) -> Option<Value> {
    let layers = base["layers"].as_array()?;
    let spire = layers.iter().any(|l| l["component"] == "spire-agents");
    Some(with(base, |p| {
        let drop: &[&str] = if spire { &["spire-agents", "spire-smoke"] } else { &["pools"] };
        let gone: Vec<Value> = layers
            .iter()
            .filter(|l| drop.contains(&l["component"].as_str().unwrap_or("")))
            .map(|l| l["name"].clone())
            .collect();
        let kept: Vec<Value> = layers
            .iter()
            .filter(|l| !gone.contains(&l["name"]))
            .map(|l| {
                let mut l = l.clone();
                if let Some(deps) = l["dependsOn"].as_array() {
                    let deps: Vec<Value> = deps.iter().filter(|d| !gone.contains(d)).cloned().collect();
                    l["dependsOn"] = json!(deps);
                }
                l
            })
            .collect();
        p["layers"] = json!(kept);
        if spire {
            p.as_object_mut().unwrap().remove("spire");
        }
    }))
}

/// kata-deploy rendered where the profile has no kata layer, with a Kata pool on its class.
fn components_on(base: &Value) -> Option<Value> {
    let layers = base["layers"].as_array()?;
    if layers.iter().any(|l| l["name"] == "kata") {
        return None;
    }
    Some(with(base, |p| {
        let mut layers = layers.clone();
        layers.insert(0, json!({"name": "kata", "component": "kata"}));
        p["layers"] = json!(layers);
        p["kata"] = json!({"shims": ["clh-runtime-rs"]});
        let items = p["pools"]["items"].as_array_mut().unwrap();
        if !items.iter().any(|i| i["runtime"] == "kata") {
            items.push(json!({"name": "vm", "runtime": "kata",
                              "capacity": {"bufferMin": 0, "bufferMax": 1, "poolMin": 0, "poolMax": 2}}));
        }
    }))
}

/// Chart values beyond osbx's, through `opensandbox.values` (and `kata.values`).
fn extra_values(base: &Value) -> Option<Value> {
    Some(with(base, |p| {
        p["opensandbox"]["values"] = json!({
            "opensandbox-server": {"server": {"nodeSelector": {"osbx.dev/role": "control-plane"}}},
            "opensandbox-controller": {"controller": {"nodeSelector": {"osbx.dev/role": "control-plane"}}},
        });
        if p.get("kata").is_some() {
            p["kata"]["values"] = json!({"podLabels": {"osbx.dev/role": "runtime"}});
        }
    }))
}

/// Every image from one registry mirror (`images.mirror`: Docker Hub under a path of its own,
/// every other registry scoped by its host) with a pull Secret.
fn mirror(base: &Value) -> Option<Value> {
    Some(with(base, |p| {
        p["images"] = json!({
            "mirror": {"docker.io": MIRROR_HUB, "*": MIRROR_ALL},
            "pullSecrets": [MIRROR_PULL_SECRET],
        });
    }))
}

/// The mirror of the `mirror` variant: Docker Hub's images, every other registry's, the pull
/// Secret.
pub const MIRROR_HUB: &str = "mirror.test/hub";
pub const MIRROR_ALL: &str = "mirror.test/all";
pub const MIRROR_PULL_SECRET: &str = "mirror-pull";

/// Variants no chart can honour (the chart would put the control plane or the agents where osbx
/// does not look), each with the field `osbx lint` must name: (label, profile, field).
pub fn refused() -> Vec<(String, Value, String)> {
    let mut out = Vec::new();
    let (_, default) = super::cases::shipped_documents().into_iter().find(|(n, _)| n == "default").expect("default");
    let renamed = renamed_namespaces(&default).expect("renamed");
    for (path, _) in osbx::components::opensandbox::CHART_FACTS {
        let mut values = json!({});
        let mut at = &mut values;
        for k in path.split('.') {
            at = &mut at[k];
        }
        *at = json!(if path.ends_with("configToml") { "[server]\nport = 80\n" } else { "opensandbox-system" });
        let mut p = renamed.clone();
        p["opensandbox"]["values"] = values;
        out.push((format!("{path} over a renamed control plane"), p, format!("opensandbox.values.{path}")));
    }
    let mut p = renamed.clone();
    p["opensandbox"]["values"] = json!({"opensandbox-server": {"server": {"gateway": {"enabled": true}}}});
    out.push((
        "the ingress gateway on with renamed sandboxes".into(),
        p,
        "opensandbox.values.opensandbox-server.server.gateway.enabled".into(),
    ));
    let (_, fresh) = super::cases::shipped_documents().into_iter().find(|(n, _)| n == "fresh-cluster").expect("fresh");
    let mut p = renamed_namespaces(&fresh).expect("renamed");
    p["spire"]["values"] = json!({"spire-agent": {"namespaceOverride": "spire-system"}});
    out.push(("the agents moved by namespaceOverride".into(), p, "spire.values.spire-agent.namespaceOverride".into()));
    let mut p = renamed_namespaces(&fresh).expect("renamed");
    p["spire"]["values"] = json!({"global": {"spire": {"recommendations": {"enabled": true}}}});
    out.push((
        "the agents moved by the recommended namespace layout".into(),
        p,
        "spire.values.global.spire.recommendations.enabled".into(),
    ));
    out
}
