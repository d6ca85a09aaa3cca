//! `osbx-played`: the parts of the platform that no package registry serves, played by test code
//! (see `mod.rs`), as a process. `tests/cluster/build` builds it; `tests/cluster/up
//! --with-controllers` starts `osbx-played opensandbox-controller` beside the real controllers,
//! `--with-node` also `osbx-played spire-controller-manager` beside the real SPIRE server.

#[path = "mod.rs"]
mod played;
// Only the process plays spire-controller-manager (it drives the real `spire-server` CLI).
#[path = "spire.rs"]
mod spire;

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
    /// spire-controller-manager: ClusterSPIFFEIDs of one class into entries of a real SPIRE server.
    SpireControllerManager {
        /// The `spire-server` binary.
        #[arg(long)]
        spire_server: PathBuf,
        /// The server's admin socket.
        #[arg(long)]
        server_socket: PathBuf,
        /// The trust domain.
        #[arg(long)]
        trust_domain: String,
        /// The cluster name (`.ClusterName` in templates).
        #[arg(long, default_value = "sandbox")]
        cluster_name: String,
        /// Process only ClusterSPIFFEIDs with this className.
        #[arg(long)]
        class_name: String,
        /// The SPIFFE ID of the agent on the node (the parent of every entry).
        #[arg(long)]
        parent_id: String,
        /// The node whose pods get entries.
        #[arg(long)]
        node: String,
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
        Part::SpireControllerManager {
            spire_server,
            server_socket,
            trust_domain,
            cluster_name,
            class_name,
            parent_id,
            node,
        } => {
            let config = spire::Config {
                spire_server,
                socket: server_socket,
                trust_domain,
                cluster_name,
                class_name,
                parent_id,
                node,
            };
            spire::ControllerManager::new(client, config).run().await;
        }
    }
    std::process::ExitCode::SUCCESS
}

#[allow(clippy::print_stderr)]
fn fail(message: &str) -> std::process::ExitCode {
    eprintln!("osbx-played: {message}");
    std::process::ExitCode::from(2)
}
