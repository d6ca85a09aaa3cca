//! `osbx-played`: the parts of the platform that no package registry serves, played by test code
//! (see `mod.rs`), as a process. `tests/cluster/build played` builds it; `tests/cluster/up
//! --with-controllers` starts `osbx-played opensandbox-controller` beside the real controllers.

#[path = "mod.rs"]
mod played;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "osbx-played", about = "Parts of the platform no package registry serves, played for osbx's tests")]
struct Cli {
    /// The cluster's kubeconfig.
    #[arg(long, env = "KUBECONFIG", global = true)]
    kubeconfig: Option<PathBuf>,
    #[command(subcommand)]
    part: Part,
}

#[derive(Subcommand)]
enum Part {
    /// The OpenSandbox controller v0.2.0: fills Pools, allocates and releases pooled BatchSandboxes.
    OpensandboxController {
        /// Only this namespace (default: every namespace, as the real controller).
        #[arg(long)]
        namespace: Option<String>,
        /// Never allocate (a create through the Lifecycle API then times out).
        #[arg(long)]
        no_allocate: bool,
        /// Never release (a deleted BatchSandbox then stays Terminating).
        #[arg(long)]
        no_release: bool,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let Some(kubeconfig) = cli.kubeconfig else {
        return fail("--kubeconfig (or KUBECONFIG) is required");
    };
    let client = match played::client(&kubeconfig).await {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    match cli.part {
        Part::OpensandboxController { namespace, no_allocate, no_release } => {
            let behaviour = played::opensandbox::Behaviour { allocate: !no_allocate, release: !no_release };
            played::opensandbox::Controller::new(client, namespace, Arc::new(Mutex::new(behaviour)))
                .verbose()
                .run()
                .await;
        }
    }
    std::process::ExitCode::SUCCESS
}

#[allow(clippy::print_stderr)]
fn fail(message: &str) -> std::process::ExitCode {
    eprintln!("osbx-played: {message}");
    std::process::ExitCode::from(2)
}
