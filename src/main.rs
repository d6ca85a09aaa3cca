//! The `osbx` binary: parse arguments, run, print the error chain, exit 0/1/2.

use std::process::ExitCode;

use clap::Parser;
use osbx::cli::Cli;
use osbx::commands::ExitStatus;
use osbx::printer::Printer;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let printer = Printer::new(cli.color, cli.quiet);
    match osbx::run(cli, &printer) {
        Ok(status) => status.into(),
        Err(err) => {
            printer.error(&err);
            ExitStatus::Error.into()
        }
    }
}
