//! What the cluster commands share: load and render the profile, connect (while the profile
//! renders), and run and report a verify run (`verify`, `apply --verify`).

use anyhow::Context as _;

use super::ExitStatus;
use super::settings::{ProfileSettings, VerifyRunSettings};
use crate::cli::Output;
use crate::cluster::{Cluster, ConnectOptions, preflight};
use crate::deploy::{self, Layer};
use crate::printer::Printer;
use crate::profile::{self, LoadedProfile};
use crate::render::Rendered;
use crate::verify::in_cluster::publish::{self, Published};
use crate::verify::{self, report, session::Session};

/// The profile, rendered into layers.
pub(super) struct Prepared {
    /// The profile.
    pub loaded: LoadedProfile,
    /// Its layers in apply order.
    pub layers: Vec<Layer>,
    /// The render the layers come from (its files, as `osbx render` writes them).
    pub rendered: Rendered,
}

/// Load, validate and render a profile (no cluster needed), with the sealed Secret files of the
/// Flux repository at `repo` when it keeps its Secrets in git (`secrets.sops`).
///
/// # Errors
/// Profile, template or render errors.
pub(super) fn prepare(settings: &ProfileSettings, repo: Option<&std::path::Path>) -> anyhow::Result<Prepared> {
    // The templates compile while the profile loads.
    let (loaded, renderer) = std::thread::scope(|scope| {
        let renderer = scope.spawn(|| crate::commands::renderer(settings.templates.as_deref()));
        let loaded = profile::load(&settings.source);
        (loaded, renderer.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
    });
    let mut loaded = loaded?;
    if let Some(repo) = repo {
        crate::secrets::attach(&mut loaded, repo)?;
    }
    let rendered = renderer?.render(&loaded)?;
    let layers = deploy::layers(&loaded.profile, &rendered);
    crate::timing::mark("rendered");
    Ok(Prepared { loaded, layers, rendered })
}

/// Add the Secrets a run supplies to the render ([`deploy::supply`]), saying what it warns of.
///
/// # Errors
/// What [`deploy::supply`] refuses.
pub(super) fn supply(prepared: &mut Prepared, given: deploy::Given<'_>, printer: Printer) -> anyhow::Result<()> {
    for warning in deploy::supply(&prepared.loaded, &mut prepared.layers, given)? {
        printer.warn(&warning);
    }
    Ok(())
}

/// A runtime for this command.
///
/// # Errors
/// When the runtime cannot start.
pub(super) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

/// Connecting, started on `rt` so that it runs while the caller renders the profile: the
/// kubeconfig, then the server version and discovery (see [`preflight::warm_up`]). Dropping the
/// runtime (a profile error) abandons it.
pub(super) fn start_connect(
    rt: &tokio::runtime::Runtime,
    options: &ConnectOptions,
) -> tokio::task::JoinHandle<anyhow::Result<(Cluster, preflight::Report)>> {
    let options = options.clone();
    rt.spawn(async move {
        let cluster = Cluster::connect(&options).await.map_err(|e| match e {
            // The context was asked for with --context: say what to ask for instead.
            crate::cluster::ClusterError::NoContext { context: Some(_), current: false, .. } => {
                anyhow::anyhow!("{e}; give --context one of them, or --kubeconfig the file that has it")
            }
            e => e.into(),
        })?;
        let report = preflight::warm_up(&cluster).await?;
        Ok((cluster, report))
    })
}

/// Run the acceptance checks and print the report; 0 when every check passed, 1 when not.
///
/// # Errors
/// When the run cannot start, is interrupted or runs out of time (exit 2).
pub(super) async fn verify(
    cluster: &Cluster,
    prepared: &Prepared,
    settings: &VerifyRunSettings,
    output: Output,
    printer: Printer,
) -> anyhow::Result<ExitStatus> {
    if let Some(publishing) = &settings.publish {
        publish::review(cluster, publishing).await?;
    }
    let started = std::time::SystemTime::now();
    let flux_objects = checked_flux_objects(prepared, settings.publish.is_some());
    let session = Session::start(cluster, &prepared.loaded.profile, flux_objects, settings.run.clone()).await?;
    if !session.swept.is_empty() {
        printer.warn(&format!("removed what earlier interrupted runs left: {}", session.swept.join(", ")));
    }
    printer.action(&format!("verify run {} (probe namespace {})", session.id(), session.namespace()));
    let run_id = session.id().to_owned();
    let endpoint = session.endpoint().clone();
    let progress = printer.progress();
    let results = session.run(&progress, interrupted()).await;
    progress.finish();
    let results = results?;
    if let Some(path) = &settings.junit {
        std::fs::write(path, report::junit(&results)).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(publishing) = &settings.publish {
        let criteria = prepared.loaded.profile.criteria();
        let published = Published::of(&run_id, publishing, &criteria, started, &results);
        publish::publish(cluster, &publishing.report, &published).await?;
        printer.action(&format!("published the report to {} as {}", publishing.report, publishing.writer));
    }
    match output {
        Output::Json => {
            let requests = report::Requests { api: cluster.requests(), lifecycle: endpoint.requests() };
            printer.json(&report::json(&run_id, &results, &requests));
        }
        Output::Text => {
            for line in report::table(&results) {
                printer.data(&line);
            }
            printer.data(&report::summary(&results));
        }
    }
    Ok(if verify::all_passed(&results) { ExitStatus::Success } else { ExitStatus::Failure })
}

/// The Flux objects a run checks: every layer's, except, for a run in the cluster (one that
/// publishes), the acceptance layer's own (its Ready is this run's verdict).
pub(super) fn checked_flux_objects(prepared: &Prepared, in_cluster: bool) -> Vec<crate::object::ObjectRef> {
    let own = in_cluster.then(|| prepared.loaded.profile.acceptance()).flatten().map(|(_, layer)| layer.name.as_str());
    let layers: Vec<Layer> = prepared.layers.iter().filter(|l| Some(l.name.as_str()) != own).cloned().collect();
    deploy::flux_objects(&layers)
}

/// Resolves on Ctrl-C or SIGTERM.
pub(super) async fn interrupted() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
            let _ = ctrl_c.await;
            return;
        };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
