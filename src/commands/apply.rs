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
    let cluster_ids = cluster_key.as_ref().map(|k| &k.identities);
    session::supply(
        &mut prepared,
        settings.api_key.as_deref(),
        settings.age_key_file.as_deref(),
        cluster_ids,
        true,
        printer,
    )?;
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
    rt.block_on(decryption_secret(&cluster, &mut prepared, cluster_key.as_ref(), printer))?;
    let (profile, layers, opts) = (&prepared.loaded.profile, &prepared.layers, &settings.apply);
    rt.block_on(async {
        // With --verify, what the verify run does is reviewed before the apply writes too.
        let verifying = settings.verify.as_ref().map_or_else(Vec::new, |v| {
            verify::session::operations(profile, &deploy::flux_objects(layers), &v.run.selection, v.run.reach())
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
            Some(verify) => session::verify(&cluster, &prepared, verify, settings.output, printer).await,
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

/// With `secrets.sops`: when the cluster has no decryption Secret, create it from the
/// cluster's identity if one was given for it (`--create-decryption-secret`), in the first layer
/// that holds a sealed Secret, else say that Flux cannot decrypt yet. An existing one is never
/// replaced.
async fn decryption_secret(
    cluster: &crate::cluster::Cluster,
    prepared: &mut session::Prepared,
    key: Option<&secrets::ClusterKey>,
    printer: Printer,
) -> anyhow::Result<()> {
    let profile = &prepared.loaded.profile;
    let (Some(id), Some(slot)) = (secrets::decryption_secret(profile), secrets::slots(profile).into_iter().next())
    else {
        return Ok(());
    };
    let api = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
        cluster.client.clone(),
        id.namespace.as_deref().unwrap_or_default(),
    );
    let Some(key) = key else {
        // Only a warning: a read refused here is left to the apply's own review.
        if let Ok(None) = api.get_metadata_opt(&id.name).await {
            printer.warn(&format!(
                "{id} does not exist: Flux cannot decrypt the sealed Secrets until it does; create it once with `--create-decryption-secret FILE` (the cluster's own identity)"
            ));
        }
        return Ok(());
    };
    if api.get_metadata_opt(&id.name).await?.is_some() {
        printer.action(&format!("{id} exists: left as it is (it is never replaced)"));
        return Ok(());
    }
    if let Some(object) = secrets::decryption_object(profile, key) {
        printer.action(&format!(
            "{id} does not exist: creating it from {} (the identity of {}, secrets.sops.age[{}]; the key is not shown), for Flux to decrypt with",
            key.origin, key.recipient, key.index
        ));
        deploy::add_objects(&mut prepared.layers, vec![(slot.layer, object)]);
    }
    Ok(())
}
