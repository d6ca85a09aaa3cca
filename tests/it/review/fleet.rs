//! A fleet's review: every cluster compared, identical changes folded into one entry naming them.

use serde_json::{Value, json};

use super::{Case, profile};
use crate::support::outputs;

#[test]
fn identical_changes_of_a_fleets_clusters_are_folded_into_one_entry() {
    let mut p = profile(None);
    let case = Case::new(None, &p);
    let fleet = json!({
        "apiVersion": "osbx.dev/v1alpha1",
        "kind": "Fleet",
        "metadata": {"name": "labs"},
        "base": "profile.yaml",
        "clusters": [
            {"name": "lab-a"},
            {"name": "lab-b"},
            {"name": "lab-c", "overrides": {"pools": {"items": [{"name": "pod", "capacity": {"poolMax": 6}}]}}},
        ],
    });
    let fleet_path = case.repo.join("fleet.yaml");
    std::fs::write(&fleet_path, serde_json::to_string_pretty(&fleet).unwrap()).unwrap();
    let out = crate::support::osbx()
        .args(["render", "--fleet"])
        .arg(&fleet_path)
        .arg("--out")
        .arg(&case.repo)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{:?}", outputs(&out));
    case.commit("a fleet");
    // The shared image changes everywhere.
    p["pools"]["defaults"]["image"] = json!("registry.example/code-interpreter:v1.2.0");
    case.set_profile(&p);
    let review = |output: &str| {
        crate::support::osbx()
            .args(["diff", "--base=HEAD", "--no-charts", "-o", output, "--fleet"])
            .arg(&fleet_path)
            .arg("--repo")
            .arg(&case.repo)
            .output()
            .unwrap()
    };
    let out = review("json");
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let r: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(r["clusters"], json!(["lab-a", "lab-b", "lab-c"]));
    let pods: Vec<&Value> =
        r["changes"].as_array().unwrap().iter().filter(|e| e["object"] == "Pool/opensandbox/pod").collect();
    let clusters: Vec<&Value> = pods.iter().map(|e| &e["clusters"]).collect();
    // lab-c's pool has another poolMax: its note differs, so it is an entry of its own.
    assert_eq!(clusters, [&json!(["lab-a", "lab-b"]), &json!(["lab-c"])], "{stdout}");
    let vm: Vec<&Value> =
        r["changes"].as_array().unwrap().iter().filter(|e| e["object"] == "Pool/opensandbox/vm").collect();
    assert_eq!(vm.len(), 1, "{stdout}");
    assert_eq!(vm[0]["clusters"], json!(["lab-a", "lab-b", "lab-c"]));
    // The markdown comment names them in its summary.
    let (stdout, _) = outputs(&review("markdown"));
    assert!(stdout.contains("lab-a, lab-b"), "{stdout}");
}
