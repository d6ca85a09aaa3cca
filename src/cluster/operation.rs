//! What osbx does to a cluster, as typed operations, and the one function that turns an
//! operation into the permissions it needs ([`Operation::needs`]).
//!
//! Planning code says what it will do — an apply's plan, the inventory, connecting, each verify
//! check — and nothing else decides permissions: preflight reviews exactly the needs of the
//! operations a run plans before its first write, and `osbx rbac` grants exactly the needs of
//! every operation the commands can plan, so the two cannot drift apart.

use std::collections::BTreeSet;

use super::need::{Need, Target};
use crate::object::{Gvk, KnownKind, ObjectRef};

/// Objects of one kind an operation touches.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Objects {
    /// One object, named.
    Named(ObjectRef),
    /// Any object of a kind in a namespace (`None`: a cluster-scoped kind, or every namespace),
    /// when the names are known only at run time (a sandbox's pods, a run's probe namespace).
    Any(Gvk, Option<String>),
}

impl Objects {
    /// Any object of `kind` in `namespace`.
    #[must_use]
    pub fn any(kind: KnownKind, namespace: Option<&str>) -> Self {
        Objects::Any(kind.gvk(), namespace.map(str::to_owned))
    }

    fn target(&self, keep_name: bool) -> Target {
        match self {
            Objects::Named(id) => Target::Objects {
                kind: id.gvk.clone(),
                namespace: id.namespace.clone(),
                name: keep_name.then(|| id.name.clone()),
                subresource: None,
            },
            Objects::Any(kind, namespace) => {
                Target::Objects { kind: kind.clone(), namespace: namespace.clone(), name: None, subresource: None }
            }
        }
    }
}

/// One thing osbx does to a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// Read objects by name (GET).
    Get(Objects),
    /// Read every object of a kind in a namespace with one LIST (`None`: cluster-scoped, or
    /// every namespace).
    List(Gvk, Option<String>),
    /// Server-side apply of an object: `creates` when it may not exist yet (the apply creates
    /// it), else a change to one that exists.
    Apply {
        /// The object applied.
        object: ObjectRef,
        /// Whether the apply may create it.
        creates: bool,
    },
    /// Merge-patch an object osbx does not own (asking Flux to reconcile now).
    Patch(ObjectRef),
    /// Create objects of a kind in a namespace (POST; the name is in the body).
    Create(Gvk, Option<String>),
    /// Delete objects by name.
    Delete(Objects),
    /// Delete the objects of a kind that carry a label, in a namespace (`None`: every namespace).
    DeleteLabelled(Gvk, Option<String>),
    /// Wait for an object's readiness: read it, then watch it until it is ready.
    Wait(ObjectRef),
    /// Follow objects until stopped: read them (one object by GET, any of a kind by one LIST),
    /// then watch them from the version read (one object with the `metadata.name` field
    /// selector, which RBAC authorizes by `resourceNames`).
    Watch(Objects),
    /// Run a probe pod in a namespace (`None`: the run's own, named only when it starts) and
    /// read how it ended and why: its status, log and events.
    Probe(Option<String>),
    /// A request with `method` through the API server's proxy to the Service `service`, whose
    /// name in the request path is `<name>:<port>`.
    Proxy {
        /// The Service, named as in the request path.
        service: ObjectRef,
        /// The HTTP method.
        method: http::Method,
    },
    /// A GET of a non-resource URL (`/version`, discovery).
    Url(&'static str),
    /// Asking the API server whether this user may do something (a SelfSubjectAccessReview):
    /// how preflight reviews, and how diff names what a refused read lacked.
    Review,
}

impl Operation {
    /// Whether it only reads (a GET through the service proxy included; a review of one's own
    /// access is a question, not a change): what a pod whose identity may create nothing can do.
    #[must_use]
    pub(crate) fn changes_nothing(&self) -> bool {
        match self {
            Operation::Get(_)
            | Operation::List(..)
            | Operation::Wait(_)
            | Operation::Watch(_)
            | Operation::Url(_)
            | Operation::Review => true,
            Operation::Proxy { method, .. } => *method == http::Method::GET,
            _ => false,
        }
    }

    /// The permissions this operation needs: the only place a permission is derived.
    ///
    /// Kubernetes RBAC cannot restrict `create` (the name is in the body) or the collection
    /// verbs (`list`, `deletecollection`) to named objects, so those are granted on the kind.
    #[must_use]
    pub fn needs(&self) -> Vec<Need> {
        let named = |verb: &'static str, objects: &Objects| Need { verb, target: objects.target(true) };
        let any = |verb: &'static str, kind: &Gvk, namespace: &Option<String>| Need {
            verb,
            target: Objects::Any(kind.clone(), namespace.clone()).target(false),
        };
        match self {
            Operation::Get(objects) => vec![named("get", objects)],
            Operation::List(kind, namespace) => vec![any("list", kind, namespace)],
            Operation::Apply { object, creates } => {
                let object = Objects::Named(object.clone());
                let patch = named("patch", &object);
                if *creates { vec![Need { verb: "create", target: object.target(false) }, patch] } else { vec![patch] }
            }
            Operation::Patch(object) => vec![named("patch", &Objects::Named(object.clone()))],
            Operation::Create(kind, namespace) => vec![any("create", kind, namespace)],
            Operation::Delete(objects) => vec![named("delete", objects)],
            Operation::DeleteLabelled(kind, namespace) => vec![any("deletecollection", kind, namespace)],
            Operation::Wait(object) => {
                let object = Objects::Named(object.clone());
                vec![named("get", &object), named("watch", &object)]
            }
            Operation::Watch(objects @ Objects::Named(_)) => vec![named("get", objects), named("watch", objects)],
            Operation::Watch(Objects::Any(kind, namespace)) => {
                vec![any("list", kind, namespace), any("watch", kind, namespace)]
            }
            Operation::Probe(namespace) => vec![
                any("create", &KnownKind::POD.gvk(), namespace),
                any("get", &KnownKind::POD.gvk(), namespace),
                any("list", &KnownKind::EVENT.gvk(), namespace),
            ],
            Operation::Proxy { service, method } => {
                let verb = match *method {
                    http::Method::POST => "create",
                    http::Method::PUT => "update",
                    http::Method::PATCH => "patch",
                    http::Method::DELETE => "delete",
                    _ => "get",
                };
                let target = Target::Objects {
                    kind: service.gvk.clone(),
                    namespace: service.namespace.clone(),
                    name: Some(service.name.clone()),
                    subresource: Some("proxy"),
                };
                vec![Need { verb, target }]
            }
            Operation::Url(path) => vec![Need { verb: "get", target: Target::Url(path) }],
            Operation::Review => vec![any("create", &KnownKind::ACCESS_REVIEW.gvk(), &None)],
        }
    }
}

/// The permissions `operations` need, each once, in order.
#[must_use]
pub(crate) fn needs<'a>(operations: impl IntoIterator<Item = &'a Operation>) -> BTreeSet<Need> {
    operations.into_iter().flat_map(Operation::needs).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> ObjectRef {
        KnownKind::POD.object(Some("ns"), name)
    }

    #[test]
    fn create_and_collection_verbs_are_granted_on_the_kind() {
        let apply = Operation::Apply { object: pod("a"), creates: true }.needs();
        let Target::Objects { name, .. } = &apply[0].target else { panic!() };
        assert_eq!((apply[0].verb, name), ("create", &None));
        let Target::Objects { name, .. } = &apply[1].target else { panic!() };
        assert_eq!((apply[1].verb, name.as_deref()), ("patch", Some("a")));
        assert_eq!(Operation::Apply { object: pod("a"), creates: false }.needs().len(), 1);
    }

    #[test]
    fn following_objects_reads_them_as_it_watches_them() {
        let verbs = |op: Operation| -> Vec<(&'static str, Option<String>)> {
            op.needs()
                .into_iter()
                .map(|n| match n.target {
                    Target::Objects { name, .. } => (n.verb, name),
                    Target::Url(_) => panic!("{n:?}"),
                })
                .collect()
        };
        let one = verbs(Operation::Watch(Objects::Named(pod("a"))));
        assert_eq!(one, [("get", Some("a".to_owned())), ("watch", Some("a".to_owned()))]);
        let all = verbs(Operation::Watch(Objects::any(KnownKind::POD, Some("ns"))));
        assert_eq!(all, [("list", None), ("watch", None)]);
    }

    #[test]
    fn a_proxied_request_needs_the_verb_its_method_is_authorized_as() {
        let service = KnownKind::SERVICE.object(Some("ns"), "server:80");
        let post = Operation::Proxy { service: service.clone(), method: http::Method::POST }.needs();
        let Target::Objects { subresource, name, .. } = &post[0].target else { panic!() };
        assert_eq!((post[0].verb, *subresource, name.as_deref()), ("create", Some("proxy"), Some("server:80")));
        assert_eq!(Operation::Proxy { service, method: http::Method::GET }.needs()[0].verb, "get");
    }
}
