//! `osbx schema`: the JSON Schema of the profile and fleet formats, committed in `docs/` and
//! named by the modeline of every shipped profile.

use serde_json::Value;

use crate::support::{osbx, outputs, root, shipped_profiles};

fn schema(fleet: bool) -> Value {
    let mut cmd = osbx();
    cmd.arg("schema");
    if fleet {
        cmd.arg("--fleet");
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", outputs(&out).1);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Every reason `instance` fails `schema`, one line each.
fn violations(schema: &Value, instance: &Value) -> Vec<String> {
    let validator = jsonschema::validator_for(schema).expect("a valid JSON Schema");
    validator.iter_errors(instance).map(|e| format!("{}: {e}", e.instance_path())).collect()
}

/// `docs/*.schema.json` is what `osbx schema` prints (refreshed with `OSBX_UPDATE_EXAMPLES=1`).
#[test]
fn the_committed_schemas_are_up_to_date() {
    for (file, fleet) in [("docs/profile.schema.json", false), ("docs/fleet.schema.json", true)] {
        let printed = serde_json::to_string_pretty(&schema(fleet)).unwrap() + "\n";
        let path = root().join(file);
        if std::env::var_os("OSBX_UPDATE_EXAMPLES").is_some() {
            std::fs::write(&path, &printed).unwrap();
        }
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            printed,
            "{file} is out of date: OSBX_UPDATE_EXAMPLES=1 tests/run"
        );
    }
}

#[test]
fn the_schema_has_descriptions_enums_defaults_and_required_fields() {
    let s = schema(false);
    let defs = &s["$defs"];
    assert!(s["description"].as_str().unwrap().contains("smallest useful profile"), "{}", s["description"]);
    assert_eq!(s["required"], serde_json::json!(["cluster"]));
    assert_eq!(defs["TargetCluster"]["required"], serde_json::json!(["name"]));
    assert_eq!(defs["Pool"]["required"], serde_json::json!(["name", "runtime", "capacity"]));
    assert_eq!(
        defs["Component"]["enum"],
        serde_json::json!([
            "opensandbox",
            "pools",
            "kata",
            "spire-agents",
            "spire-smoke",
            "sandbox-quota",
            "acceptance"
        ])
    );
    let runtimes: Vec<&Value> = defs["Runtime"]["oneOf"].as_array().unwrap().iter().map(|v| &v["const"]).collect();
    assert_eq!(runtimes, [&serde_json::json!("runc"), &serde_json::json!("kata")], "each with its description");
    assert_eq!(defs["Kata"]["properties"]["shims"]["default"], serde_json::json!(["clh-runtime-rs"]));
    assert_eq!(defs["Pool"]["additionalProperties"], false, "unknown fields are errors, for editors too");
    let described = defs["Capacity"]["properties"]["bufferMin"]["description"].as_str().unwrap();
    assert_eq!(described, "Minimum idle pods.");
}

#[test]
fn every_shipped_profile_and_the_example_fleet_validate_and_carry_the_modeline() {
    let profile_schema = schema(false);
    for name in shipped_profiles() {
        let text = std::fs::read_to_string(root().join(format!("profiles/{name}.yaml"))).unwrap();
        assert!(
            text.starts_with("# yaml-language-server: $schema=../docs/profile.schema.json\n"),
            "{name}: no modeline"
        );
        assert_eq!(violations(&profile_schema, &yaml(&text)), Vec::<String>::new(), "{name}");
    }
    let text = std::fs::read_to_string(root().join("examples/fleet.yaml")).unwrap();
    assert!(text.starts_with("# yaml-language-server: $schema=../docs/fleet.schema.json\n"));
    assert_eq!(violations(&schema(true), &yaml(&text)), Vec::<String>::new());
}

#[test]
fn invalid_profiles_fail_the_schema() {
    let s = schema(false);
    let cases = [
        ("no cluster", "pools: {items: []}\n"),
        ("an unknown field", "cluster: {name: a, nmae: b}\n"),
        (
            "a wrong type",
            "cluster: {name: a}\npools: {items: [{name: p, runtime: runc, capacity: {bufferMin: lots, bufferMax: 1, poolMin: 0, poolMax: 1}}]}\n",
        ),
        (
            "an unknown runtime",
            "cluster: {name: a}\npools: {items: [{name: p, runtime: gvisor, capacity: {bufferMin: 0, bufferMax: 1, poolMin: 0, poolMax: 1}}]}\n",
        ),
        ("a pool without capacity", "cluster: {name: a}\npools: {items: [{name: p, runtime: runc}]}\n"),
        ("an unknown component", "cluster: {name: a}\nlayers: [{name: x, component: cert-manager}]\n"),
        ("a SPIFFE smoke without id", "cluster: {name: a}\nverify: {spiffe: {namespace: s}}\n"),
    ];
    for (what, text) in cases {
        assert!(!violations(&s, &yaml(text)).is_empty(), "{what} passed the schema:\n{text}");
    }
    assert!(
        !violations(&schema(true), &yaml("apiVersion: osbx.dev/v1alpha1\nkind: Fleet\nbase: default\n")).is_empty()
    );
    // The smallest useful profile is valid.
    let min = "cluster: {name: a}\npools: {items: [{name: p, runtime: runc, capacity: {bufferMin: 0, bufferMax: 1, poolMin: 0, poolMax: 1}}]}\n";
    assert_eq!(violations(&s, &yaml(min)), Vec::<String>::new());
}
