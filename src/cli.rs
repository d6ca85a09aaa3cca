//! Command-line arguments (clap derive only; no logic here).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::printer::ColorChoice;

/// Render, apply and verify an OpenSandbox platform on Kubernetes with Flux.
#[derive(Debug, Parser)]
#[command(name = "osbx", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// When to colour output.
    #[arg(long, value_enum, default_value_t, global = true, env = "OSBX_COLOR")]
    pub color: ColorChoice,
    /// Hide progress lines (data, warnings and errors are still printed).
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write the Flux tree for a profile into a repository.
    ///
    /// Exit status: 0 written (or, with --check, up to date), 1 --check found differences,
    /// 2 error (nothing is written on error).
    Render(RenderArgs),
    /// List the profiles embedded in this binary.
    Profiles,
    /// Print a shell completion script.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `osbx render` arguments.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// Profile file, or the name of an embedded profile (see `osbx profiles`); default: the
    /// embedded `default` profile.
    #[arg(short, long, env = "OSBX_PROFILE")]
    pub profile: Option<String>,
    /// The Flux repository to write into.
    #[arg(short, long, default_value = ".")]
    pub out: PathBuf,
    /// Directory of templates that replace embedded ones with the same relative path.
    #[arg(long, env = "OSBX_TEMPLATES")]
    pub templates: Option<PathBuf>,
    /// Write nothing; exit 1 and print a diff when the tree differs from the render.
    #[arg(long, conflicts_with_all = ["commit", "force"])]
    pub check: bool,
    /// Commit the files osbx changed (git2); refuses when unrelated changes are staged.
    #[arg(long)]
    pub commit: bool,
    /// Commit message (with --commit).
    #[arg(short, long, requires = "commit")]
    pub message: Option<String>,
    /// Adopt and overwrite files at osbx's paths that osbx did not write.
    #[arg(long)]
    pub force: bool,
}
