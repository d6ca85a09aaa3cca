//! `osbx init`: a starter profile or fleet file.

use super::ExitStatus;
use super::settings::InitSettings;
use crate::init;
use crate::printer::Printer;

/// Run `osbx init`.
///
/// # Errors
/// A file in the way (without `--force`) or a write that fails (exit 2; nothing is written
/// when a file is in the way).
pub(super) fn run(settings: &InitSettings, printer: Printer) -> anyhow::Result<ExitStatus> {
    let files = if settings.fleet {
        init::fleet(&settings.file, &settings.starter)?
    } else {
        init::profile(&settings.file, &settings.starter)?
    };
    init::write(&files, settings.force)?;
    for f in &files {
        printer.created(&format!("{} written", f.path.display()));
    }
    let file = settings.file.display();
    let (flag, what) = if settings.fleet { ("--fleet", "fleet") } else { ("--profile", "profile") };
    printer.success(&format!("edit the {what}, then: osbx render {flag} {file} --out <your Flux repository>"));
    Ok(ExitStatus::Success)
}
