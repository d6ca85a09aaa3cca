//! osbx renders, applies and verifies an OpenSandbox platform on Kubernetes with Flux.
//!
//! Data flows one way:
//!
//! ```text
//! cli → profile (load + validate) → render (Tera → files) ─┬→ repo (plan, atomic write, git)
//!                                                          └→ deploy (layers) → cluster
//!                                                             (apply, diff, wait, inventory)
//! every command → printer
//! ```
//!
//! Domain modules return values and errors; only [`printer`] writes to the terminal.

pub mod changeset;
pub mod cli;
pub mod cluster;
pub mod commands;
pub mod components;
pub mod deploy;
mod embedded;
pub mod fleet;
pub mod lint;
pub mod merge;
pub mod object;
pub mod printer;
pub mod profile;
pub mod progress;
pub mod render;
pub mod repo;
pub mod verify;

use clap::CommandFactory;

use crate::cli::{Cli, Command};
use crate::commands::ExitStatus;
use crate::printer::Printer;
use crate::profile::ProfileSource;

/// Run one command.
///
/// # Errors
/// Any error the command reports; the caller prints it and exits 2.
pub fn run(cli: Cli, printer: &Printer) -> anyhow::Result<ExitStatus> {
    match cli.command {
        Command::Render(args) => {
            let opts = commands::render::RenderOptions {
                source: match args.fleet {
                    Some(path) => commands::render::Source::Fleet(path),
                    None => commands::render::Source::Profile(ProfileSource::from_arg(args.profile.as_deref())),
                },
                out: args.out,
                templates: args.templates,
                check: args.check,
                commit: args
                    .commit
                    .then(|| args.message.unwrap_or_else(|| "osbx: render the OpenSandbox platform".to_owned())),
                force: args.force,
            };
            commands::render::run(&opts, printer)
        }
        Command::Diff(args) => commands::diff::run(&args, printer),
        Command::Apply(args) => commands::apply::run(&args, printer),
        Command::Verify(args) => commands::verify::run(&args, printer),
        Command::Lint(args) => commands::lint::run(&args, printer),
        Command::Profiles => Ok(commands::profiles::run(printer)),
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "osbx", &mut std::io::stdout());
            Ok(ExitStatus::Success)
        }
    }
}
