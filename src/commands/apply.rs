//! `osbx apply`: plan, preflight, staged server-side apply layer by layer, prune, wait, and
//! with `--verify` the acceptance checks.

use anyhow::Context as _;

use super::ExitStatus;
use super::session::{self, prepare, runtime, start_connect};
use super::settings::ApplySettings;
use crate::cli::Output;
use crate::cluster::flux_applier::FluxRender;
use crate::deploy;
use crate::printer::Printer;
use crate::progress::Progress as _;
use crate::repo;
use crate::secrets;
use crate::verify;

/// Run `osbx apply`.
///
/// # Errors
/// Preflight failures, refused applies and cluster errors (exit 2).
pub(super) fn run(settings: &ApplySettings, printer: Printer) -> anyhow::Result<ExitStatus> {
    let rt = runtime()?;
    let connecting = start_connect(&rt, &settings.connect);
    let mut prepared = prepare(&settings.profile, Some(&settings.repo))?;
    if let Some(v) = &settings.verify {
        verify::session::check_selection(&prepared.loaded.profile, &v.run.selection)?;
    }
    // The cluster's own identity, only when asked to create the decryption Secret from it
    // (never the identities given to open the files: often a person's whole key file).
    let cluster_key = settings
        .decryption_key_file
        .as_deref()
        .map(|path| {
            secrets::cluster_key(&prepared.loaded.profile, path)
                .with_context(|| format!("--create-decryption-secret {}", path.display()))
        })
        .transpose()?;
    let given = deploy::Given {
        value: settings.api_key.as_deref(),
        age_key_file: settings.age_key_file.as_deref(),
        cluster: cluster_key.as_ref().map(|k| &k.identities),
        required: true,
    };
    session::supply(&mut prepared, given, printer)?;
    // The Flux repository is read on a thread of its own while the connection is made and the
    // plan reads the cluster: its state, and whether its pushed HEAD holds this render (fields
    // only Flux's applier owns are taken over only when Flux applies this very render), which
    // the plan needs only after its reads.
    let repo_known = rt.spawn_blocking({
        let (repo, rendered) = (settings.repo.clone(), prepared.rendered.clone());
        move || {
            let state = repo::repo_state(&repo);
            let flux = repo::pushed(&repo, &rendered).map_or_else(FluxRender::Unproven, |()| FluxRender::Pushed);
            crate::timing::mark("repo");
            (state, flux)
        }
    });
    let (cluster, report) = rt.block_on(connecting)??;
    printer.action(&format!("cluster {} (Kubernetes {})", cluster.server, report.version));
    let decryption =
        rt.block_on(deploy::decryption_secret(&cluster, &prepared.loaded, &mut prepared.layers, cluster_key.as_ref()))?;
    say_decryption(&decryption, printer);
    let (profile, layers, opts) = (&prepared.loaded.profile, &prepared.layers, &settings.apply);
    rt.block_on(async {
        // With --verify, what the verify run does is reviewed before the apply writes too.
        let verifying = settings.verify.as_ref().map_or_else(Vec::new, |v| {
            verify::session::operations(profile, &deploy::flux_objects(layers), &v.run.selection, &v.run.reach())
        });
        let progress = printer.progress();
        let flux = async {
            let (state, flux) = repo_known.await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
            for warning in state.map(|s| repo_warnings(&settings.repo, &s)).unwrap_or_default() {
                progress.warn(&warning);
            }
            flux
        };
        let result = deploy::apply(&cluster, profile, layers, opts, flux, verifying, &progress).await;
        progress.finish();
        let report = result?;
        for c in report.changes.0.iter().filter(|c| c.reason.is_some()) {
            progress.warn(&format!("{c}: {}", c.reason.as_deref().unwrap_or_default()));
        }
        match settings.output {
            Output::Json => printer.json(&crate::timing::done(&report)),
            Output::Text => {
                let suffix = if opts.dry_run { " (dry run)" } else { "" };
                for c in &report.changes.0 {
                    printer.data(&format!("{c}{suffix}"));
                }
            }
        }
        let summary = report.changes.summary();
        match report.ready {
            Some(false) => {
                printer.failure(&format!("{summary}; not ready: {}", report.not_ready.as_deref().unwrap_or("")));
                return Ok(ExitStatus::Failure);
            }
            Some(true) => printer.success(&format!("{summary}; all layers ready")),
            None => printer.success(&summary),
        }
        match &settings.verify {
            Some(verify) => Box::pin(session::verify(&cluster, &prepared, verify, settings.output, printer)).await,
            None => Ok(ExitStatus::Success),
        }
    })
}

/// What the Flux repository's state warns of: work Flux does not see.
fn repo_warnings(repo: &std::path::Path, state: &repo::RepoState) -> Vec<String> {
    let mut out = Vec::new();
    if !state.uncommitted.is_empty() {
        out.push(format!(
            "the Flux repository at {} has {} uncommitted change(s): Flux reconciles what is pushed, not this work tree",
            repo.display(),
            state.uncommitted.len()
        ));
    }
    if let Some((n, upstream)) = &state.unpushed {
        out.push(format!("{n} commit(s) not pushed to {upstream}: Flux will not see them"));
    }
    out
}

/// What became of the decryption Secret ([`deploy::decryption_secret`]).
fn say_decryption(decryption: &deploy::Decryption, printer: Printer) {
    match decryption {
        deploy::Decryption::NotNeeded => {}
        deploy::Decryption::Missing(id) => printer.warn(&format!(
            "{id} does not exist: Flux cannot decrypt the sealed Secrets until it does; create it once with `--create-decryption-secret FILE` (the cluster's own identity)"
        )),
        deploy::Decryption::Exists(id) => printer.action(&format!("{id} exists: left as it is (it is never replaced)")),
        deploy::Decryption::Created { id, origin, recipient, index } => printer.action(&format!(
            "{id} does not exist: creating it from {origin} (the identity of {recipient}, secrets.sops.age[{index}]; the key is not shown), for Flux to decrypt with"
        )),
    }
}
