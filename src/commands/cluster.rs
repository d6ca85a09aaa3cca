//! What `diff` and `apply` share: load and render the profile, connect, and run async work.

use crate::cli::{ClusterArgs, ProfileArgs};
use crate::cluster::{Cluster, ConnectOptions, preflight};
use crate::deploy::{self, Layer};
use crate::profile::{self, LoadedProfile, ProfileSource};
use crate::render::Renderer;

/// The profile, rendered into layers.
pub struct Prepared {
    /// The profile.
    pub loaded: LoadedProfile,
    /// Its layers in apply order.
    pub layers: Vec<Layer>,
}

/// Load, validate and render a profile (no cluster needed).
///
/// # Errors
/// Profile, template or render errors.
pub fn prepare(args: &ProfileArgs) -> anyhow::Result<Prepared> {
    // The templates compile while the profile loads.
    let (loaded, renderer) = std::thread::scope(|scope| {
        let renderer = scope.spawn(|| Renderer::new(args.templates.as_deref()));
        let loaded = profile::load(&ProfileSource::from_arg(args.profile.as_deref()));
        (loaded, renderer.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
    });
    let loaded = loaded?;
    let renderer = renderer?;
    let rendered = renderer.render(&loaded)?;
    let layers = deploy::layers(&loaded.profile, &rendered)?;
    Ok(Prepared { loaded, layers })
}

/// The API key to create or rotate, from `--api-key-file` or `OSBX_API_KEY` (never from an
/// argument value, which would show in `ps`).
///
/// # Errors
/// When the file cannot be read.
pub fn api_key_from(file: Option<&std::path::Path>) -> anyhow::Result<Option<String>> {
    use anyhow::Context as _;
    if let Some(path) = file {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading --api-key-file {}", path.display()))?;
        return Ok(Some(text.trim().to_owned()).filter(|k| !k.is_empty()));
    }
    Ok(std::env::var("OSBX_API_KEY").ok().filter(|k| !k.is_empty()))
}

/// Connect to the cluster the arguments name.
///
/// # Errors
/// When no usable kubeconfig is found.
async fn connect(args: &ClusterArgs) -> anyhow::Result<Cluster> {
    let opts = ConnectOptions {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
        qps: args.qps,
        concurrency: args.concurrency,
        request_timeout: args.request_timeout,
    };
    Ok(Cluster::connect(&opts).await?)
}

/// A runtime for this command.
///
/// # Errors
/// When the runtime cannot start.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

/// Connecting, started on `rt` so that it runs while the caller renders the profile: the
/// kubeconfig, then the server version and discovery (see [`preflight::warm_up`]). Dropping the
/// runtime (a profile error) abandons it.
pub fn start_connect(
    rt: &tokio::runtime::Runtime,
    args: &ClusterArgs,
) -> tokio::task::JoinHandle<anyhow::Result<(Cluster, preflight::Report)>> {
    let args = args.clone();
    rt.spawn(async move {
        let cluster = connect(&args).await?;
        let report = preflight::warm_up(&cluster).await?;
        Ok((cluster, report))
    })
}
