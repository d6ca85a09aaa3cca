//! `osbx status`: the running platform at a glance (read-only), once or `--watch`ed.

use super::ExitStatus;
use super::session::{prepare, runtime, start_connect};
use super::settings::StatusSettings;
use crate::cli::StatusOutput;
use crate::overview::{self, Overview};
use crate::printer::Printer;

/// Run `osbx status`.
///
/// # Errors
/// Profile or render errors, an unreachable cluster, a refused read (exit 2).
pub(super) fn run(settings: &StatusSettings, printer: Printer) -> anyhow::Result<ExitStatus> {
    let rt = runtime()?;
    let connecting = start_connect(&rt, &settings.connect);
    let prepared = prepare(&settings.profile, None)?;
    let (profile, layers) = (&prepared.loaded.profile, &prepared.layers);
    rt.block_on(async {
        let (cluster, _) = connecting.await??;
        let repo = Some(settings.repo.as_path());
        if !settings.watch {
            let o = overview::read(&cluster, profile, layers, repo, settings.server_url.as_deref()).await?;
            show(&o, settings.output, printer);
            return Ok(exit(&o));
        }
        let mut changes = overview::watch(&cluster, profile).await?;
        let mut shown: Vec<String> = Vec::new();
        loop {
            let o = overview::read(&cluster, profile, layers, repo, settings.server_url.as_deref()).await?;
            let lines = lines(&o, settings.output);
            printer.redraw(&shown, &lines);
            shown = lines;
            tokio::select! {
                () = super::session::interrupted() => return Ok(exit(&o)),
                more = changes.next_change() => if !more { return Ok(exit(&o)) },
            }
        }
    })
}

fn exit(o: &Overview) -> ExitStatus {
    if o.ready { ExitStatus::Success } else { ExitStatus::Failure }
}

fn lines(o: &Overview, output: StatusOutput) -> Vec<String> {
    match output {
        StatusOutput::Text => overview::text(o),
        StatusOutput::Json => vec![serde_json::to_string(o).unwrap_or_default()],
        StatusOutput::Mermaid => overview::mermaid(o).lines().map(str::to_owned).collect(),
        StatusOutput::Dot => overview::dot(o).lines().map(str::to_owned).collect(),
    }
}

fn show(o: &Overview, output: StatusOutput, printer: Printer) {
    match output {
        StatusOutput::Json => printer.json(o),
        _ => {
            for line in lines(o, output) {
                printer.data(&line);
            }
        }
    }
}
