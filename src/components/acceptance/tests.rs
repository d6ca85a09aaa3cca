//! The acceptance layer as rendered: its rules, names, revision, criteria, CronJob and probe
//! namespace.

use serde_json::{Value, json};

/// fresh-cluster with `over` merged into it.
fn fresh(over: &Value) -> Result<crate::profile::LoadedProfile, String> {
    let (_, text) = crate::profile::embedded_text("fresh-cluster").unwrap();
    let mut doc: Value = serde_saphyr::from_str(&text).unwrap();
    crate::merge::merge(&mut doc, over);
    crate::profile::from_value("fresh-cluster", &doc).map_err(|e| format!("{e:?}"))
}

fn layer(loaded: &crate::profile::LoadedProfile) -> Vec<crate::object::Object> {
    let rendered = crate::commands::renderer(None).unwrap().render(loaded).unwrap();
    rendered.objects().into_iter().filter(|o| o.layer == "acceptance").map(|o| o.object).collect()
}

fn find<'a>(objects: &'a [crate::object::Object], kind: &str) -> Option<&'a crate::object::Object> {
    objects.iter().find(|o| o.id.gvk.kind == kind)
}

#[test]
fn the_layer_must_come_after_every_other_and_wait() {
    let layers = |deps: Value, wait: bool| {
        let (_, text) = crate::profile::embedded_text("fresh-cluster").unwrap();
        let doc: Value = serde_saphyr::from_str(&text).unwrap();
        let mut layers = doc["layers"].clone();
        let last = layers.as_array_mut().unwrap().last_mut().unwrap();
        last["dependsOn"] = deps;
        last["wait"] = json!(wait);
        json!({"layers": layers})
    };
    let e = fresh(&layers(json!(["opensandbox-pools"]), true)).unwrap_err();
    assert!(e.contains("add spire-smoke to its dependsOn"), "{e}");
    let e = fresh(&layers(json!(["opensandbox-pools", "spire-smoke"]), false)).unwrap_err();
    assert!(e.contains("leave `wait` true"), "{e}");
    let e = fresh(&json!({"acceptance": {"image": " ", "interval": "often", "port": 80}})).unwrap_err();
    for field in ["acceptance.image", "acceptance.interval", "acceptance.port"] {
        assert!(e.contains(field), "{field}: {e}");
    }
    assert!(fresh(&json!({})).is_ok());
}

/// The Job's revision is a digest of the other layers and of the criteria: a change to any of
/// them, or to the `verify` or `acceptance` section alone, re-creates the Job (a new spec,
/// with Flux's `force`) and restarts the serving pod (its pod template carries it too).
#[test]
fn the_job_changes_with_every_other_layer_and_flux_may_re_create_it() {
    let revision = |over: Value| {
        let loaded = fresh(&over).unwrap();
        let objects = layer(&loaded);
        let job = find(&objects, "Job").unwrap();
        assert_eq!(job.value["metadata"]["annotations"]["kustomize.toolkit.fluxcd.io/force"], "enabled");
        let a = loaded.profile.sections.acceptance.as_ref().unwrap();
        a.revision_in(objects.iter()).unwrap()
    };
    let base = revision(json!({}));
    assert_eq!(base.len(), 16);
    assert_ne!(revision(json!({"pools": {"defaults": {"imagePullPolicy": "Always"}}})), base);
    assert_ne!(revision(json!({"opensandbox": {"controller": {"replicas": 2}}})), base);
    let criteria = |over: Value| {
        let loaded = fresh(&over).unwrap();
        loaded.profile.sections.acceptance.as_ref().unwrap().criteria(&loaded.profile.verify)
    };
    let base_criteria = criteria(json!({}));
    for over in [
        json!({"acceptance": {"interval": "5m"}}),
        json!({"acceptance": {"image": "registry.example.org/osbx:fixed"}}),
        json!({"acceptance": {"skip": ["spiffe"]}}),
        json!({"verify": {"probeDeadlineSeconds": 61}}),
        json!({"verify": {"workload": {"buildLimitSeconds": 600}}}),
    ] {
        assert_ne!(revision(over.clone()), base, "{over}");
        assert_ne!(criteria(over.clone()), base_criteria, "{over}");
    }
    // The serving pod restarts with the criteria: its template carries the revision.
    let loaded = fresh(&json!({"verify": {"probeDeadlineSeconds": 61}})).unwrap();
    let objects = layer(&loaded);
    let serve = find(&objects, "Deployment").unwrap();
    let annotations = &serve.value["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(
        annotations[super::REVISION_ANNOTATION].as_str(),
        Some(revision(json!({"verify": {"probeDeadlineSeconds": 61}})).as_str())
    );
    assert_eq!(criteria(json!({})), base_criteria, "the digest is stable");
}

/// A selection of checks that names no check of the profile, or selects none, is refused
/// where the profile says it (`file:line:column`, the field), naming the checks there are.
#[test]
fn a_selection_naming_no_check_is_refused_at_its_place() {
    let (_, text) = crate::profile::embedded_text("fresh-cluster").unwrap();
    let render = |extra: &str| {
        let text = text.replace("acceptance:\n", &format!("acceptance:\n{extra}"));
        assert!(text.contains(extra), "fresh-cluster has an acceptance section");
        let loaded = crate::profile::parse("p.yaml", text.clone()).unwrap();
        let e = crate::commands::renderer(None).unwrap().render(&loaded).map(|_| ()).unwrap_err();
        (e.to_string(), text)
    };
    let (e, text) = render("  only: [nodes.ready, opensandbox.lifecyle]\n");
    let line = text.lines().position(|l| l.contains("opensandbox.lifecyle")).unwrap() + 1;
    assert!(e.contains(&format!("p.yaml:{line}:")), "{e}");
    assert!(e.contains("acceptance.only[1]") && e.contains("\"opensandbox.lifecyle\""), "{e}");
    assert!(e.contains("nodes.ready") && e.contains("opensandbox.lifecycle.pod"), "names the checks: {e}");
    assert!(!e.contains("acceptance.only[0]"), "{e}");
    let (e, _) = render("  skip: [kata.nope]\n");
    assert!(e.contains("acceptance.skip[0]"), "{e}");
    // Everything skipped: the runs would prove nothing.
    let (e, _) = render("  only: [nodes]\n  skip: [nodes.ready]\n");
    assert!(e.contains("acceptance.only") && e.contains("prove nothing"), "{e}");
    // A prefix of whole segments names its checks.
    let loaded = fresh(&json!({"acceptance": {"only": ["kata", "opensandbox.lifecycle"]}})).unwrap();
    assert!(crate::commands::renderer(None).unwrap().render(&loaded).is_ok());
}

/// A fleet writes a layer whose files differ between clusters to a directory of its own: the
/// same objects there are the same revision (what `osbx status` and `osbx rollout` expect
/// from a render of the profile alone).
#[test]
fn the_revision_is_of_the_objects_not_of_where_the_repository_keeps_them() {
    let mut loaded = fresh(&json!({})).unwrap();
    let a = loaded.profile.sections.acceptance.clone().unwrap();
    let base = a.revision_in(layer(&loaded).iter()).unwrap();
    for l in loaded.profile.layers.iter_mut().filter(|l| l.name != "acceptance") {
        l.path = Some(format!("{}-lab-a", l.repo_path()));
    }
    let rendered = crate::commands::renderer(None).unwrap().render(&loaded).unwrap();
    let moved = rendered.files.iter().filter(|f| f.path.contains("-lab-a/")).count();
    assert!(moved > 5, "the layers moved: {:?}", rendered.files.iter().map(|f| &f.path).collect::<Vec<_>>());
    assert_eq!(a.revision_in(layer(&loaded).iter()).unwrap(), base);
    // What is in them still counts.
    loaded.profile.sections.pools.items[0].capacity.pool_max += 1;
    assert_ne!(a.revision_in(layer(&loaded).iter()).unwrap(), base);
}

#[test]
fn names_namespaces_and_scrape_kinds_follow_the_profile() {
    let loaded =
        fresh(&json!({"acceptance": {"namespace": "checks", "name": "gate", "scrape": "VMPodScrape", "port": 9100}}))
            .unwrap();
    let objects = layer(&loaded);
    let ns = |o: &crate::object::Object| o.id.namespace.clone();
    assert!(objects.iter().any(|o| o.id.gvk.kind == "Namespace" && o.id.name == "checks"));
    for kind in ["ServiceAccount", "Job", "Deployment", "ConfigMap", "VMPodScrape"] {
        let o = find(&objects, kind).unwrap_or_else(|| panic!("no {kind}"));
        assert_eq!(ns(o).as_deref(), Some("checks"), "{kind}");
    }
    let scrape = find(&objects, "VMPodScrape").unwrap();
    assert_eq!(scrape.id.gvk.group, "operator.victoriametrics.com");
    let serve = find(&objects, "Deployment").unwrap();
    let args = serve.value["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    for arg in ["gate-report", "0.0.0.0:9100", "--serve"] {
        assert!(args.as_array().unwrap().iter().any(|a| a.as_str().unwrap().contains(arg)), "{arg}: {args}");
    }
    let pm = fresh(&json!({"acceptance": {"scrape": "PodMonitor"}})).unwrap();
    assert_eq!(find(&layer(&pm), "PodMonitor").unwrap().id.gvk.group, "monitoring.coreos.com");
    assert!(find(&layer(&fresh(&json!({})).unwrap()), "PodMonitor").is_none());
    // A namespace another layer renders is theirs: not rendered twice; the probe namespace
    // is the layer's own.
    let shared = fresh(&json!({"acceptance": {"namespace": "opensandbox"}})).unwrap();
    let namespaces: Vec<String> =
        layer(&shared).iter().filter(|o| o.id.gvk.kind == "Namespace").map(|o| o.id.name.clone()).collect();
    assert_eq!(namespaces, ["osbx-acceptance-probes"]);
}

/// The layer renders the namespace its runs create probe pods in, at the Pod Security level
/// the selected checks need (a host probe uses its node: `privileged`; else `baseline`), and
/// both pods are told to use it. Sharing the layer's own namespace is refused.
#[test]
fn the_probe_namespace_is_rendered_at_the_level_its_probes_need() {
    let level = |over: Value| {
        let objects = layer(&fresh(&over).unwrap());
        let probes = objects.iter().find(|o| o.id.gvk.kind == "Namespace" && o.id.name == "probes").unwrap();
        assert_eq!(probes.value["metadata"]["labels"]["app.kubernetes.io/managed-by"], "osbx-verify");
        for kind in ["Job", "Deployment"] {
            let args = &find(&objects, kind).unwrap().value["spec"]["template"]["spec"]["containers"][0]["args"];
            let args: Vec<&str> = args.as_array().unwrap().iter().filter_map(Value::as_str).collect();
            assert!(args.windows(2).any(|w| w == ["--probe-namespace", "probes"]), "{kind}: {args:?}");
        }
        probes.value["metadata"]["labels"]["pod-security.kubernetes.io/enforce"].as_str().unwrap().to_owned()
    };
    assert_eq!(level(json!({"acceptance": {"probeNamespace": "probes"}})), "privileged");
    assert_eq!(level(json!({"acceptance": {"probeNamespace": "probes", "skip": ["kata"]}})), "privileged");
    assert_eq!(
        level(json!({"acceptance": {"probeNamespace": "probes", "only": ["nodes", "kata.guest-kernel", "spiffe"]}})),
        "baseline"
    );
    let e = fresh(&json!({"acceptance": {"probeNamespace": "osbx-acceptance"}})).unwrap_err();
    assert!(e.contains("acceptance.probeNamespace") && e.contains("of its own"), "{e}");
}

/// Every selected check runs each `deepInterval` in a CronJob under the Job's identity,
/// its Jobs deleted a minute after they end; its schedule is what the interval says, an
/// interval no schedule states is refused, and `null` renders none.
#[test]
fn a_cron_job_runs_every_check_at_the_deep_interval_as_the_job() {
    let cron = |over: Value| find(&layer(&fresh(&over).unwrap()), "CronJob").cloned();
    let c = cron(json!({"acceptance": {"name": "gate", "deepInterval": "30m"}})).unwrap();
    assert_eq!((c.id.name.as_str(), c.id.namespace.as_deref()), ("gate-deep", Some("osbx-acceptance")));
    let spec = &c.value["spec"];
    assert_eq!((spec["schedule"].as_str(), spec["concurrencyPolicy"].as_str()), (Some("*/30 * * * *"), Some("Forbid")));
    let job = &spec["jobTemplate"]["spec"];
    assert_eq!(job["ttlSecondsAfterFinished"], 60);
    assert_eq!(job["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"], json!([1]));
    let pod = &job["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "gate", "the Job's identity");
    assert_eq!(pod["restartPolicy"], "Never");
    let args: Vec<&str> = pod["containers"][0]["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(args.windows(2).any(|w| w == ["--cron-job", "gate-deep"]), "{args:?}");
    assert!(!args.contains(&"--read-only"), "{args:?}");
    // The same pod as the Job's, but for who it says it is.
    let objects = layer(&fresh(&json!({"acceptance": {"name": "gate", "deepInterval": "30m"}})).unwrap());
    let of_job = &find(&objects, "Job").unwrap().value["spec"];
    assert_eq!(of_job["podFailurePolicy"], job["podFailurePolicy"]);
    assert_eq!(of_job["template"]["spec"]["volumes"], pod["volumes"]);
    for (interval, schedule) in [
        ("1m", "* * * * *"),
        ("15m", "*/15 * * * *"),
        ("60m", "0 * * * *"),
        ("1h", "0 * * * *"),
        ("6h", "0 */6 * * *"),
        ("24h", "0 0 * * *"),
    ] {
        let c = cron(json!({"acceptance": {"deepInterval": interval}})).unwrap();
        assert_eq!(c.value["spec"]["schedule"], schedule, "{interval}");
    }
    assert_eq!(cron(json!({})).unwrap().value["spec"]["schedule"], "0 */6 * * *", "the default");
    assert!(cron(json!({"acceptance": {"deepInterval": null}})).is_none());
    for bad in ["7m", "90s", "5h", "48h", "30s", "often"] {
        let e = fresh(&json!({"acceptance": {"deepInterval": bad}})).unwrap_err();
        assert!(e.contains("acceptance.deepInterval") && e.contains("divisor of an hour"), "{bad}: {e}");
    }
    let long = "a".repeat(50);
    let e = fresh(&json!({"acceptance": {"name": long}})).unwrap_err();
    assert!(e.contains("at most 47 characters"), "{e}");
    assert!(fresh(&json!({"acceptance": {"name": long, "deepInterval": null}})).is_ok());
}

/// The profile in the ConfigMap loads back as the same profile (the Job reads it).
#[test]
fn the_profile_in_the_layer_loads_back() {
    let loaded = fresh(&json!({})).unwrap();
    let objects = layer(&loaded);
    let map = objects.iter().find(|o| o.id.name == "osbx-acceptance-profile").unwrap();
    let text = map.value["data"]["profile.yaml"].as_str().unwrap();
    let doc: Value = serde_saphyr::from_str(text).unwrap();
    let again = crate::profile::from_value("again", &doc).unwrap();
    assert_eq!(serde_json::to_value(&again.profile).unwrap(), serde_json::to_value(&loaded.profile).unwrap());
}
