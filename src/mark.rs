//! How osbx marks what it writes to a cluster, stated once: the name it writes under (field
//! manager, `app.kubernetes.io/managed-by`), and the annotation it reads back to skip dry-runs.

/// osbx's name in a cluster: the field manager of every write, and the `managed-by` value of the
/// objects apply creates beside the render (the inventory ConfigMap, the API key Secret).
pub(crate) const OSBX: &str = "osbx";

/// The field manager of every osbx write.
pub(crate) const FIELD_MANAGER: &str = OSBX;

/// The label that says which tool manages an object.
pub(crate) const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// Annotation with a hash of the object osbx last applied: when the live object still carries
/// it and still holds every value osbx sets, nothing can have changed and no dry-run is needed.
pub(crate) const APPLIED_HASH: &str = "osbx.io/applied-hash";

/// The labels of an object osbx creates beside the render.
#[must_use]
pub(crate) fn owned_labels() -> std::collections::BTreeMap<String, String> {
    [(MANAGED_BY.to_owned(), OSBX.to_owned())].into()
}
