//! The template context: the profile as JSON plus the values templates should not compute
//! (defaults that depend on other fields, pools with `pools.defaults` applied).

use serde_json::{Value, json};
use tera::Context;

use crate::profile::{Layer, Profile};

/// Context shared by every template of a profile.
pub(super) fn base(p: &Profile) -> Context {
    let mut ctx = Context::new();
    ctx.insert("profile", p);
    ctx.insert("cluster", &p.cluster);
    ctx.insert("opensandbox", &opensandbox(p));
    ctx.insert("pools", &pools(p));
    ctx.insert("layers", &p.layers.iter().map(layer).collect::<Vec<_>>());
    let kata_layer = p.layers.iter().find(|l| !l.external && l.component == Some(crate::profile::Component::Kata));
    ctx.insert("kataLayer", &kata_layer.map(|l| l.name.clone()));
    if let Some(k) = &p.kata {
        ctx.insert("kata", &kata(k));
    }
    if let Some(s) = &p.spire {
        ctx.insert("spire", &spire(p, s));
    }
    ctx
}

fn kata(k: &crate::profile::Kata) -> Value {
    let mut shims = serde_json::Map::new();
    shims.insert("disableAll".into(), json!(true));
    for s in &k.shims {
        shims.insert(s.clone(), json!({"enabled": true}));
    }
    let mut values = json!({
        "deploymentMode": k.deployment_mode,
        "k8sDistribution": k.k8s_distribution,
        "shims": shims,
        "defaultShim": {"amd64": k.default_shim},
        "runtimeClasses": {"enabled": true, "createDefault": k.create_default_runtime_class},
    });
    if !k.node_selector.is_empty() {
        values["nodeSelector"] = json!(k.node_selector);
    }
    if let Some(extra) = &k.values {
        crate::merge::merge(&mut values, extra);
    }
    let mut v = serde_json::to_value(k).unwrap_or(Value::Null);
    v["chartValues"] = values;
    v["runtimeClasses"] = json!(k.shims.iter().map(|s| crate::profile::Kata::runtime_class(s)).collect::<Vec<_>>());
    v
}

fn spire(p: &Profile, s: &crate::profile::Spire) -> Value {
    let cluster = s.cluster_name.clone().unwrap_or_else(|| p.cluster.name.clone());
    // Agents and the CSI driver only: the server, its controller manager and the OIDC provider
    // run with the existing trust root.
    let mut values = json!({
        "global": {"spire": {"trustDomain": s.trust_domain, "clusterName": cluster}},
        "spire-server": {"enabled": false},
        "spiffe-oidc-discovery-provider": {"enabled": false},
        "spire-agent": {"enabled": true, "server": {"address": s.server.address, "port": s.server.port}},
        "spiffe-csi-driver": {"enabled": true},
    });
    if let Some(extra) = &s.values {
        crate::merge::merge(&mut values, extra);
    }
    let mut v = serde_json::to_value(s).unwrap_or(Value::Null);
    v["chartValues"] = values;
    v["smokeId"] = json!(s.smoke_id());
    v
}

/// One layer with its path normalised.
pub(super) fn layer(l: &Layer) -> Value {
    let mut v = serde_json::to_value(l).unwrap_or(Value::Null);
    if !l.external {
        v["path"] = json!(Profile::layer_path(l));
    }
    v
}

fn opensandbox(p: &Profile) -> Value {
    let o = &p.opensandbox;
    let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
    let cp = &o.namespaces.control_plane;
    v["releaseNamespace"] = json!(o.release.namespace.as_ref().unwrap_or(cp));
    v["targetNamespace"] = json!(o.release.target_namespace.as_ref().unwrap_or(cp));
    v["releaseName"] = json!(o.release.release_name.as_ref().unwrap_or(&o.release.name));
    v
}

fn pools(p: &Profile) -> Vec<Value> {
    let ns = &p.opensandbox.namespaces.sandbox;
    p.effective_pools()
        .into_iter()
        .map(|e| {
            let mut v = serde_json::to_value(&e.template).unwrap_or(Value::Null);
            let pool = e.pool;
            v["name"] = json!(pool.name);
            v["namespace"] = json!(ns);
            v["runtime"] = json!(pool.runtime.as_str());
            v["runtimeClassName"] = json!(e.runtime_class_name);
            v["containerName"] = json!(e.template.container_name.as_deref().unwrap_or("sandbox"));
            v["capacity"] = serde_json::to_value(pool.capacity).unwrap_or(Value::Null);
            v["scaleStrategy"] = serde_json::to_value(&pool.scale_strategy).unwrap_or(Value::Null);
            v["updateStrategy"] = serde_json::to_value(&pool.update_strategy).unwrap_or(Value::Null);
            v["recycleStrategy"] = serde_json::to_value(&pool.recycle_strategy).unwrap_or(Value::Null);
            v
        })
        .collect()
}
