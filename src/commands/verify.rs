//! `osbx verify`: the acceptance checks against a platform Flux has reconciled.

use super::ExitStatus;
use super::session::{self, prepare, runtime, start_connect};
use super::settings::VerifySettings;
use crate::printer::Printer;

/// Run `osbx verify`.
///
/// # Errors
/// Bad input, an unreachable cluster, or an interrupted run (exit 2).
pub(super) fn run(settings: &VerifySettings, printer: Printer) -> anyhow::Result<ExitStatus> {
    let rt = runtime()?;
    let connecting = start_connect(&rt, &settings.connect);
    let prepared = prepare(&settings.profile, None)?;
    rt.block_on(async {
        let (cluster, _) = connecting.await??;
        session::verify(&cluster, &prepared, &settings.verify, settings.output, printer).await
    })
}
