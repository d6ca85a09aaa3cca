//! One permission of a role at a time ("atoms"): removing it, asking the API server whether the
//! user may still do it, and proving that preflight names it.

use super::*;

/// One permission of a role: a verb on a resource (maybe one named object) or on a URL.
#[derive(Debug, Clone)]
pub(crate) struct Atom {
    /// The role (index into the printed objects) and its rule.
    pub(crate) role: usize,
    pub(crate) rule: usize,
    pub(crate) verb: String,
    pub(crate) target: Target,
}

#[derive(Debug, Clone)]
pub(crate) enum Target {
    Resource { group: String, resource: String, name: Option<String> },
    Url(String),
}

pub(crate) fn strings(v: &Value) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_owned)).collect()
}

/// Every permission of every role, one per verb, resource (or URL) and object name.
pub(crate) fn atoms(objects: &[Value]) -> Vec<Atom> {
    let mut out = Vec::new();
    for (role, o) in objects.iter().enumerate().filter(|(_, o)| o["kind"] == "Role" || o["kind"] == "ClusterRole") {
        for (rule, r) in o["rules"].as_array().unwrap().iter().enumerate() {
            for verb in strings(&r["verbs"]) {
                let atom = |target| Atom { role, rule, verb: verb.clone(), target };
                if let Some(urls) = r.get("nonResourceURLs") {
                    out.extend(strings(urls).into_iter().map(|u| atom(Target::Url(u))));
                    continue;
                }
                let (groups, resources) = (strings(&r["apiGroups"]), strings(&r["resources"]));
                assert_eq!((groups.len(), resources.len()), (1, 1), "one resource per rule: {r}");
                let (group, resource) = (groups[0].clone(), resources[0].clone());
                let names = strings(&r["resourceNames"]);
                if names.is_empty() {
                    out.push(atom(Target::Resource { group, resource, name: None }));
                } else {
                    out.extend(names.into_iter().map(|n| {
                        atom(Target::Resource { group: group.clone(), resource: resource.clone(), name: Some(n) })
                    }));
                }
            }
        }
    }
    out
}

/// The role without one permission: its rule split into the other verbs on the same objects,
/// and this verb on the other objects.
pub(crate) fn without(role: &Value, atom: &Atom) -> Value {
    let mut role = role.clone();
    let rules = role["rules"].as_array_mut().unwrap();
    let rule = rules.remove(atom.rule);
    let mut others = rule.clone();
    others["verbs"] = json!(strings(&rule["verbs"]).into_iter().filter(|v| *v != atom.verb).collect::<Vec<_>>());
    if !strings(&others["verbs"]).is_empty() {
        rules.push(others);
    }
    let (field, item) = match &atom.target {
        Target::Url(u) => ("nonResourceURLs", Some(u)),
        Target::Resource { name, .. } => ("resourceNames", name.as_ref()),
    };
    if let Some(item) = item {
        let rest: Vec<String> = strings(&rule[field]).into_iter().filter(|i| i != item).collect();
        if !rest.is_empty() {
            let mut narrowed = rule.clone();
            narrowed[field] = json!(rest);
            narrowed["verbs"] = json!([atom.verb]);
            rules.push(narrowed);
        }
    }
    role
}

/// Whether `user` may do what `spec` asks (asked as the admin, through the same authorizer the
/// API server uses for the user's requests).
pub(crate) async fn user_may_do(client: &kube::Client, user: &str, mut spec: SubjectAccessReviewSpec) -> bool {
    spec.user = Some(user.into());
    spec.groups = Some(vec!["system:authenticated".into()]);
    let review = SubjectAccessReview { spec, ..SubjectAccessReview::default() };
    let answer = Api::<SubjectAccessReview>::all(client.clone()).create(&PostParams::default(), &review).await.unwrap();
    answer.status.is_some_and(|s| s.allowed)
}

/// Whether `user` may do what `atom` grants.
pub(crate) async fn user_may(client: &kube::Client, user: &str, role: &Value, atom: &Atom) -> bool {
    let mut spec = SubjectAccessReviewSpec::default();
    match &atom.target {
        Target::Url(path) => {
            spec.non_resource_attributes =
                Some(NonResourceAttributes { path: Some(path.clone()), verb: Some(atom.verb.clone()) });
        }
        Target::Resource { group, resource, name } => {
            let (resource, subresource) = match resource.split_once('/') {
                Some((r, s)) => (r.to_owned(), Some(s.to_owned())),
                None => (resource.clone(), None),
            };
            spec.resource_attributes = Some(ResourceAttributes {
                group: Some(group.clone()),
                resource: Some(resource),
                subresource,
                namespace: role["metadata"]["namespace"].as_str().map(str::to_owned),
                name: name.clone(),
                verb: Some(atom.verb.clone()),
                ..ResourceAttributes::default()
            });
        }
    }
    user_may_do(client, user, spec).await
}

/// Wait until the authorizer has seen the role change (`may`: the atom granted again or not).
pub(crate) async fn settle(client: &kube::Client, user: &str, role: &Value, atom: &Atom, may: bool) {
    let start = Instant::now();
    while user_may(client, user, role, atom).await != may {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{atom:?}: still {} after the role changed{}",
            if may { "denied" } else { "allowed" },
            if may { "" } else { ": another rule grants it too, so the roles are not minimal" }
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The preflight line that names `atom` (`namespaced`: whether its resource is namespaced).
pub(crate) fn denial(role: &Value, atom: &Atom, namespaced: bool) -> (String, Option<String>) {
    match &atom.target {
        Target::Url(path) => (format!("cannot {} {path}", atom.verb), None),
        Target::Resource { group, resource, name } => {
            let what = if group.is_empty() { resource.clone() } else { format!("{resource}.{group}") };
            let line = match role["metadata"]["namespace"].as_str() {
                Some(ns) => format!("cannot {} {what} in namespace {ns}", atom.verb),
                None if namespaced => format!("cannot {} {what} in every namespace", atom.verb),
                None => format!("cannot {} {what} (cluster-wide)", atom.verb),
            };
            (line, name.clone())
        }
    }
}

/// Whether stderr lists the denial: the line, then (for a named object) that name among the
/// names refused.
pub(crate) fn names_denial(stderr: &str, (line, name): &(String, Option<String>)) -> bool {
    stderr.lines().map(str::trim).any(|l| match l.strip_prefix(line.as_str()) {
        Some("") => name.is_none(),
        Some(rest) => rest
            .strip_prefix(": ")
            .is_some_and(|names| name.as_ref().is_none_or(|name| names.split(", ").any(|n| n == name))),
        None => false,
    })
}

/// Owned arguments of one osbx run.
pub(super) fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| (*s).to_owned()).collect()
}

/// Prove each of `atoms` needed, one at a time: without it, the first of `runs(atom)` (osbx's
/// arguments, and whether `OSBX_API_KEY` is set) that does not succeed stops in preflight and
/// names it. For `apply --dry-run` on a cluster where the profile was never applied, that is every
/// write an apply makes; for `verify`, every check.
pub(super) async fn prove(
    world: &World,
    discovery: &Discovery,
    objects: &[Value],
    atoms: &[Atom],
    runs: impl Fn(&Atom) -> Vec<(Vec<String>, bool)>,
) {
    let (client, user) = (&world.client, USER);
    for atom in atoms {
        let role = &objects[atom.role];
        apply(client, &without(role, atom)).await;
        settle(client, user, role, atom, false).await;
        let expected = denial(role, atom, namespaced(discovery, atom));
        let mut out = None;
        for (args, key) in runs(atom) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let run = world.osbx(&args, key).await;
            let passed = run.status.code() == Some(0);
            out = Some(run);
            if !passed {
                break;
            }
        }
        let out = out.expect("at least one run");
        let (stdout, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(2), "{atom:?}: no run needs it: {stdout}{stderr}");
        assert!(names_denial(&stderr, &expected), "{atom:?}: {expected:?} not named:\n{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        apply(client, role).await;
        settle(client, user, role, atom, true).await;
    }
}

pub(crate) fn namespaced(discovery: &Discovery, atom: &Atom) -> bool {
    let Target::Resource { group, resource, .. } = &atom.target else { return false };
    let plural = resource.split('/').next().unwrap();
    discovery
        .groups()
        .filter(|g| g.name() == group)
        .flat_map(kube::discovery::ApiGroup::recommended_resources)
        .find(|(ar, _)| ar.plural == plural)
        .is_some_and(|(_, caps)| caps.scope == Scope::Namespaced)
}

#[test]
fn a_permission_is_removed_alone() {
    let role = json!({"kind": "Role", "metadata": {"name": "r", "namespace": "n"}, "rules": [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a", "b"], "verbs": ["get", "patch"]}]});
    let atoms = atoms(std::slice::from_ref(&role));
    assert_eq!(atoms.len(), 4);
    let a_get = atoms
        .iter()
        .find(|a| a.verb == "get" && matches!(&a.target, Target::Resource { name: Some(n), .. } if n == "a"))
        .unwrap();
    assert_eq!(
        without(&role, a_get)["rules"],
        json!([{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a", "b"], "verbs": ["patch"]},
               {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["b"], "verbs": ["get"]}])
    );
    let expected = denial(&role, a_get, true);
    assert!(names_denial("  cannot get configmaps in namespace n: a, c\n", &expected));
    assert!(!names_denial("  cannot get configmaps in namespace n: b\n", &expected));
}
