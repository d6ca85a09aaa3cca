//! One module per command: settings in, the domain called, the result printed. Settings are
//! resolved from the arguments in one place ([`settings`]); what several commands share is in
//! [`session`], never in another command's module.

mod apply;
mod diff;
mod images;
mod init;
mod lint;
mod profiles;
mod rbac;
mod render;
mod rollout;
mod secret;
mod session;
mod settings;
mod status;
mod verify;

use std::process::ExitCode;

use clap::CommandFactory;

use crate::cli::{Cli, Command};
use crate::printer::Printer;

/// The renderer every command renders with: the templates (embedded, with `overrides`), and
/// what an acceptance layer asks above the render answered by `rbac` (its ServiceAccounts' roles)
/// and `verify` (its selection of checks, its probe namespace's level): [`crate::rbac::in_cluster`].
///
/// # Errors
/// [`crate::render::RenderError`] when the templates cannot be read or do not parse.
pub fn renderer(overrides: Option<&std::path::Path>) -> Result<crate::render::Renderer, crate::render::RenderError> {
    crate::render::Renderer::new(overrides, crate::rbac::in_cluster())
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// Success, no difference, every check passed.
    Success,
    /// An expected negative outcome: differences found, a check failed, not ready in time.
    Failure,
    /// Something broke: bad input, unreachable cluster, refused.
    Error,
}

impl From<ExitStatus> for ExitCode {
    fn from(s: ExitStatus) -> Self {
        match s {
            ExitStatus::Success => ExitCode::SUCCESS,
            ExitStatus::Failure => ExitCode::from(1),
            ExitStatus::Error => ExitCode::from(2),
        }
    }
}

/// Run the command the arguments name.
///
/// # Errors
/// Any error the command reports; the caller prints it and exits 2.
pub fn run(cli: Cli, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let printer = *printer;
    match cli.command {
        Command::Render(args) => render::run(&args.into(), printer),
        Command::Diff(args) => diff::run(&(&args).try_into()?, printer),
        Command::Apply(args) => apply::run(&(&args).try_into()?, printer),
        Command::Verify(args) => verify::run(&(&args).try_into()?, printer),
        Command::Status(args) => status::run(&(&args).try_into()?, printer),
        Command::Rollout(args) => rollout::run(&(&args).into(), printer),
        Command::Lint(args) => lint::run(&(&args).try_into()?, printer),
        Command::Images(args) => images::run(&(&args).try_into()?, printer),
        Command::Init(args) => init::run(&(&args).into(), printer),
        Command::Rbac(args) => rbac::run(&(&args).into(), printer),
        Command::Secret(cmd) => secret::run(cmd, printer),
        Command::Schema { fleet } => {
            printer.json(&if fleet { crate::fleet::schema() } else { crate::profile::schema() });
            Ok(ExitStatus::Success)
        }
        Command::Profiles => Ok(profiles::run(printer)),
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "osbx", &mut std::io::stdout());
            Ok(ExitStatus::Success)
        }
    }
}
