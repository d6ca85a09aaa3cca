//! `osbx rollout`: the fleet's waves, each committed, reconciled and verified in turn.

use super::ExitStatus;
use super::session::{interrupted, runtime};
use super::settings::RolloutSettings;
use crate::cli::Output;
use crate::fleet;
use crate::printer::Printer;
use crate::rollout::{self, WaveState};

/// Run `osbx rollout`.
///
/// # Errors
/// Bad input, an unreachable cluster, a missing permission, git refusing (exit 2).
pub(super) fn run(settings: &RolloutSettings, printer: Printer) -> anyhow::Result<ExitStatus> {
    let progress = printer.progress();
    let fleet = fleet::load(&settings.fleet, &progress)?;
    let renderer = crate::commands::renderer(settings.templates.as_deref())?;
    let rt = runtime()?;
    let interrupt = || -> futures::future::BoxFuture<'static, ()> { Box::pin(interrupted()) };
    let report = rt.block_on(rollout::run(&fleet, &renderer, &settings.rollout, &progress, &interrupt));
    progress.finish();
    let report = report?;
    match settings.output {
        Output::Json => printer.json(&report),
        Output::Text => {
            for wave in &report.waves {
                let state = match wave.state {
                    WaveState::Done => "done earlier",
                    WaveState::Committed => "up to date",
                    WaveState::Pending => "pending",
                    WaveState::Passed => "passed",
                    WaveState::Failed => "FAILED",
                };
                let commit =
                    wave.commit.as_deref().map_or(String::new(), |c| format!(", commit {}", &c[..c.len().min(12)]));
                printer.data(&format!(
                    "wave {}: {} ({}; {} file(s){commit})",
                    wave.name,
                    wave.clusters.join(", "),
                    state,
                    wave.files
                ));
                for c in &wave.results {
                    let detail = match &c.failure {
                        None => "passed".to_owned(),
                        Some(f) => format!("{}: {}", f.check, f.evidence),
                    };
                    printer.data(&format!("  {}: {detail}", c.cluster));
                }
            }
        }
    }
    if settings.rollout.dry_run {
        printer.success(&if report.completed {
            format!("fleet {}: nothing to roll out", report.fleet)
        } else {
            format!("fleet {}: dry run, nothing written", report.fleet)
        });
        return Ok(ExitStatus::Success);
    }
    if let Some((wave, cluster, failure)) = report.stopped_at() {
        let why = failure.diagnosis.as_deref().map_or(String::new(), |d| format!(" ({d})"));
        printer.failure(&format!(
            "rollout stopped at wave {wave}: cluster {cluster} failed {}: {}{why}; later waves untouched. Fix it, then rerun with --resume",
            failure.check, failure.evidence
        ));
        return Ok(ExitStatus::Failure);
    }
    printer.success(&format!("fleet {}: every wave rolled out and verified", report.fleet));
    Ok(ExitStatus::Success)
}
