//! `osbx apply`: preflight, staged server-side apply layer by layer, prune, wait.

use crate::changeset::Action;
use crate::cli::{ApplyArgs, Output};
use crate::cluster::preflight;
use crate::commands::ExitStatus;
use crate::commands::cluster::{prepare, runtime, start_connect};
use crate::deploy::{self, ApplyOptions};
use crate::printer::Printer;
use crate::progress::Progress;
use crate::repo;

/// Run `osbx apply`.
///
/// # Errors
/// Preflight failures, refused applies and cluster errors (exit 2).
pub fn run(args: &ApplyArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let rt = runtime()?;
    let connecting = start_connect(&rt, &args.cluster);
    let mut prepared = prepare(&args.profile)?;
    if let Some(key) = crate::commands::cluster::api_key_from(args.verify_flags.api_key_file.as_deref())? {
        deploy::add_api_key_secret(&prepared.loaded.profile, &mut prepared.layers, &key)?;
    }
    let prepared = prepared;
    let profile = &prepared.loaded.profile;
    if let Some(state) = repo::repo_state(&args.repo) {
        if !state.uncommitted.is_empty() {
            printer.warn(&format!(
                "the Flux repository at {} has {} uncommitted change(s): Flux reconciles what is pushed, not this work tree",
                args.repo.display(),
                state.uncommitted.len()
            ));
        }
        if let Some((n, upstream)) = state.unpushed {
            printer.warn(&format!("{n} commit(s) not pushed to {upstream}: Flux will not see them"));
        }
    }
    rt.block_on(async {
        let (cluster, report) = connecting.await??;
        printer.action(&format!("cluster {} (Kubernetes {})", cluster.server, report.version));
        let opts = ApplyOptions {
            dry_run: args.dry_run,
            prune: args.prune,
            wait: !args.no_wait,
            timeout: args.timeout,
            interval: std::time::Duration::from_secs(2),
            force_conflicts: args.force_conflicts,
        };
        let refs = deploy::refs(&prepared.layers);
        let flux_ns = &profile.cluster.flux_namespace;
        let plan = match deploy::plan(&cluster, profile, &prepared.layers, &opts).await {
            Ok(plan) => plan,
            Err(e) if e.forbidden() => {
                // Name every missing permission, not only the read that was refused.
                let (inv_ns, inv_name) = deploy::inventory_ref(profile);
                preflight::access_all(&cluster, &refs, (&inv_ns, &inv_name), args.prune).await?;
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
        preflight::check(&cluster, &refs, &plan.needs(&prepared.layers, args.prune), flux_ns).await?;
        let progress = printer.progress();
        let result = deploy::execute(&cluster, profile, &prepared.layers, plan, &opts, &progress).await;
        progress.finish();
        let report = result?;
        for c in report.changes.0.iter().filter(|c| c.reason.is_some()) {
            progress.warn(&format!("{} {}: {}", c.subject, c.action, c.reason.as_deref().unwrap_or_default()));
        }
        match args.output {
            Output::Json => printer.json(&report),
            Output::Text => {
                for c in &report.changes.0 {
                    printer.data(&format!(
                        "{} {}{}",
                        c.subject,
                        c.action,
                        if args.dry_run { " (dry run)" } else { "" }
                    ));
                }
            }
        }
        let counts = format!(
            "{} created, {} configured, {} unchanged, {} deleted, {} skipped",
            report.changes.count(Action::Created),
            report.changes.count(Action::Configured),
            report.changes.count(Action::Unchanged),
            report.changes.count(Action::Deleted),
            report.changes.count(Action::Skipped)
        );
        let applied = match report.ready {
            Some(false) => {
                printer.failure(&format!("{counts}; not ready: {}", report.not_ready.as_deref().unwrap_or("")));
                return Ok(ExitStatus::Failure);
            }
            Some(true) => {
                printer.success(&format!("{counts}; all layers ready"));
                ExitStatus::Success
            }
            None => {
                printer.success(&counts);
                ExitStatus::Success
            }
        };
        if args.verify && !args.dry_run {
            return crate::commands::verify::verify_and_report(
                &cluster,
                &prepared,
                &args.verify_flags,
                args.output,
                printer,
            )
            .await;
        }
        Ok(applied)
    })
}
