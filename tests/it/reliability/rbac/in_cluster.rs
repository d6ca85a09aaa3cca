//! Least privilege in the cluster: the roles `osbx rbac --for verify --in-cluster` prints (the
//! roles the acceptance layer binds its ServiceAccount to: one derivation, unit-tested in
//! `rbac::tests`) let an identity holding nothing else run the layer's checks and publish their
//! report; and without any single permission of them, verify's preflight stops before a check
//! runs and names it. The identity here is a user bound to the printed roles (the real API server
//! authorizes a ServiceAccount's requests through the same RBAC rules); the ServiceAccount itself
//! runs the Job on the real node (`node::acceptance`).

use super::*;

const NS: &str = "rb-acc";
const REPORT: &str = "rb-acc/rb-acceptance-report";

/// The rb profile with an acceptance layer after the pools, which runs every check that does not
/// need the real OpenSandbox server.
fn with_acceptance() -> TestProfile {
    profile(&["pod-a", "vm-a"]).acceptance(json!({
        "image": "registry.example.org/osbx:test", "namespace": NS, "name": "rb-acceptance",
        "skip": NEEDS_THE_SERVER.split(',').collect::<Vec<_>>()}))
}

/// The namespace the acceptance layer renders for its runs' probe pods (the default).
const PROBES: &str = "osbx-acceptance-probes";

/// What the acceptance layer's Job runs (its `--skip` as the layer renders it), for `revision`.
fn in_cluster_verify(revision: &str) -> Vec<String> {
    args(&[
        "verify",
        "--publish",
        REPORT,
        "--revision",
        revision,
        "--probe-namespace",
        PROBES,
        "--skip",
        NEEDS_THE_SERVER,
        // As the layer's Job runs (its pod's downward API): a run of every selected check.
        "--job-name",
        "rb-acceptance",
        "--job-uid",
        "6f1c2a9e-0000-4000-8000-000000000001",
    ])
}

/// Whether the bound identity may `verb` `resource` (`name`) in `namespace` (`None`: across
/// the cluster), as the real API server's authorizer answers.
async fn may(client: &kube::Client, verb: &str, resource: &str, namespace: Option<&str>, name: Option<&str>) -> bool {
    may_in(client, "", verb, resource, namespace, name).await
}

/// [`may`] for a resource of API group `group`.
async fn may_in(
    client: &kube::Client,
    group: &str,
    verb: &str,
    resource: &str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> bool {
    let spec = SubjectAccessReviewSpec {
        resource_attributes: Some(ResourceAttributes {
            group: Some(group.into()),
            verb: Some(verb.into()),
            resource: Some(resource.into()),
            namespace: namespace.map(str::to_owned),
            name: name.map(str::to_owned),
            ..ResourceAttributes::default()
        }),
        ..SubjectAccessReviewSpec::default()
    };
    user_may_do(client, USER, spec).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_cluster_roles_are_enough_to_verify_and_publish_and_each_permission_is_needed() {
    let world = World::start().await;
    let client = &world.client;
    with_acceptance().write_to(world.dir.path());
    // The platform, applied by its admin (Flux's part played by the stand-in controllers; no
    // wait: nothing here runs the acceptance layer's Job, whose run this test makes itself).
    let out = world.osbx_as_admin(&["apply", "--no-wait"], true).await;
    assert_eq!(out.status.code(), Some(0), "apply: {}{}", outputs(&out).0, outputs(&out).1);

    let objects = world.rbac(&["--for", "verify", "--in-cluster"]).await;
    let role_names: Vec<&str> = objects
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    assert!(role_names.iter().all(|n| *n == "osbx-rb-rb-acceptance"), "{role_names:?}");
    let atoms = grant_only(client, &objects).await;
    let publishes = |verb: &str, resource: &str| {
        atoms.iter().any(|a| {
            a.verb == verb
                && matches!(&a.target, Target::Resource { resource: r, .. } if r == resource)
                && objects[a.role]["metadata"]["namespace"] == NS
        })
    };
    assert!(publishes("patch", "configmaps") && publishes("create", "events"), "{atoms:?}");
    // Nothing beyond the run (issue 54, item 1), as the real authorizer answers for this identity:
    // no namespace created or deleted, pods created in the probe namespace (and the SPIFFE smoke
    // namespace, under its ServiceAccount) and nowhere else, no Secret but the API key's read,
    // no collection deleted outside those namespaces.
    for verb in ["create", "delete"] {
        assert!(!may(client, verb, "namespaces", None, Some("kube-system")).await, "{verb} namespaces");
        assert!(!may(client, verb, "namespaces", None, Some(PROBES)).await, "{verb} namespaces");
    }
    assert!(may(client, "create", "pods", Some(PROBES), None).await, "the probes' pods");
    for ns in ["kube-system", NS, "rb-system", "default"] {
        assert!(!may(client, "create", "pods", Some(ns), None).await, "pods in {ns}");
        assert!(!may(client, "deletecollection", "pods", Some(ns), None).await, "pods in {ns}");
        assert!(!may(client, "get", "secrets", Some(ns), Some("some-other-secret")).await, "a Secret in {ns}");
    }
    assert!(!may(client, "create", "pods", None, None).await, "pods anywhere");
    assert!(!may(client, "list", "secrets", None, None).await, "Secrets anywhere");
    // No user's sandbox deleted: the in-cluster run leaves its sandboxes to expire.
    for verb in ["delete", "deletecollection"] {
        assert!(
            !may_in(client, "sandbox.opensandbox.io", verb, "batchsandboxes", Some("rb-sbx"), None).await,
            "{verb}"
        );
    }
    // Flux's objects, the nodes, the Pools, the API key's Secret, discovery and reviews: one by one.
    assert!(atoms.len() > 15, "{atoms:?}");

    // Each permission alone: the in-cluster run stops in preflight, and publishes nothing.
    prove(&world, &discovery(client).await, &objects, &atoms, |_| vec![(in_cluster_verify("r1"), false)]).await;
    let reports = Api::<ConfigMap>::namespaced(client.clone(), NS);
    assert!(reports.get_opt("rb-acceptance-report").await.unwrap().is_none(), "nothing published");

    // With all of them: the run passes and publishes its report at its revision.
    let args = in_cluster_verify("r1");
    let out = world.osbx(&args.iter().map(String::as_str).collect::<Vec<_>>(), false).await;
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "verify: {stdout}{stderr}");
    assert_eq!(stdout.lines().last(), Some("Ready"), "{stdout}");
    let report = reports.get("rb-acceptance-report").await.unwrap();
    let data = report.data.unwrap_or_default();
    let published: Value = serde_json::from_str(&data["report.json"]).unwrap();
    // A Job's run (the downward API's names, as the rendered Job gives them): its report also
    // beside the report, where the gate reads it.
    let verdicts = reports.get("rb-acceptance-report-verdicts").await.unwrap().data.unwrap_or_default();
    let of_job: Value = serde_json::from_str(&verdicts["job.json"]).unwrap();
    assert_eq!(of_job["run"], published["run"], "{of_job}");
    assert!(!data.contains_key("job.json"), "{data:?}");
    assert_eq!((published["revision"].as_str(), published["ready"].as_bool()), (Some("r1"), Some(true)), "{published}");
    let checks = published["checks"].as_array().unwrap();
    assert!(checks.iter().any(|c| c["id"] == "opensandbox.pools"), "{published}");
    assert!(checks.iter().all(|c| !c["id"].as_str().unwrap().starts_with("opensandbox.exec")), "{published}");

    // The serving pod's identity (`--serving`), alone: it reads what its checks read and
    // publishes its report; it creates no pod anywhere, no namespace, reads no other Secret and
    // deletes nothing.
    let serving = world.rbac(&["--for", "verify", "--in-cluster", "--serving"]).await;
    for obj in &serving {
        apply(client, obj).await;
    }
    for binding in objects.iter().filter(|o| o["kind"].as_str().is_some_and(|k| k.ends_with("RoleBinding"))) {
        let (api, name) = cluster::api_for(client, binding).await;
        api.delete(&name, &DeleteParams::default()).await.unwrap();
    }
    let start = Instant::now();
    while may(client, "create", "pods", Some(PROBES), None).await {
        assert!(start.elapsed() < Duration::from_secs(10), "the Job's bindings are still in effect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(may(client, "patch", "configmaps", Some(NS), Some("rb-acceptance-report")).await, "its report");
    // The Job's and the CronJob's reports, which the gate trusts: read, never written.
    let verdicts = Some("rb-acceptance-report-verdicts");
    assert!(may(client, "get", "configmaps", Some(NS), verdicts).await, "the other checks' verdicts");
    for verb in ["patch", "update", "delete"] {
        assert!(!may(client, verb, "configmaps", Some(NS), verdicts).await, "serving: {verb} the Job's report");
    }
    assert!(may(client, "list", "nodes", None, None).await, "what its checks read (nodes.ready)");
    for ns in ["kube-system", NS, PROBES, "rb-system", "rb-sbx", "rb-spire", "default"] {
        assert!(!may(client, "create", "pods", Some(ns), None).await, "serving: pods in {ns}");
        for verb in ["delete", "deletecollection"] {
            assert!(!may(client, verb, "pods", Some(ns), None).await, "serving: {verb} pods in {ns}");
            assert!(!may(client, verb, "configmaps", Some(ns), None).await, "serving: {verb} configmaps in {ns}");
        }
        assert!(!may(client, "get", "secrets", Some(ns), Some("some-other-secret")).await, "serving: a Secret in {ns}");
        assert!(!may(client, "create", "serviceaccounts", Some(ns), None).await, "serving: a ServiceAccount in {ns}");
    }
    for verb in ["create", "delete"] {
        assert!(!may(client, verb, "namespaces", None, Some(PROBES)).await, "serving: {verb} namespaces");
    }
    assert!(!may(client, "create", "pods", None, None).await, "serving: pods anywhere");
    assert!(!may(client, "list", "secrets", None, None).await, "serving: Secrets anywhere");
    assert!(
        !may_in(client, "sandbox.opensandbox.io", "create", "batchsandboxes", Some("rb-sbx"), None).await,
        "serving: sandboxes"
    );
}
