//! The one field manager whose conflicts osbx may take over: Flux's kustomize-controller, which
//! applies the render osbx writes to git (and forces its own writes). A conflict with it alone is
//! the same render applied twice, with the server's defaults inside a list both sides own whole
//! (a LimitRange's `limits`), or Flux having applied an object between osbx's plan and its write,
//! *when* the render osbx applies is the one Flux applies: what the Flux repository's pushed HEAD
//! holds ([`FluxRender::Pushed`], which the caller finds out from the repository). Then osbx takes
//! those fields, as Flux will set them again to the same values. Otherwise Flux would put its own
//! values back, and the apply stops, naming the fields, their owner and why. A conflict with any
//! other manager stops the apply unless it is forced.

use std::future::Future;

/// The field manager of Flux's kustomize-controller.
pub(crate) const FLUX_APPLIER: &str = "kustomize-controller";

/// Whether the render osbx applies is the one Flux applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FluxRender {
    /// The Flux repository's pushed HEAD holds this render, byte for byte: Flux converges to it.
    Pushed,
    /// Nothing shows that it does; why not (`platform/x/pools.yaml differs from origin/main`).
    Unproven(String),
}

/// What a server-side apply does when another field manager owns fields it sets.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OnConflict<'a> {
    /// Take the fields (`--force-conflicts`; a diff's preview).
    Force,
    /// Stop, unless Flux's applier alone owns them and `render` is Flux's: then take them.
    Stop(&'a FluxRender),
}

/// Why a server-side apply was not made.
#[derive(Debug)]
pub(super) enum Refusal {
    /// The server's answer (a conflict with another manager among them).
    Api(kube::Error),
    /// Fields only Flux's applier owns, while the render is not shown to be the one Flux applies.
    FluxOwns {
        /// The fields, as the server names them (`.spec.limits`).
        fields: Vec<String>,
        /// Why the render is not shown to be Flux's.
        why: String,
    },
}

/// The managers a conflict message names (`conflict with "kustomize-controller": .spec.limits`).
fn conflicting_managers(message: &str) -> Vec<&str> {
    message.split("with \"").skip(1).filter_map(|rest| rest.split('"').next()).collect()
}

/// The fields a conflict message names: one after the manager (`conflict with "m": .spec.a`), or
/// a list under each manager (`conflicts with "m":\n- .spec.a\n- .spec.b`).
fn conflicting_fields(message: &str) -> Vec<&str> {
    message
        .split("with \"")
        .skip(1)
        .flat_map(|rest| {
            let after = rest.split_once("\":").map_or("", |(_, after)| after);
            let (first, lines) = after.split_once('\n').unwrap_or((after, ""));
            std::iter::once(first.trim())
                .filter(|f| !f.is_empty())
                .chain(lines.lines().filter_map(|l| l.strip_prefix("- ")).map(str::trim))
        })
        .collect()
}

/// Whether a conflict message names [`FLUX_APPLIER`] and no other manager.
fn flux_alone(message: &str) -> bool {
    let managers = conflicting_managers(message);
    !managers.is_empty() && managers.iter().all(|m| *m == FLUX_APPLIER)
}

/// Send a server-side apply (`send(force)`) as `on` says: forced, or not forced and, when it
/// conflicts with Flux's applier alone and the render is Flux's, sent again forced. Returns the
/// answer and whether it took Flux's fields.
///
/// # Errors
/// [`Refusal`]: the server's error, or the fields Flux's applier owns when the render is not
/// shown to be Flux's.
pub(super) async fn over_flux<T, Fut>(on: OnConflict<'_>, send: impl Fn(bool) -> Fut) -> Result<(T, bool), Refusal>
where
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let render = match on {
        OnConflict::Force => return send(true).await.map(|t| (t, false)).map_err(Refusal::Api),
        OnConflict::Stop(render) => render,
    };
    match send(false).await {
        Err(kube::Error::Api(s)) if s.code == 409 && flux_alone(&s.message) => match render {
            FluxRender::Pushed => send(true).await.map(|t| (t, true)).map_err(Refusal::Api),
            FluxRender::Unproven(why) => Err(Refusal::FluxOwns {
                fields: conflicting_fields(&s.message).into_iter().map(str::to_owned).collect(),
                why: why.clone(),
            }),
        },
        answer => answer.map(|t| (t, false)).map_err(Refusal::Api),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::{FluxRender, OnConflict, Refusal, over_flux};

    const ONE: &str = "Apply failed with 1 conflict: conflict with \"kustomize-controller\": .spec.limits";
    const TWO: &str = "Apply failed with 3 conflicts: conflicts with \"kustomize-controller\":\n- .spec.a\n- .spec.b\nconflicts with \"ops-team\":\n- .spec.c";

    #[test]
    fn conflicts_name_their_managers_and_fields() {
        assert_eq!(super::conflicting_managers(ONE), ["kustomize-controller"]);
        assert_eq!(super::conflicting_managers(TWO), ["kustomize-controller", "ops-team"]);
        assert_eq!(super::conflicting_fields(ONE), [".spec.limits"]);
        assert_eq!(super::conflicting_fields(TWO), [".spec.a", ".spec.b", ".spec.c"]);
        assert!(super::flux_alone(ONE) && !super::flux_alone(TWO));
        assert!(!super::flux_alone("Operation cannot be fulfilled: the object has been modified"));
    }

    fn conflict(message: &str) -> kube::Error {
        kube::Error::Api(kube::core::Status::failure(message, "Conflict").with_code(409).boxed())
    }

    /// `over_flux` against a server whose unforced apply answers `first`; the forces it sent.
    fn run(on: OnConflict<'_>, first: &str) -> (Result<(&'static str, bool), Refusal>, Vec<bool>) {
        let sent = RefCell::new(Vec::new());
        let answer = futures::executor::block_on(over_flux(on, |force| {
            sent.borrow_mut().push(force);
            let answer = if force { Ok("stored") } else { Err(conflict(first)) };
            async move { answer }
        }));
        (answer, sent.into_inner())
    }

    #[test]
    fn flux_fields_are_taken_only_when_the_render_is_pushed() {
        let (answer, sent) = run(OnConflict::Stop(&FluxRender::Pushed), ONE);
        assert!(matches!(answer, Ok(("stored", true))), "{answer:?}");
        assert_eq!(sent, [false, true]);

        let unproven = FluxRender::Unproven("nothing was pushed".into());
        let (answer, sent) = run(OnConflict::Stop(&unproven), ONE);
        let Err(Refusal::FluxOwns { fields, why }) = answer else { panic!("{answer:?}") };
        assert_eq!((fields, why.as_str()), (vec![".spec.limits".to_owned()], "nothing was pushed"));
        assert_eq!(sent, [false], "nothing forced");

        // Another manager among the owners: the server's conflict, pushed or not.
        let (answer, sent) = run(OnConflict::Stop(&FluxRender::Pushed), TWO);
        assert!(matches!(answer, Err(Refusal::Api(kube::Error::Api(ref s))) if s.code == 409), "{answer:?}");
        assert_eq!(sent, [false]);

        let (answer, sent) = run(OnConflict::Force, ONE);
        assert!(matches!(answer, Ok(("stored", false))), "{answer:?}");
        assert_eq!(sent, [true]);
    }
}
