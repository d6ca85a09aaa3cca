//! One permission ([`Need`]): a verb on objects of a kind, or on a URL. Needs are derived from
//! typed operations only ([`super::operation::Operation::needs`]); [`super::preflight`] reviews
//! them and [`crate::rbac`] turns them into roles.

use crate::object::Gvk;

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
        /// The kind the verb applies to (its group and plural name the RBAC resource).
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
    /// The resource name of a kind, without asking the cluster: the lower-case plural
    /// (`BatchSandbox` → `batchsandboxes`), as Kubernetes derives it for built-in kinds and CRDs
    /// conventionally declare it.
    #[must_use]
    pub fn plural(kind: &Gvk) -> String {
        kube::api::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind))
            .plural
    }
}
