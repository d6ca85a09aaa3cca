//! The template context: the profile as JSON, every layer with its path normalised, and each
//! component's view (see [`crate::components::Component::view`]).

use serde_json::{Value, json};
use tera::Context;

use crate::components;
use crate::profile::{LayerSpec, Profile};

/// Context shared by every template of a profile; `profile` and `layers` only when a template
/// may read them (`read`): a fleet builds a context for each of thousands of clusters.
pub(super) fn base(p: &Profile, read: impl Fn(&str) -> bool) -> Context {
    let mut ctx = Context::new();
    if read("profile") {
        ctx.insert("profile", p);
    }
    ctx.insert("cluster", &p.cluster);
    ctx.insert("images", &p.images);
    if read("layers") {
        ctx.insert("layers", &p.layers.iter().map(layer).collect::<Vec<_>>());
    }
    let site = p.site();
    for c in components::ALL {
        (c.view)(&p.sections, &site, &mut ctx);
    }
    ctx
}

/// One layer with its path normalised.
pub(super) fn layer(l: &LayerSpec) -> Value {
    let mut v = serde_json::to_value(l).unwrap_or(Value::Null);
    if !l.external {
        v["path"] = json!(l.repo_path());
    }
    // What the render adds for sealed Secrets (`secrets.sops`): the files the layer lists and
    // the decryption Secret its Kustomization names.
    v["sealed"] = json!([]);
    v["decryption"] = Value::Null;
    // Flux's health rules for the kinds the layer holds that have no Ready condition.
    v["healthCheckExprs"] = Value::Null;
    // The objects of those kinds Flux health-checks when the layer does not `wait`.
    v["healthChecks"] = Value::Null;
    v
}
