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
    ctx
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
