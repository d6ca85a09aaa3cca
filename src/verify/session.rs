//! One verify run from start to cleanup: the API key, the Lifecycle API endpoint, the probe
//! namespace (after sweeping what interrupted runs left), the checks under an overall deadline,
//! and cleanup however the run ends. `osbx verify` and `osbx apply --verify` both use it.

use std::future::Future;
use std::time::Duration;

use super::endpoint::{self, Limits};
use super::settings::{Reach, Selection, Settings};
use super::{CheckResult, Ctx, Endpoint, checks, probe};
use crate::cluster::operation::Operation;
use crate::cluster::preflight::{self, PreflightError};
use crate::cluster::{Cluster, ClusterError};
use crate::components::opensandbox::OpenSandbox;
use crate::object::ObjectRef;
use crate::profile::Profile;
use crate::progress::Progress;

/// Why a verify run could not finish.
#[derive(Debug, thiserror::Error)]
pub(crate) enum VerifyError {
    /// The cluster refused or failed a request the run needs.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The user may not do everything the run needs (nothing was created).
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    /// The Lifecycle API client could not be built.
    #[error("cannot reach the Lifecycle API at {url}: {reason}")]
    Endpoint {
        /// The URL given.
        url: String,
        /// Why.
        reason: String,
    },
    /// Interrupted (Ctrl-C, SIGTERM); what the run created was removed.
    #[error("interrupted: removed the probe namespace {0} and everything the run created")]
    Interrupted(String),
    /// The overall time limit passed; what the run created was removed.
    #[error("the verify run did not finish within {0:?}")]
    TimedOut(Duration),
    /// A serving run found no verdict to give: the checks it runs itself select none, and no
    /// report of the layer's Job or CronJob at this revision and criteria exists yet (or any
    /// more). Silence is not a PASS.
    #[error(
        "no verdict: the checks this pod runs select none, and no report of the acceptance Job or CronJob at revision {0} exists yet"
    )]
    NoVerdict(String),
}

/// A run whose probe namespace exists.
pub(crate) struct Session {
    ctx: Ctx,
    settings: Settings,
    flux_objects: Vec<ObjectRef>,
    /// Namespaces outside the run's own where it creates probes (the SPIFFE smoke namespace).
    extra_namespaces: Vec<String>,
    /// What earlier interrupted runs left and this one removed.
    pub swept: Vec<String>,
}

impl Session {
    /// Prepare a run: review every permission the selected checks need (before anything is
    /// created), find the API key, sweep what interrupted runs left, create the probe namespace.
    /// `flux_objects` are the Flux objects the profile renders.
    ///
    /// # Errors
    /// [`VerifyError`] when a permission is missing, the namespace cannot be created or the
    /// endpoint is unusable.
    pub(crate) async fn start(
        cluster: &Cluster,
        profile: &Profile,
        flux_objects: Vec<ObjectRef>,
        mut settings: Settings,
    ) -> Result<Self, VerifyError> {
        if settings.read_only {
            // Only what changes nothing runs (a selection of none is the caller's to avoid).
            let only = read_only_ids(profile, &settings.selection, &settings.reach());
            settings.selection = Selection { only, skip: Vec::new(), bench: false };
        }
        let planned = operations(profile, &flux_objects, &settings.selection, &settings.reach());
        preflight::review(cluster, &planned, "this verify run").await?;
        let key = endpoint::api_key(cluster, profile, &settings.api_key).await;
        let endpoint = match &settings.server_url {
            Some(url) => {
                Endpoint::direct(url, key, Duration::from_secs(300), Limits::new(cluster.qps, cluster.concurrency))
                    .map_err(|e| VerifyError::Endpoint { url: url.clone(), reason: e.to_string() })?
            }
            None => Endpoint::proxy(
                cluster.client.clone(),
                &profile.sections.opensandbox.server_service(),
                OpenSandbox::SERVER_PORT,
                key,
            ),
        };
        let mut run =
            probe::Run::new(profile.verify.probe_deadline_seconds, settings.timeout, settings.probe_namespace.clone());
        run.pull_secrets.clone_from(&profile.images.pull_secrets);
        let extra_namespaces = extra_namespaces(profile);
        let mut swept = Vec::new();
        if !settings.read_only {
            let super::sweep::Swept { removed, live_runs } =
                super::sweep::sweep(cluster, &run, &extra_namespaces).await;
            swept.extend(removed);
            if settings.probe_namespace.is_none() {
                swept.extend(checks::sweep_sandboxes(cluster, profile, &live_runs).await);
            }
            run.create_namespace(cluster).await?;
        }
        let ctx = Ctx {
            cluster: cluster.clone(),
            profile: profile.clone(),
            run,
            endpoint,
            selection: settings.selection.clone(),
        };
        Ok(Self { ctx, settings, flux_objects, extra_namespaces, swept })
    }

    /// This run's id.
    #[must_use]
    pub(crate) fn id(&self) -> &str {
        &self.ctx.run.id
    }

    /// Where this run reaches the Lifecycle API (a clone shares its request counts).
    #[must_use]
    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.ctx.endpoint
    }

    /// This run's probe namespace.
    #[must_use]
    pub(crate) fn namespace(&self) -> &str {
        &self.ctx.run.namespace
    }

    /// Run the selected checks concurrently until they finish, the run's time limit passes, or
    /// `interrupted` resolves; then delete everything the run created.
    ///
    /// # Errors
    /// [`VerifyError::Interrupted`] or [`VerifyError::TimedOut`].
    pub(crate) async fn run(
        self,
        progress: &dyn Progress,
        interrupted: impl Future<Output = ()>,
    ) -> Result<Vec<CheckResult>, VerifyError> {
        let catalogue = checks::catalogue(&self.ctx.profile, self.flux_objects.clone(), &self.settings.selection);
        let timeout = self.settings.timeout;
        let checks = super::run(&self.ctx, &catalogue, &self.settings.selection, progress);
        let outcome = tokio::select! {
            results = tokio::time::timeout(timeout, checks) => Some(results),
            () = interrupted => None,
        };
        if !self.settings.read_only {
            self.ctx.run.cleanup(&self.ctx.cluster, &self.extra_namespaces).await;
        }
        match outcome {
            None => Err(VerifyError::Interrupted(self.ctx.run.namespace.clone())),
            Some(Err(_)) => Err(VerifyError::TimedOut(timeout)),
            Some(Ok(results)) => Ok(results),
        }
    }
}

/// Namespaces outside the run's own where it creates probes (the SPIFFE smoke namespace).
fn extra_namespaces(profile: &Profile) -> Vec<String> {
    profile.spiffe_smoke().into_iter().map(|s| s.namespace).collect()
}

/// Everything a run of the `selection` that reaches the platform as `reach` does: its
/// namespace, sweep and cleanup, and what each selected check does ([`super::Check::operations`]).
#[must_use]
pub(crate) fn operations(
    profile: &Profile,
    flux_objects: &[ObjectRef],
    selection: &Selection,
    reach: &Reach,
) -> Vec<Operation> {
    let mut out = Vec::new();
    if !reach.read_only {
        out.extend(probe::run_operations(&extra_namespaces(profile), reach.probes.as_deref()));
        // A run given its probe namespace (the acceptance layer's Job and CronJob) sweeps no
        // earlier run's sandboxes: RBAC cannot keep a `deletecollection` to the runs' label, so
        // that permission would delete every user's sandboxes. A run's sandboxes expire without
        // it: it creates them with a 600 s timeout, the server sets their `spec.expireTime` from
        // it, and the OpenSandbox controller deletes a BatchSandbox at that time.
        if reach.probes.is_none() {
            out.extend(checks::sweeping_sandboxes(profile));
        }
    }
    for check in checks::catalogue(profile, flux_objects.to_vec(), selection) {
        if check.ids().iter().any(|id| selection.selects(id)) {
            let ops = check_operations(check.as_ref(), profile, reach);
            if !reach.read_only || ops.iter().all(Operation::changes_nothing) {
                out.extend(ops);
            }
        }
    }
    out
}

/// What `check` does for `profile` reached as `reach`: a probe in the run's own namespace goes
/// to the one given, when it is.
fn check_operations(check: &dyn super::Check, profile: &Profile, reach: &Reach) -> Vec<Operation> {
    check
        .operations(profile, reach)
        .into_iter()
        .map(|op| match op {
            Operation::Probe(None) => Operation::Probe(reach.probes.clone()),
            op => op,
        })
        .collect()
}

/// The ids of `selection`'s checks that change nothing in the cluster (their operations only
/// read), what a `--read-only` run runs; in the catalogue's order.
#[must_use]
pub(crate) fn read_only_ids(profile: &Profile, selection: &Selection, reach: &Reach) -> Vec<String> {
    checks::catalogue(profile, Vec::new(), selection)
        .iter()
        .filter(|c| check_operations(c.as_ref(), profile, reach).iter().all(Operation::changes_nothing))
        .flat_map(|c| c.ids())
        .filter(|id| selection.selects(id))
        .collect()
}

/// A selection a run cannot honour: a check id (or prefix) no check of the profile has, or
/// nothing selected at all; never run, so that a typo is not an empty run that passes.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SelectionError {
    /// `--only`/`--skip` (or `acceptance.only`/`skip`) names no check of this profile.
    #[error("{option} {id:?}: no check of this profile has that id or starts with it; its checks: {known}")]
    Unknown {
        /// The option that named it.
        option: &'static str,
        /// What it named.
        id: String,
        /// The profile's check ids, comma-separated.
        known: String,
    },
    /// Every check is left out.
    #[error("--only and --skip select none of this profile's checks ({known}): a run would prove nothing")]
    Empty {
        /// The profile's check ids, comma-separated.
        known: String,
    },
}

/// What is wrong with `selection` of `profile`'s checks: each id (or prefix) that names no check,
/// with its list (`only` or `skip`) and place there; whether it selects none; the ids it knows.
struct Problems {
    unknown: Vec<(&'static str, usize, String)>,
    empty: bool,
    known: Vec<String>,
}

fn problems(profile: &Profile, selection: &Selection) -> Problems {
    let everything = Selection { only: Vec::new(), skip: Vec::new(), bench: true };
    let known: Vec<String> = checks::catalogue(profile, Vec::new(), &everything).iter().flat_map(|c| c.ids()).collect();
    let mut unknown = Vec::new();
    for (list, named) in [("only", &selection.only), ("skip", &selection.skip)] {
        for (i, id) in named.iter().enumerate() {
            if !known.iter().any(|k| Selection::matches(id, k)) {
                unknown.push((list, i, id.clone()));
            }
        }
    }
    let empty = !known.iter().any(|id| selection.selects(id));
    Problems { unknown, empty, known }
}

/// Check `selection` against `profile`'s checks before a run: every id it names is a check id of
/// the profile or a prefix of one (`kata` for every `kata.*`), and it selects at least one.
///
/// # Errors
/// [`SelectionError`], naming the known ids.
pub(crate) fn check_selection(profile: &Profile, selection: &Selection) -> Result<(), SelectionError> {
    let found = problems(profile, selection);
    if let Some((list, _, id)) = found.unknown.into_iter().next() {
        let option = if list == "only" { "--only" } else { "--skip" };
        return Err(SelectionError::Unknown { option, id, known: found.known.join(", ") });
    }
    if found.empty {
        return Err(SelectionError::Empty { known: found.known.join(", ") });
    }
    Ok(())
}

/// The acceptance section's selection (`acceptance.only`, `acceptance.skip`) against `profile`'s
/// checks, as the in-cluster runs would make it: each problem as its field path and message (the
/// render asks this of an acceptance layer, [`crate::render::InCluster`], so that a profile whose
/// in-cluster run would prove nothing is refused where it is loaded, not in the cluster).
#[must_use]
pub(crate) fn acceptance_selection(profile: &Profile) -> Vec<(String, String)> {
    let Some(a) = &profile.sections.acceptance else { return Vec::new() };
    let selection = Selection::of_acceptance(a);
    let found = problems(profile, &selection);
    let known = found.known.join(", ");
    let mut out: Vec<(String, String)> = found
        .unknown
        .into_iter()
        .map(|(list, i, id)| {
            let message = format!("{id:?} is no check of this profile and no prefix of one; its checks: {known}");
            (format!("acceptance.{list}[{i}]"), message)
        })
        .collect();
    if out.is_empty() && found.empty {
        let field = if a.only.is_empty() { "acceptance.skip" } else { "acceptance.only" };
        out.push((
            field.to_owned(),
            format!("`only` and `skip` select none of this profile's checks ({known}): its runs would prove nothing"),
        ));
    }
    out
}

/// The Pod Security level the acceptance layer's probe namespace needs for the checks its runs
/// select, and why: `privileged` when a selected check's probe pods use the node
/// ([`super::Check::uses_the_node`]), else `baseline` (the in-sandbox probes run as root). The
/// render asks this of an acceptance layer ([`crate::render::InCluster`]).
#[must_use]
pub(crate) fn probe_security(profile: &Profile) -> (&'static str, String) {
    let Some(a) = &profile.sections.acceptance else { return ("baseline", "no acceptance section".to_owned()) };
    let selection = Selection::of_acceptance(a);
    let on_nodes: Vec<String> = checks::catalogue(profile, Vec::new(), &selection)
        .iter()
        .filter(|c| c.uses_the_node(profile))
        .flat_map(|c| c.ids())
        .filter(|id| selection.selects(id))
        .collect();
    if on_nodes.is_empty() {
        ("baseline", "no selected check runs a pod that uses its node".to_owned())
    } else {
        ("privileged", format!("{} run pods that use their node", on_nodes.join(", ")))
    }
}

/// The ids of the checks `selection` selects for `profile`, in the catalogue's order: what a run
/// with it reports on.
#[must_use]
pub(crate) fn selected_ids(profile: &Profile, selection: &Selection) -> Vec<String> {
    checks::catalogue(profile, Vec::new(), selection)
        .iter()
        .flat_map(|c| c.ids())
        .filter(|id| selection.selects(id))
        .collect()
}
