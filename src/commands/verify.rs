//! `osbx verify` (and the verify step of `osbx apply --verify`).

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use crate::cli::{Output, VerifyArgs, VerifyFlags};
use crate::cluster::Cluster;
use crate::commands::ExitStatus;
use crate::commands::cluster::{Prepared, prepare, runtime, start_connect};
use crate::printer::Printer;
use crate::verify::{self, ApiKey, Ctx, Endpoint, Selection, checks, probe, report};

/// Run `osbx verify`.
///
/// # Errors
/// Bad input, an unreachable cluster, or an interrupted run (exit 2).
pub fn run(args: &VerifyArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let rt = runtime()?;
    let connecting = start_connect(&rt, &args.cluster);
    let prepared = prepare(&args.profile)?;
    rt.block_on(async {
        let (cluster, _) = connecting.await??;
        verify_and_report(&cluster, &prepared, &args.verify, args.output, printer).await
    })
}

/// Where the API key comes from: `--api-key-file`, `OSBX_API_KEY`, the profile's inline key, or
/// the Secret the profile names.
async fn api_key(cluster: &Cluster, prepared: &Prepared, flags: &VerifyFlags) -> anyhow::Result<ApiKey> {
    if let Some(key) = super::cluster::api_key_from(flags.api_key_file.as_deref())? {
        return Ok(ApiKey::new(Some(key)));
    }
    let os = &prepared.loaded.profile.opensandbox;
    if let Some(inline) = &os.server.api_key.inline {
        return Ok(ApiKey::new(Some(inline.clone())));
    }
    let Some(secret_ref) = &os.server.api_key.secret_ref else { return Ok(ApiKey::new(None)) };
    let ns = &os.namespaces.control_plane;
    let secret = Api::<Secret>::namespaced(cluster.client.clone(), ns).get_opt(&secret_ref.name).await;
    let value = secret
        .ok()
        .flatten()
        .and_then(|s| s.data)
        .and_then(|d| d.get(&secret_ref.key).map(|v| String::from_utf8_lossy(&v.0).trim().to_owned()));
    Ok(ApiKey::new(value))
}

/// Run the checks and print the report; returns the exit status (0 Ready, 1 not).
///
/// # Errors
/// When the run cannot start (namespace creation) or is interrupted.
pub async fn verify_and_report(
    cluster: &Cluster,
    prepared: &Prepared,
    flags: &VerifyFlags,
    output: Output,
    printer: &Printer,
) -> anyhow::Result<ExitStatus> {
    let profile = prepared.loaded.profile.clone();
    let key = api_key(cluster, prepared, flags).await?;
    let endpoint = match &flags.server_url {
        Some(url) => Endpoint::direct(url, key, std::time::Duration::from_secs(300))?,
        None => Endpoint::proxy(
            cluster.client.clone(),
            &profile.opensandbox.namespaces.control_plane,
            "opensandbox-server",
            80,
            key,
        ),
    };
    let flux_objects =
        crate::deploy::refs(&prepared.layers).into_iter().filter(|r| r.group.ends_with(".toolkit.fluxcd.io")).collect();
    let catalogue = checks::catalogue(&profile, flux_objects);
    let run = probe::Run::new(profile.verify.probe_deadline_seconds, flags.verify_timeout);
    let extra: Vec<String> = profile.spiffe_smoke().iter().map(|s| s.namespace.clone()).collect();
    let swept = probe::sweep(cluster, &run, &extra).await;
    if !swept.is_empty() {
        printer.warn(&format!("removed what earlier interrupted runs left: {}", swept.join(", ")));
    }
    run.create_namespace(cluster).await?;
    printer.action(&format!("verify run {} (probe namespace {})", run.id, run.namespace));
    let ctx = Ctx { cluster: cluster.clone(), profile, run, endpoint };
    let selection = Selection { only: flags.only.clone(), skip: flags.skip.clone() };
    let progress = printer.progress();
    let outcome = tokio::select! {
        results = tokio::time::timeout(flags.verify_timeout, verify::run(&ctx, &catalogue, &selection, &progress)) => Some(results),
        () = interrupted() => None,
    };
    progress.finish();
    ctx.run.cleanup(cluster, &extra).await;
    let Some(results) = outcome else {
        anyhow::bail!("interrupted: removed the probe namespace {} and everything the run created", ctx.run.namespace);
    };
    let results =
        results.map_err(|_| anyhow::anyhow!("the verify run did not finish within {:?}", flags.verify_timeout))?;
    if let Some(path) = &flags.junit {
        std::fs::write(path, report::junit(&results)).with_context(|| format!("writing {}", path.display()))?;
    }
    match output {
        Output::Json => printer.json(&report::json(&ctx.run.id, &results)),
        Output::Text => {
            for line in report::table(&results) {
                printer.data(&line);
            }
            printer.data(&report::summary(&results));
        }
    }
    Ok(if verify::all_passed(&results) { ExitStatus::Success } else { ExitStatus::Failure })
}

/// Resolves on Ctrl-C or SIGTERM.
async fn interrupted() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
