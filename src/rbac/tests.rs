//! The roles, from the operations of each purpose.

use super::*;
use crate::commands::renderer;

fn rendered(profile: &str) -> (Profile, Vec<Layer>) {
    let loaded = crate::profile::load(&crate::profile::ProfileSource::Embedded(profile.into())).unwrap();
    let rendered = renderer(None).unwrap().render(&loaded).unwrap();
    let layers = deploy::layers(&loaded.profile, &rendered);
    (loaded.profile, layers)
}

fn objects(profile: &str, purpose: Purpose, prune: bool) -> Vec<Value> {
    let (profile, layers) = rendered(profile);
    let opts = Options {
        purpose,
        prune,
        decryption_secret: false,
        in_cluster: false,
        serving: false,
        subjects: vec![Subject::ServiceAccount("ci".into(), "osbx".into())],
    };
    roles(&profile, &layers, &needs(&profile, &layers, &opts), &opts)
}

fn rule<'a>(role: &'a Value, resource: &str, named: bool) -> &'a Value {
    role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resources"][0] == resource && r.get("resourceNames").is_some() == named)
        .unwrap_or_else(|| panic!("no {resource} rule (named: {named}) in {role}"))
}

/// The names of `resource` that `role`'s rules restrict `verb` to, sorted.
fn named<'a>(role: &'a Value, resource: &str, verb: &str) -> Vec<&'a str> {
    let mut names: Vec<&str> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["resources"][0] == resource && r["verbs"].as_array().unwrap().contains(&json!(verb)))
        .flat_map(|r| r["resourceNames"].as_array().into_iter().flatten().filter_map(Value::as_str))
        .collect();
    names.sort_unstable();
    names
}

fn role<'a>(objects: &'a [Value], kind: &str, ns: Option<&str>) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["namespace"].as_str() == ns)
        .unwrap_or_else(|| panic!("no {kind} {ns:?}"))
}

#[test]
fn apply_creates_and_patches_named_objects_and_owns_its_inventory() {
    let objects = objects("default", Purpose::Apply, false);
    let flux = role(&objects, "Role", Some("flux-system"));
    assert_eq!(rule(flux, "configmaps", true)["resourceNames"], json!(["osbx-inventory-default-sandbox"]));
    assert_eq!(rule(flux, "configmaps", true)["verbs"], json!(["get", "patch"]));
    assert_eq!(rule(flux, "configmaps", false)["verbs"], json!(["create"]), "create cannot be restricted");
    let cluster = role(&objects, "ClusterRole", None);
    let rules = cluster["rules"].as_array().unwrap();
    let get = json!({"apiGroups": [""], "resources": ["namespaces"],
        "resourceNames": ["flux-system", "opensandbox", "opensandbox-system"], "verbs": ["get"]});
    // Waits read, then watch, what the apply wrote.
    let patch = json!({"apiGroups": [""], "resources": ["namespaces"],
        "resourceNames": ["opensandbox", "opensandbox-system"], "verbs": ["watch", "patch"]});
    assert!(rules.contains(&get) && rules.contains(&patch), "{cluster}");
    assert_eq!(rule(cluster, "namespaces", false)["verbs"], json!(["create"]));
    let system = role(&objects, "Role", Some("opensandbox-system"));
    assert_eq!(rule(system, "secrets", true)["resourceNames"], json!(["opensandbox-api-key"]));
    let text = serde_json::to_string(&objects).unwrap();
    assert!(!text.contains("\"delete\"") && !text.contains("services/proxy"), "apply alone: {text}");
    let namespaces: Vec<&Value> = objects.iter().take_while(|o| o["kind"] == "Namespace").collect();
    assert_eq!(namespaces.len(), 2, "the rendered namespaces, so that the Roles can be created: {objects:?}");
    let binding = role(&objects, "RoleBinding", Some("flux-system"));
    assert_eq!(binding["subjects"], json!([{"kind": "ServiceAccount", "name": "osbx", "namespace": "ci"}]));
}

#[test]
fn verify_reaches_the_server_through_the_proxy_and_probes_in_any_namespace() {
    let objects = objects("default", Purpose::Verify, false);
    let system = role(&objects, "Role", Some("opensandbox-system"));
    let proxy = rule(system, "services/proxy", true);
    assert_eq!(proxy["resourceNames"], json!(["opensandbox-server:80"]));
    assert_eq!(proxy["verbs"], json!(["get", "create", "delete"]));
    let cluster = role(&objects, "ClusterRole", None);
    assert_eq!(rule(cluster, "pods", false)["verbs"], json!(["get", "create", "deletecollection"]));
    assert_eq!(rule(cluster, "namespaces", false)["verbs"], json!(["list", "create", "delete"]));
    // Pods in the sandbox namespace are covered by the cluster-wide grant, except listing.
    let sandbox = role(&objects, "Role", Some("opensandbox"));
    assert_eq!(rule(sandbox, "pods", false)["verbs"], json!(["list"]));
}

#[test]
fn prune_deletes_any_object_of_the_rendered_kinds() {
    let objects = objects("default", Purpose::Apply, true);
    let sandbox = role(&objects, "Role", Some("opensandbox"));
    assert_eq!(rule(sandbox, "pools", false)["verbs"], json!(["get", "create", "delete"]));
    assert_eq!(rule(sandbox, "pools", true)["verbs"], json!(["watch", "patch"]));
}

#[test]
fn rollout_asks_the_root_source_to_fetch_and_watches_what_it_waits_for() {
    let rollout = objects("default", Purpose::Rollout, false);
    let flux = role(&rollout, "Role", Some("flux-system"));
    let sources = rule(flux, "gitrepositories", true);
    assert_eq!(sources["resourceNames"], json!(["flux-system"]), "{sources}");
    assert_eq!(sources["verbs"], json!(["get", "watch", "patch"]));
    assert!(rule(flux, "kustomizations", true)["verbs"].as_array().unwrap().contains(&json!("watch")));
    // `all` is apply, diff and verify: no patch of the cluster's root source.
    let all = objects("default", Purpose::All, false);
    let flux = role(&all, "Role", Some("flux-system"));
    let named = flux["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resources"] == json!(["gitrepositories"]) && r.get("resourceNames").is_some());
    assert!(named.is_none_or(|r| !r["resourceNames"].as_array().unwrap().contains(&json!("flux-system"))), "{flux}");
}

#[test]
fn discovery_and_access_reviews_are_in_every_cluster_role() {
    for purpose in [Purpose::Apply, Purpose::Diff, Purpose::Verify, Purpose::Rollout, Purpose::All] {
        let objects = objects("runc-only", purpose, false);
        let cluster = role(&objects, "ClusterRole", None);
        let rules = cluster["rules"].as_array().unwrap();
        assert!(rules.contains(&json!({"nonResourceURLs": ["/api", "/apis", "/version"], "verbs": ["get"]})));
        assert_eq!(rule(cluster, "selfsubjectaccessreviews", false)["verbs"], json!(["create"]));
    }
}

/// The acceptance layer's ServiceAccount is bound to exactly what `osbx rbac --for verify
/// --in-cluster` prints for it: one derivation. The in-cluster roles publish the report and
/// never read the acceptance layer's own Kustomization; the namespaces are the other layers'.
#[test]
fn the_acceptance_layer_binds_exactly_the_in_cluster_verify_roles() {
    let loaded = crate::profile::load(&crate::profile::ProfileSource::Embedded("fresh-cluster".into())).unwrap();
    let rendered = renderer(None).unwrap().render(&loaded).unwrap();
    let in_layer: Vec<Value> = rendered
        .files
        .iter()
        .filter(|f| f.path == "platform/acceptance/rbac.yaml")
        .flat_map(|f| f.objects.iter().map(|o| o.value.clone()))
        .filter(|o| o["kind"] != "ServiceAccount")
        .collect();
    let profile = &loaded.profile;
    let layers = deploy::layers(profile, &rendered);
    let opts = Options {
        purpose: Purpose::Verify,
        prune: false,
        decryption_secret: false,
        in_cluster: true,
        serving: false,
        subjects: vec![Subject::ServiceAccount("osbx-acceptance".into(), "osbx-acceptance".into())],
    };
    let printed: Vec<Value> = roles(profile, &layers, &needs(profile, &layers, &opts), &opts)
        .into_iter()
        .filter(|o| o["kind"] != "Namespace")
        .collect();
    let serving = Options {
        serving: true,
        subjects: vec![Subject::ServiceAccount("osbx-acceptance".into(), "osbx-acceptance-serve".into())],
        ..opts.clone()
    };
    let printed_serving: Vec<Value> = roles(profile, &layers, &needs(profile, &layers, &serving), &serving)
        .into_iter()
        .filter(|o| o["kind"] != "Namespace")
        .collect();
    assert!(!in_layer.is_empty());
    assert_eq!(in_layer, [printed.clone(), printed_serving.clone()].concat());
    // The serving pod's identity creates and deletes nothing but its report and its Events (and
    // asks about its own access).
    for r in &printed_serving {
        for rule in r["rules"].as_array().into_iter().flatten() {
            let verbs: Vec<&str> = rule["verbs"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
            let resources: Vec<&str> =
                rule["resources"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            assert!(!verbs.iter().any(|v| v.starts_with("delete")), "the serving pod deletes: {rule}");
            if verbs.contains(&"create") {
                assert!(
                    resources.iter().all(|x| matches!(*x, "events" | "configmaps" | "selfsubjectaccessreviews")),
                    "the serving pod creates: {rule}"
                );
            }
        }
    }
    // The serving pod patches its report only; it reads the Job's and the CronJob's reports
    // beside it, which only their identity writes (the gate's verdict).
    let serve_own = role(&printed_serving, "Role", Some("osbx-acceptance"));
    let (report, verdicts) = ("osbx-acceptance-report", "osbx-acceptance-report-verdicts");
    assert_eq!(named(serve_own, "configmaps", "patch"), [report]);
    assert_eq!(named(serve_own, "configmaps", "get"), [report, verdicts]);
    let flux = role(&printed, "Role", Some("flux-system"));
    let names = &rule(flux, "kustomizations", true)["resourceNames"];
    assert!(names.as_array().unwrap().contains(&json!("opensandbox-pools")), "{names}");
    assert!(!names.as_array().unwrap().contains(&json!("acceptance")), "{names}");
    let own = role(&printed, "Role", Some("osbx-acceptance"));
    assert_eq!(named(own, "configmaps", "patch"), [report, verdicts]);
    assert_eq!(named(own, "configmaps", "get"), [report]);
    assert!(rule(own, "events", false)["verbs"].as_array().unwrap().contains(&json!("create")), "{own}");
    // Least privilege in the cluster (issue 54, item 1): no ClusterRole creates or deletes a
    // namespace or a pod, or deletes a collection of anything; pods are created in the layer's
    // probe namespace (and the SPIFFE smoke namespace, for the pod under its ServiceAccount),
    // through Roles there, and nowhere else.
    for r in printed.iter().filter(|o| o["kind"] == "ClusterRole") {
        for rule in r["rules"].as_array().unwrap() {
            let verbs: Vec<&str> = rule["verbs"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
            let resources: Vec<&str> =
                rule["resources"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            assert!(!verbs.contains(&"deletecollection"), "cluster-wide deletecollection: {rule}");
            for resource in ["namespaces", "pods"] {
                if resources.contains(&resource) {
                    assert!(
                        !verbs.iter().any(|v| matches!(*v, "create" | "delete")),
                        "cluster-wide {resource}: {rule}"
                    );
                }
            }
        }
    }
    let creating_pods: Vec<&str> = printed
        .iter()
        .filter(|o| o["kind"] == "Role")
        .filter(|o| {
            o["rules"].as_array().unwrap().iter().any(|r| {
                r["resources"].as_array().into_iter().flatten().any(|x| x == "pods")
                    && r["verbs"].as_array().unwrap().iter().any(|v| v == "create")
            })
        })
        .map(|o| o["metadata"]["namespace"].as_str().unwrap())
        .collect();
    let smoke = profile.spiffe_smoke().unwrap().namespace;
    assert_eq!(creating_pods, ["osbx-acceptance-probes", smoke.as_str()], "{printed:#?}");
    // The operator's verify (not in the cluster) publishes nothing.
    let outside = Options { in_cluster: false, ..opts };
    let needs_outside = needs(profile, &layers, &outside);
    assert!(!needs_outside.iter().any(|n| format!("{n:?}").contains("osbx-acceptance-report")));
}

/// The acceptance layer's pods run as the identities derived here: the Job as `<name>`, the
/// serving pod as `<name>-serve` with `--read-only`; each mounts a token of its own that expires
/// 600 s after its last renewal; a NetworkPolicy admits traffic to them on the metrics port only.
#[test]
fn the_acceptance_pods_hold_short_lived_tokens_of_their_own_identities() {
    let loaded = crate::profile::load(&crate::profile::ProfileSource::Embedded("fresh-cluster".into())).unwrap();
    let rendered = renderer(None).unwrap().render(&loaded).unwrap();
    let objects: Vec<Value> =
        rendered.objects().into_iter().filter(|o| o.layer == "acceptance").map(|o| o.object.value).collect();
    let of = |kind: &str| objects.iter().find(|o| o["kind"] == kind).unwrap_or_else(|| panic!("no {kind}"));
    for (kind, account, read_only) in [("Job", "osbx-acceptance", false), ("Deployment", "osbx-acceptance-serve", true)]
    {
        let spec = &of(kind)["spec"]["template"]["spec"];
        assert_eq!(spec["serviceAccountName"], account, "{kind}");
        assert_eq!(spec["automountServiceAccountToken"], false, "{kind}");
        let token = spec["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "token").unwrap();
        assert_eq!(token["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"], 600, "{kind}");
        let args: Vec<&str> =
            spec["containers"][0]["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert_eq!(args.contains(&"--read-only"), read_only, "{kind}: {args:?}");
    }
    let accounts: Vec<&str> = objects
        .iter()
        .filter(|o| o["kind"] == "ServiceAccount")
        .map(|o| {
            assert_eq!(o["automountServiceAccountToken"], false, "{o}");
            o["metadata"]["name"].as_str().unwrap()
        })
        .collect();
    assert_eq!(accounts, ["osbx-acceptance", "osbx-acceptance-serve"]);
    let policy = of("NetworkPolicy");
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    assert_eq!(policy["spec"]["ingress"], json!([{"ports": [{"protocol": "TCP", "port": 9464}]}]));
    assert_eq!(policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"], "osbx-acceptance");
}

/// A `--read-only` run (the serving pod) runs the checks whose operations only read: the API
/// reads and the server's health through the proxy, never a probe pod, a sandbox or a dry run.
#[test]
fn a_read_only_run_runs_only_the_checks_that_read() {
    let loaded = crate::profile::load(&crate::profile::ProfileSource::Embedded("fresh-cluster".into())).unwrap();
    let reach = crate::verify::Reach {
        probes: Some("osbx-acceptance-probes".into()),
        read_only: true,
        ..crate::verify::Reach::default()
    };
    let ids = crate::verify::session::read_only_ids(&loaded.profile, &crate::verify::Selection::default(), &reach);
    assert_eq!(
        ids,
        [
            "flux.layers",
            "nodes.ready",
            "kata.runtimeclass",
            "kata.annotations",
            "opensandbox.server",
            "opensandbox.pools"
        ]
    );
    let ops = crate::verify::session::operations(&loaded.profile, &[], &crate::verify::Selection::default(), &reach);
    assert!(ops.iter().all(crate::cluster::operation::Operation::changes_nothing), "{ops:?}");
}
