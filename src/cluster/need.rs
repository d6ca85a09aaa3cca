//! What a run needs: one permission ([`Need`]) — a verb on objects of a kind, or on a URL.
//!
//! Needs are declared next to the code that makes the calls (the apply's plan, the inventory,
//! each verify check); [`super::preflight`] reviews them before any write and [`crate::rbac`]
//! turns them into roles, so the two cannot drift apart.

use crate::object::{Gvk, ObjectRef};

/// Verbs that Kubernetes RBAC cannot restrict to named objects: `create` (the name is in the
/// body), and the collection verbs (osbx never selects by name).
const COLLECTION_VERBS: &[&str] = &["create", "list", "deletecollection"];

/// One permission a run needs: a verb on objects of a kind (every object, or one named object;
/// in a namespace, or cluster-wide; optionally on a subresource), or on a non-resource URL.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Need {
    /// The verb (`get`, `list`, `create`, `patch`, `delete`, `deletecollection`).
    pub verb: &'static str,
    /// What it is done to.
    pub target: Target,
}

/// What a [`Need`] is done to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// Objects of a kind.
    Objects {
        /// The kind.
        kind: Gvk,
        /// The namespace; `None`: a cluster-scoped kind, or every namespace (a namespace whose
        /// name is known only at run time, such as a verify run's probe namespace).
        namespace: Option<String>,
        /// Only this object; `None`: any object (collections, `create`, names known only at run
        /// time).
        name: Option<String>,
        /// A subresource (`proxy`).
        subresource: Option<&'static str>,
    },
    /// A non-resource URL (`/version`).
    Url(&'static str),
}

impl Need {
    /// `verb` on the object `id` (on every object of its kind in its namespace for the verbs
    /// RBAC cannot restrict to names: `create`, `list`, `deletecollection`).
    #[must_use]
    pub fn on(verb: &'static str, id: &ObjectRef) -> Self {
        let name = (!COLLECTION_VERBS.contains(&verb)).then(|| id.name.clone());
        let target = Target::Objects { kind: id.gvk.clone(), namespace: id.namespace.clone(), name, subresource: None };
        Self { verb, target }
    }

    /// `verb` on any object of `kind` in `namespace` (`None`: cluster-scoped, or every namespace).
    #[must_use]
    pub fn any(verb: &'static str, kind: &Gvk, namespace: Option<&str>) -> Self {
        let target = Target::Objects {
            kind: kind.clone(),
            namespace: namespace.map(str::to_owned),
            name: None,
            subresource: None,
        };
        Self { verb, target }
    }

    /// `verb` on the `subresource` of the object `id` (e.g. `create` on `services/proxy`, which
    /// a POST through the proxy is authorized as). The object is named in the request path, so
    /// every verb can be restricted to it.
    #[must_use]
    pub fn on_subresource(verb: &'static str, id: &ObjectRef, subresource: &'static str) -> Self {
        let target = Target::Objects {
            kind: id.gvk.clone(),
            namespace: id.namespace.clone(),
            name: Some(id.name.clone()),
            subresource: Some(subresource),
        };
        Self { verb, target }
    }

    /// `verb` on a non-resource URL.
    #[must_use]
    pub fn url(verb: &'static str, path: &'static str) -> Self {
        Self { verb, target: Target::Url(path) }
    }

    /// The resource name of a kind, without asking the cluster: the lower-case plural
    /// (`BatchSandbox` → `batchsandboxes`), as Kubernetes derives it for built-in kinds and CRDs
    /// conventionally declare it.
    #[must_use]
    pub fn plural(kind: &Gvk) -> String {
        kube::api::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind))
            .plural
    }
}

/// Creating a SelfSubjectAccessReview: how every review here is made.
#[must_use]
pub fn review_need() -> Need {
    Need::any("create", &Gvk::new("authorization.k8s.io", "v1", "SelfSubjectAccessReview"), None)
}
