//! The one field manager whose conflicts osbx takes over: Flux's kustomize-controller, which
//! applies the render osbx writes to git (and forces its own writes). A conflict with it alone is
//! the same render applied twice, with the server's defaults inside a list both sides own whole
//! (a LimitRange's `limits`), or Flux having applied an object between osbx's plan and its write:
//! osbx takes those fields, as Flux would take them back. A conflict with any other manager stops
//! the apply.

use std::future::Future;

/// The field manager of Flux's kustomize-controller.
const FLUX_APPLIER: &str = "kustomize-controller";

/// The managers a conflict message names (`conflict with "kustomize-controller": .spec.limits`).
fn conflicting_managers(message: &str) -> Vec<&str> {
    message.split("with \"").skip(1).filter_map(|rest| rest.split('"').next()).collect()
}

/// Whether a conflict message names [`FLUX_APPLIER`] and no other manager.
fn flux_alone(message: &str) -> bool {
    let managers = conflicting_managers(message);
    !managers.is_empty() && managers.iter().all(|m| *m == FLUX_APPLIER)
}

/// Send a server-side apply (`send(force)`), with `force` as asked; when it conflicts with Flux's
/// applier alone, send it again forced. Returns the answer and whether it took Flux's fields.
pub(super) async fn over_flux<T, Fut>(force: bool, send: impl Fn(bool) -> Fut) -> (Result<T, kube::Error>, bool)
where
    Fut: Future<Output = Result<T, kube::Error>>,
{
    match send(force).await {
        Err(kube::Error::Api(s)) if !force && s.code == 409 && flux_alone(&s.message) => (send(true).await, true),
        answer => (answer, false),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn conflicts_name_their_managers() {
        let one = "Apply failed with 1 conflict: conflict with \"kustomize-controller\": .spec.limits";
        assert_eq!(super::conflicting_managers(one), ["kustomize-controller"]);
        let two = "Apply failed with 2 conflicts: conflicts with \"kustomize-controller\":\n- .spec.a\nconflicts with \"ops-team\":\n- .spec.b";
        assert_eq!(super::conflicting_managers(two), ["kustomize-controller", "ops-team"]);
        assert!(super::flux_alone(one) && !super::flux_alone(two));
        assert!(!super::flux_alone("Operation cannot be fulfilled: the object has been modified"));
    }
}
