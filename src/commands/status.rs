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

/// At most this many clusters of a fleet are read at once.
const CLUSTERS_AT_ONCE: usize = 8;

/// `osbx status --fleet`: one line per cluster, the clusters read concurrently (bounded); a
/// cluster that cannot be read is shown as such and the others still are.
fn fleet(settings: &StatusSettings, path: &std::path::Path, printer: Printer) -> anyhow::Result<ExitStatus> {
    use futures::StreamExt as _;
    let rt = runtime()?;
    let progress = printer.progress();
    let fleet = crate::fleet::load(path, &progress)?;
    progress.finish();
    let renderer = crate::render::Renderer::new(settings.profile.templates.as_deref())?;
    let mut members = Vec::new();
    for (member, reach) in fleet.members.iter().zip(&fleet.reach) {
        let rendered = renderer.render(member)?;
        members.push((member, reach, crate::deploy::layers(&member.profile, &rendered)));
    }
    let repo = settings.repo.as_path();
    let lines: Vec<overview::ClusterLine> = rt.block_on(
        futures::stream::iter(members.iter().map(|(member, reach, layers)| async move {
            let name = &member.profile.cluster.name;
            let options = crate::cluster::ConnectOptions {
                kubeconfig: reach.kubeconfig.clone().or_else(|| settings.connect.kubeconfig.clone()),
                context: Some(reach.context.clone()),
                ..settings.connect.clone()
            };
            let read = async {
                let cluster = crate::cluster::Cluster::connect(&options).await?;
                anyhow::Ok(overview::read(&cluster, &member.profile, layers, Some(repo), None).await?)
            };
            match read.await {
                Ok(o) => overview::ClusterLine::of(&o),
                Err(e) => overview::ClusterLine::unreadable(name, format!("{e:#}")),
            }
        }))
        .buffered(CLUSTERS_AT_ONCE)
        .collect(),
    );
    if settings.output == StatusOutput::Json {
        printer.json(&serde_json::json!({"fleet": fleet.name, "clusters": lines}));
    } else {
        let width = lines.iter().map(|l| l.cluster.len()).max().unwrap_or(0);
        for l in &lines {
            printer.data(&overview::fleet_line(l, width));
        }
    }
    Ok(if lines.iter().any(|l| l.error.is_some()) {
        ExitStatus::Error
    } else if lines.iter().all(|l| l.ready) {
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
