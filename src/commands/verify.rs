//! `osbx verify`: the acceptance checks against a platform Flux has reconciled.

use super::ExitStatus;
use super::session::{self, prepare, runtime, start_connect};
use super::settings::VerifySettings;
use crate::printer::Printer;
use crate::verify::in_cluster::serve::{self, RunEnd, Runs};

/// Run `osbx verify`.
///
/// # Errors
/// Bad input, an unreachable cluster, or an interrupted run (exit 2).
pub(super) fn run(settings: &VerifySettings, printer: Printer) -> anyhow::Result<ExitStatus> {
    let rt = runtime()?;
    let connecting = start_connect(&rt, &settings.connect);
    let prepared = prepare(&settings.profile, None)?;
    crate::verify::session::check_selection(&prepared.loaded.profile, &settings.verify.run.selection)?;
    rt.block_on(async {
        let (cluster, _) = connecting.await??;
        match (settings.serve, &settings.verify.publish) {
            (Some(serve), Some(publish)) => {
                let runs = Runs {
                    cluster: &cluster,
                    profile: &prepared.loaded.profile,
                    flux_objects: session::checked_flux_objects(&prepared, true),
                    settings: settings.verify.run.clone(),
                    publish: publish.clone(),
                };
                printer.action(&format!(
                    "serving metrics on http://{}/metrics, a run every {:?}",
                    serve.addr, serve.interval
                ));
                let ended = |end: RunEnd<'_>| match end {
                    RunEnd::Finished(report, None) => {
                        printer.action(&format!("run {}: {}", report.run, report.summary));
                    }
                    RunEnd::Finished(report, Some(e)) => {
                        printer.warn(&format!(
                            "run {}: {}; the report was not published: {e}",
                            report.run, report.summary
                        ));
                    }
                    RunEnd::Failed(e) => printer.warn(&format!("a run reached no verdicts: {e}")),
                };
                Box::pin(serve::serve(runs, serve, &crate::progress::Silent, &ended, session::interrupted())).await?;
                Ok(ExitStatus::Success)
            }
            (Some(_), None) => anyhow::bail!("--serve publishes each run: give --publish NAMESPACE/NAME too"),
            (None, _) => {
                Box::pin(session::verify(&cluster, &prepared, &settings.verify, settings.output, printer)).await
            }
        }
    })
}
