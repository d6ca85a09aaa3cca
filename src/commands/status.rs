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
    if let Some(path) = &settings.fleet {
        return fleet(settings, path, printer);
    }
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
        // Watching from before the first read, so that nothing changes unseen in between.
        let mut changes = overview::watch(&cluster, profile, layers);
        let read = || overview::read(&cluster, profile, layers, repo, settings.server_url.as_deref());
        let mut o = read().await?;
        let mut shown: Vec<String> = Vec::new();
        let mut retry = overview::Backoff::new(std::time::Duration::from_secs(30));
        loop {
            let lines = lines(&o, settings.output);
            if settings.output == StatusOutput::Json {
                // One document a line, each time it changes: for a reader, not a screen.
                if lines != shown {
                    for l in &lines {
                        printer.data(l);
                    }
                }
            } else {
                printer.redraw(&shown, &lines);
            }
            shown = lines;
            // Until something changes (a watch's trouble is said, and the watch goes on).
            loop {
                tokio::select! {
                    () = super::session::interrupted() => return Ok(exit(&o)),
                    batch = changes.next() => match batch {
                        None => return Ok(exit(&o)),
                        Some(batch) => {
                            for t in &batch.troubles {
                                printer.warn(t);
                            }
                            if !batch.troubles.is_empty() && Printer::redraws_in_place() {
                                // The warning moved the frame: the next is drawn below it.
                                shown.clear();
                            }
                            if batch.changed {
                                break;
                            }
                        }
                    },
                }
            }
            // A read that fails now (the API server restarting, a connection lost) is said and
            // tried again after a delay; the last overview stays shown.
            o = loop {
                match read().await {
                    Ok(new) => {
                        retry.reset();
                        break new;
                    }
                    Err(e) => {
                        let delay = retry.delay();
                        printer.warn(&format!("reading the platform: {e:#} (again in {:.1}s)", delay.as_secs_f64()));
                        if Printer::redraws_in_place() {
                            shown.clear();
                        }
                        tokio::select! {
                            () = super::session::interrupted() => return Ok(exit(&o)),
                            () = tokio::time::sleep(delay) => {}
                        }
                    }
                }
            };
        }
    })
}

/// `osbx status --fleet`: one line per cluster ([`overview::read_fleet`]).
fn fleet(settings: &StatusSettings, path: &std::path::Path, printer: Printer) -> anyhow::Result<ExitStatus> {
    let rt = runtime()?;
    let progress = printer.progress();
    let fleet = crate::fleet::load(path, &progress)?;
    progress.finish();
    let renderer = crate::commands::renderer(settings.profile.templates.as_deref())?;
    let view = rt.block_on(overview::read_fleet(&fleet, &renderer, &settings.connect, &settings.repo))?;
    if settings.output == StatusOutput::Json {
        printer.json(&view);
    } else {
        let width = view.clusters.iter().map(|l| l.cluster.len()).max().unwrap_or(0);
        for l in &view.clusters {
            printer.data(&overview::fleet_line(l, width));
        }
    }
    Ok(if view.unreadable() {
        ExitStatus::Error
    } else if view.ready() {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
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
        StatusOutput::Json => printer.json(&crate::timing::done(o)),
        _ => {
            for line in lines(o, output) {
                printer.data(&line);
            }
        }
    }
}
