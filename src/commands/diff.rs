//! `osbx diff`: what `osbx apply` would change on the cluster.

use serde_json::json;

use super::ExitStatus;
use super::session::{prepare, runtime, start_connect};
use super::settings::DiffSettings;
use crate::changeset::Action;
use crate::cli::Output;
use crate::cluster::preflight;
use crate::deploy;
use crate::printer::Printer;

/// Run `osbx diff`.
///
/// # Errors
/// Profile, render, connection or dry-run errors (exit 2).
pub(super) fn run(settings: &DiffSettings, printer: Printer) -> anyhow::Result<ExitStatus> {
    let rt = runtime()?;
    let connecting = start_connect(&rt, &settings.connect);
    let mut prepared = prepare(&settings.profile)?;
    if let Some(key) = &settings.api_key {
        deploy::add_supplied_secrets(&prepared.loaded.profile, &mut prepared.layers, key);
    }
    rt.block_on(async {
        let (cluster, _) = connecting.await??;
        let (profile, layers) = (&prepared.loaded.profile, &prepared.layers);
        let changes = match deploy::diff(&cluster, profile, layers).await {
            Ok(changes) => changes,
            Err(e) if e.forbidden() => {
                // Name every missing permission, not only the read that was refused.
                preflight::review(&cluster, &deploy::diff_operations(profile, layers, false), "this diff").await?;
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
        match settings.output {
            Output::Json => printer.json(&json!({
                "changes": changes,
                "summary": {
                    "create": changes.count(Action::Created),
                    "change": changes.count(Action::Configured),
                    "unchanged": changes.count(Action::Unchanged),
                    "prune": changes.count(Action::Deleted),
                },
                "requests": cluster.requests(),
            })),
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
