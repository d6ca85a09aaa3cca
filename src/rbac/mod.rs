//! `osbx rbac`: the least-privilege roles that let a user or a ServiceAccount run osbx for a
//! profile.
//!
//! The roles are computed from the same typed operations the commands plan and review before
//! they write (an apply's in [`deploy::operations`], a diff's in [`deploy::diff_operations`], each
//! verify check's in [`crate::verify::Check::operations`], connecting in
//! [`preflight::connecting`]), turned into permissions by the one function that does so
//! ([`Operation::needs`]), so a role cannot grant less than a run asks for or more than it uses. Namespaced permissions go into one Role per namespace; cluster-scoped ones, permissions
//! in every namespace (a verify run's probe namespace is named per run) and non-resource URLs
//! into one ClusterRole. Permissions on named objects are restricted with `resourceNames`, except
//! for the verbs Kubernetes cannot restrict that way (`create`, `list`, `deletecollection`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::cluster::need::{Need, Target};
use crate::cluster::operation::{self, Operation};
use crate::cluster::preflight;
use crate::deploy::{self, Layer, Scope};
use crate::object::KnownKind;
use crate::profile::Profile;
use crate::rollout;
use crate::verify::in_cluster::publish;
use crate::verify::session;
use crate::verify::{Reach, Selection};

/// Which commands the roles are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Purpose {
    /// `osbx apply` (without `--verify`).
    Apply,
    /// `osbx diff`.
    Diff,
    /// `osbx verify` (every check, the Lifecycle API through the service proxy).
    Verify,
    /// `osbx rollout` on one cluster of a fleet: Flux's root source asked to fetch, the
    /// rendered objects waited for, every check.
    Rollout,
    /// `osbx status`: reads only.
    Status,
    /// `apply`, `diff` and `verify` (and `apply --verify`); a fleet's clusters add `Rollout`.
    All,
}

impl Purpose {
    /// The lower-case name (`apply`), used in the roles' names.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Purpose::Apply => "apply",
            Purpose::Diff => "diff",
            Purpose::Verify => "verify",
            Purpose::Rollout => "rollout",
            Purpose::Status => "status",
            Purpose::All => "all",
        }
    }

    fn covers(self, other: Purpose) -> bool {
        self == other || (self == Purpose::All && !matches!(other, Purpose::Rollout | Purpose::Status))
    }
}

/// Who the roles are bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// A user (as the API server authenticates it: a certificate's CN, an OIDC claim).
    User(String),
    /// A ServiceAccount: namespace and name.
    ServiceAccount(String, String),
}

impl Subject {
    fn value(&self) -> Value {
        match self {
            Subject::User(name) => json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}),
            Subject::ServiceAccount(ns, name) => json!({"kind": "ServiceAccount", "name": name, "namespace": ns}),
        }
    }
}

/// What to print.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which commands.
    pub purpose: Purpose,
    /// Also what `apply --prune` deletes and `diff` shows as to be pruned.
    pub prune: bool,
    /// Also what `apply --create-decryption-secret` creates: the cluster's decryption Secret.
    pub decryption_secret: bool,
    /// For verify's runs in the cluster (the acceptance layer's Job and Deployment): their
    /// report published, and the acceptance layer, their own, not among the layers checked.
    pub in_cluster: bool,
    /// With `in_cluster`: for the serving pod (`verify --serve --read-only`), which runs only
    /// the checks that change nothing and publishes its report: it may create nothing else.
    pub serving: bool,
    /// Bind the roles to these (none: the roles only).
    pub subjects: Vec<Subject>,
}

/// Everything the commands of `opts.purpose` can do for the profile rendered as `layers`: an
/// apply that waits (and prunes with `opts.prune`), a diff (showing what prune would delete with
/// `opts.prune`), and a verify run of every check through the service proxy with the API key
/// read from the profile's Secret.
#[must_use]
pub(crate) fn operations(profile: &Profile, layers: &[Layer], opts: &Options) -> Vec<Operation> {
    let mut out = preflight::connecting();
    // Apply and verify review what they do before they write; diff when a read is refused
    // (status only reads, and reports a refused read as it is).
    if opts.purpose != Purpose::Status {
        out.push(Operation::Review);
    }
    if opts.purpose.covers(Purpose::Apply) {
        out.extend(deploy::operations(profile, layers, Scope { prune: opts.prune, wait: true }));
        if opts.decryption_secret {
            out.extend(deploy::creating_decryption_secret(profile));
        }
    }
    if opts.purpose.covers(Purpose::Diff) {
        out.extend(deploy::diff_operations(profile, layers, opts.prune));
    }
    if opts.purpose.covers(Purpose::Verify) {
        let layer = profile.acceptance().filter(|_| opts.in_cluster);
        let (acceptance, own) = (layer.map(|(a, _)| a), layer.map(|(_, l)| l.name.as_str()));
        let checked: Vec<Layer> = layers.iter().filter(|l| Some(l.name.as_str()) != own).cloned().collect();
        let flux_objects = deploy::flux_objects(&checked);
        // In the cluster, the checks the acceptance layer selects.
        let selection = acceptance.map_or_else(Selection::default, Selection::of_acceptance);
        // In the cluster, the probes go to the namespace the acceptance layer renders for them;
        // the serving pod runs only what changes nothing.
        let reach = Reach {
            probes: acceptance.map(|a| a.probe_namespace.clone()),
            read_only: acceptance.is_some() && opts.serving,
            ..Reach::default()
        };
        out.extend(session::operations(profile, &flux_objects, &selection, &reach));
        if let Some(acceptance) = acceptance {
            out.extend(publish::operations(&acceptance.report(), !opts.serving));
        }
    }
    if opts.purpose.covers(Purpose::Status) {
        out.extend(crate::overview::operations(profile, layers));
    }
    if opts.purpose.covers(Purpose::Rollout) {
        let objects = deploy::ids(layers);
        let flux_objects = deploy::flux_objects(layers);
        out.extend(rollout::operations(profile, &objects, &flux_objects, &Selection::default(), &Reach::default()));
    }
    out
}

/// Every permission the commands of `opts.purpose` need for the profile rendered as `layers`:
/// the needs of their [`operations`].
#[must_use]
pub fn needs(profile: &Profile, layers: &[Layer], opts: &Options) -> BTreeSet<Need> {
    operation::needs(&operations(profile, layers, opts))
}

/// A verb, resource and subresource of a role, for merging needs into rules.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Resource {
    group: String,
    /// `plural` or `plural/subresource`.
    resource: String,
}

/// One role's permissions: per resource and verb, the names it is restricted to (`None`: any).
type Grants = BTreeMap<(Resource, &'static str), Option<BTreeSet<String>>>;

/// Non-resource URLs by verb.
type Urls = BTreeMap<&'static str, BTreeSet<&'static str>>;

/// Where each need goes: `None` the ClusterRole, `Some(ns)` the Role in `ns`; URLs to the
/// ClusterRole.
fn place(needs: &BTreeSet<Need>) -> (BTreeMap<Option<String>, Grants>, Urls) {
    let mut roles: BTreeMap<Option<String>, Grants> = BTreeMap::new();
    let mut urls = Urls::new();
    // Cluster-wide grants first, so that namespaced needs they cover are left out.
    let mut ordered: Vec<&Need> = needs.iter().collect();
    ordered.sort_by_key(|n| !matches!(&n.target, Target::Objects { namespace: None, .. }));
    for need in ordered {
        let (kind, namespace, name, subresource) = match &need.target {
            Target::Url(path) => {
                urls.entry(need.verb).or_default().insert(path);
                continue;
            }
            Target::Objects { kind, namespace, name, subresource } => (kind, namespace, name, subresource),
        };
        let plural = Need::plural(kind);
        let resource = Resource {
            group: kind.group.clone(),
            resource: subresource.map_or_else(|| plural.clone(), |s| format!("{plural}/{s}")),
        };
        let key = (resource, need.verb);
        let covered = |grants: Option<&Grants>| {
            grants.and_then(|g| g.get(&key)).is_some_and(|names| match (names, name) {
                (None, _) => true,
                (Some(names), Some(name)) => names.contains(name),
                (Some(_), None) => false,
            })
        };
        if namespace.is_some() && covered(roles.get(&None)) {
            continue;
        }
        let grants = roles.entry(namespace.clone()).or_default();
        if covered(Some(grants)) {
            continue;
        }
        match (grants.entry(key).or_insert_with(|| Some(BTreeSet::new())), name) {
            (Some(names), Some(name)) => {
                names.insert(name.clone());
            }
            (names, None) => *names = None,
            (None, Some(_)) => {}
        }
    }
    (roles, urls)
}

/// The order verbs are listed in.
const VERBS: &[&str] = &["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"];

fn verb_rank(verb: &str) -> usize {
    VERBS.iter().position(|v| *v == verb).unwrap_or(VERBS.len())
}

/// The rules of one role: one per resource and set of names, with its verbs.
fn rules(grants: &Grants) -> Vec<Value> {
    let mut merged: BTreeMap<(&Resource, Option<&BTreeSet<String>>), Vec<&'static str>> = BTreeMap::new();
    for ((resource, verb), names) in grants {
        merged.entry((resource, names.as_ref())).or_default().push(verb);
    }
    merged
        .into_iter()
        .map(|((resource, names), mut verbs)| {
            verbs.sort_by_key(|v| verb_rank(v));
            let mut rule = json!({"apiGroups": [resource.group], "resources": [resource.resource]});
            if let Some(names) = names {
                rule["resourceNames"] = json!(names);
            }
            rule["verbs"] = json!(verbs);
            rule
        })
        .collect()
}

/// The name of the roles and bindings: `osbx-<profile>-<cluster>-<purpose>` (`…-acceptance` for
/// verify's runs in the cluster).
#[must_use]
pub(crate) fn role_name(profile: &Profile, opts: &Options) -> String {
    let purpose = match (opts.in_cluster, opts.serving) {
        (true, true) => "acceptance-serve",
        (true, false) => "acceptance",
        _ => opts.purpose.name(),
    };
    let mut name = format!("osbx-{}-{}-{purpose}", profile.name(), profile.cluster.name);
    name.truncate(253);
    name
}

/// The roles (a ClusterRole, then a Role per namespace) and, when `opts` names subjects, their
/// bindings, as Kubernetes objects. A Role can only be created in a namespace that exists: the
/// namespaces the profile renders (which the first apply would create) come first, as rendered.
#[must_use]
pub fn roles(profile: &Profile, layers: &[Layer], needs: &BTreeSet<Need>, opts: &Options) -> Vec<Value> {
    let name = role_name(profile, opts);
    let labels = json!({"app.kubernetes.io/name": crate::mark::OSBX, "app.kubernetes.io/component": "rbac"});
    let (mut roles, urls) = place(needs);
    let mut cluster_rules = rules(&roles.remove(&None).unwrap_or_default());
    for (verb, paths) in urls {
        cluster_rules.push(json!({"nonResourceURLs": paths, "verbs": [verb]}));
    }
    let rbac = "rbac.authorization.k8s.io/v1";
    let role_ref = |kind: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name});
    let subjects: Vec<Value> = opts.subjects.iter().map(Subject::value).collect();
    let mut out = vec![json!({"apiVersion": rbac, "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels}, "rules": cluster_rules})];
    if !subjects.is_empty() {
        out.push(
            json!({"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": name, "labels": labels},
            "roleRef": role_ref("ClusterRole"), "subjects": subjects}),
        );
    }
    let rendered: BTreeSet<String> =
        deploy::ids(layers).into_iter().filter(|id| KnownKind::NAMESPACE.is(&id.gvk)).map(|id| id.name).collect();
    let namespaces = roles.keys().flatten().filter(|ns| rendered.contains(*ns));
    let namespaces: Vec<Value> =
        namespaces.map(|ns| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).collect();
    out.splice(0..0, namespaces);
    for (ns, grants) in roles {
        let ns = ns.unwrap_or_default();
        out.push(json!({"apiVersion": rbac, "kind": "Role",
            "metadata": {"name": name, "namespace": ns, "labels": labels}, "rules": rules(&grants)}));
        if !subjects.is_empty() {
            out.push(json!({"apiVersion": rbac, "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "roleRef": role_ref("Role"), "subjects": subjects}));
        }
    }
    out
}

/// What an acceptance layer asks above the render: its ServiceAccount's roles (derived here)
/// and whether its selection of checks holds (verify's checks).
#[must_use]
pub(crate) fn in_cluster() -> crate::render::InCluster {
    crate::render::InCluster {
        roles: acceptance_roles,
        selection: crate::verify::session::acceptance_selection,
        probe_security: crate::verify::session::probe_security,
    }
}

/// The roles and bindings of the acceptance layer's two ServiceAccounts: the runs' (the Job's),
/// what `osbx rbac --for verify --in-cluster` derives for the profile whose other layers render
/// as `others`, and the serving pod's, what `… --in-cluster --serving` derives (the render asks
/// this, [`crate::render::InCluster`]; the namespaces those layers render are theirs, not
/// repeated).
#[must_use]
pub fn acceptance_roles(profile: &Profile, others: &crate::render::Rendered) -> Vec<Value> {
    let Some(acceptance) = &profile.sections.acceptance else { return Vec::new() };
    let layers = deploy::layers(profile, others);
    let mut out = Vec::new();
    for (serving, (namespace, name)) in [(false, acceptance.service_account()), (true, acceptance.serving_account())] {
        let opts = Options {
            purpose: Purpose::Verify,
            prune: false,
            decryption_secret: false,
            in_cluster: true,
            serving,
            subjects: vec![Subject::ServiceAccount(namespace, name)],
        };
        let objects = roles(profile, &layers, &needs(profile, &layers, &opts), &opts);
        out.extend(objects.into_iter().filter(|o| o["kind"] != "Namespace"));
    }
    out
}

/// The objects as one multi-document YAML stream, after a comment saying what they are for.
#[must_use]
pub fn yaml(profile: &Profile, opts: &Options, objects: &[Value]) -> String {
    let prune = if opts.prune { " --prune" } else { "" };
    let decryption = if opts.decryption_secret { " --create-decryption-secret" } else { "" };
    let in_cluster = if opts.in_cluster { " --in-cluster" } else { "" };
    let mut out = format!(
        "# osbx rbac --for {}{prune}{decryption}{in_cluster}: what osbx needs for profile {} on cluster {}.\n",
        opts.purpose.name(),
        profile.name(),
        profile.cluster.name
    );
    for object in objects {
        let options = serde_saphyr::ser_options! { compact_list_indent: false, folded_wrap_chars: usize::MAX };
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string_with_options(object, options).unwrap_or_default());
    }
    out
}

#[cfg(test)]
mod tests;
