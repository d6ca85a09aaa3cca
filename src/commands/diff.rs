//! `osbx diff`: what `osbx apply` would change on the cluster, or (`--base REF`) what a change to
//! the profile does compared with what the Flux repository holds at REF, offline.

use serde_json::json;

use super::ExitStatus;
use super::session::{self, prepare, runtime, start_connect};
use super::settings::{DiffSettings, LiveDiffSettings, ReviewSettings};
use crate::changeset::Action;
use crate::cli::{DiffOutput, Output};
use crate::deploy;
use crate::printer::Printer;
use crate::review;

/// Run `osbx diff`.
///
/// # Errors
/// Profile, render, connection or dry-run errors (exit 2).
pub(super) fn run(settings: &DiffSettings, printer: Printer) -> anyhow::Result<ExitStatus> {
    match settings {
        DiffSettings::Live(live) => run_live(live, printer),
        DiffSettings::Review(review) => run_review(review, printer),
    }
}

/// `osbx diff --base`: the offline review (no cluster).
fn run_review(settings: &ReviewSettings, printer: Printer) -> anyhow::Result<ExitStatus> {
    let renderer = super::renderer(settings.templates.as_deref())?;
    let progress = printer.progress();
    let result = review::review(&settings.review, &renderer, &progress);
    progress.finish();
    let review = result?;
    match settings.output {
        DiffOutput::Json => printer.json(&review),
        DiffOutput::Markdown => printer.data(review::markdown(&review, settings.max_size).trim_end()),
        DiffOutput::Text => printer.review(&review),
    }
    Ok(if review.has_changes() { ExitStatus::Failure } else { ExitStatus::Success })
}

/// `osbx diff` against a cluster.
fn run_live(settings: &LiveDiffSettings, printer: Printer) -> anyhow::Result<ExitStatus> {
    let rt = runtime()?;
    let connecting = start_connect(&rt, &settings.connect);
    let mut prepared = prepare(&settings.profile, Some(&settings.repo))?;
    let given = deploy::Given {
        value: settings.api_key.as_deref(),
        age_key_file: settings.age_key_file.as_deref(),
        cluster: None,
        required: false,
    };
    session::supply(&mut prepared, given, printer)?;
    rt.block_on(async {
        let (cluster, _) = connecting.await??;
        let (profile, layers) = (&prepared.loaded.profile, &prepared.layers);
        let changes = deploy::compare(deploy::Before::Cluster(&cluster, profile), layers).await?;
        match settings.output {
            Output::Json => printer.json(&crate::timing::done(&json!({
                "changes": changes,
                "summary": {
                    "create": changes.count(Action::Created),
                    "change": changes.count(Action::Configured),
                    "unchanged": changes.count(Action::Unchanged),
                    "prune": changes.count(Action::Deleted),
                },
                "requests": cluster.requests(),
            }))),
            Output::Text => {
                for c in &changes.0 {
                    if let Some(diff) = &c.diff {
                        printer.object_diff(&c.id.to_string(), &c.action.to_string(), diff);
                    }
                }
                printer.data(&format!(
                    "{} to create, {} to change, {} unchanged, {} to prune",
                    changes.count(Action::Created),
                    changes.count(Action::Configured),
                    changes.count(Action::Unchanged),
                    changes.count(Action::Deleted)
                ));
            }
        }
        Ok(if changes.has_changes() { ExitStatus::Failure } else { ExitStatus::Success })
    })
}
