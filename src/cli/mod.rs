//! Command-line arguments (clap derive only; no logic here).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::printer::ColorChoice;

mod cluster;

pub use cluster::{
    ApplyArgs, DiffArgs, DiffOutput, InClusterFlags, RolloutArgs, StatusArgs, StatusOutput, VerifyArgs, VerifyFlags,
};

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
    /// Compare the rendered objects with a live cluster (server-side dry-run).
    ///
    /// Exit status: 0 no difference, 1 differences (objects to create, change or prune), 2 error.
    Diff(DiffArgs),
    /// Server-side apply the rendered objects to a cluster, layer by layer, and wait for them.
    ///
    /// Exit status: 0 applied and ready, 1 applied but not ready in time or a terminal failure,
    /// 2 error (preflight failure, refused apply, unreachable cluster).
    Apply(ApplyArgs),
    /// Run the acceptance checks against the platform and report Ready only if all pass.
    ///
    /// Exit status: 0 every check passed, 1 a check failed or could not reach a verdict,
    /// 2 error (bad input, unreachable cluster, interrupted).
    Verify(VerifyArgs),
    /// Show the running platform at a glance, read-only: each layer in dependsOn order (Flux
    /// Ready, the revision applied against the Flux repository's HEAD, suspended, age, Flux's
    /// message), each HelmRelease, the server, each Pool against its capacity, the nodes for
    /// each runtime class the pools use.
    ///
    /// Exit status: 0 everything Ready, 1 something is not, 2 error (unreachable cluster,
    /// refused read).
    Status(StatusArgs),
    /// Bring a fleet's change to its clusters wave by wave (the fleet file's `rollout.waves`),
    /// each wave committed only after every cluster of the one before it reconciled and passed
    /// the acceptance checks.
    ///
    /// Exit status: 0 every wave passed (with --dry-run: the plan was printed), 1 a gate failed
    /// or Flux did not reconcile in time (later waves untouched), 2 error (bad input, unreachable
    /// cluster, missing permission, git refusal).
    Rollout(RolloutArgs),
    /// Check a profile against domain rules (also run by `render`).
    ///
    /// Exit status: 0 clean (warnings allowed), 1 errors found, 2 could not lint.
    Lint(LintArgs),
    /// List every image the platform as rendered will pull, and who pulls it: the rendered
    /// pods, the pods each HelmRelease's chart installs (expanded with helm, offline, from the
    /// review's chart cache), the images in a component's configuration and the checks' probe
    /// images. No cluster is contacted.
    ///
    /// Exit status: 0 listed, 2 error (the profile or a chart cannot be read).
    Images(ImagesArgs),
    /// Write a commented starter profile (or fleet file), with the schema editors validate it
    /// against beside it.
    ///
    /// Exit status: 0 written, 2 a file is in the way (nothing written) or an error.
    Init(InitArgs),
    /// Print the least-privilege RBAC roles osbx needs for a profile (YAML), bound to a user or
    /// ServiceAccount when one is named.
    ///
    /// Exit status: 0 printed, 2 the profile cannot be loaded or rendered.
    Rbac(RbacArgs),
    /// Keep the Secrets osbx supplies (the API key) in git, encrypted with SOPS for the
    /// profile's age recipients (`secrets.sops`), for Flux to decrypt.
    ///
    /// Exit status: 0 done, 2 error (nothing is written on error).
    #[command(subcommand)]
    Secret(SecretCommand),
    /// Print the JSON Schema of the profile format (or of the fleet format).
    Schema {
        /// The fleet format instead.
        #[arg(long)]
        fleet: bool,
    },
    /// List the profiles embedded in this binary.
    Profiles,
    /// Print a shell completion script.
    Completions {
        /// The shell to print it for.
        shell: clap_complete::Shell,
    },
}

/// Which profile and templates.
#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// Profile file, or the name of an embedded profile (see `osbx profiles`); default: the
    /// embedded `default` profile.
    #[arg(short, long, env = "OSBX_PROFILE")]
    pub profile: Option<String>,
    /// Directory of templates that replace embedded ones with the same relative path.
    #[arg(long, env = "OSBX_TEMPLATES")]
    pub templates: Option<PathBuf>,
}

/// How to reach the cluster.
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// Kubeconfig file (default: `KUBECONFIG`, then ~/.kube/config, then in-cluster config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current context).
    #[arg(long)]
    pub context: Option<String>,
    /// How many requests, how fast.
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// How many requests osbx sends to a cluster, and how long each may take.
#[derive(Debug, Clone, Args)]
pub struct LimitArgs {
    /// Client-side limit of requests per second (per cluster; default: none, the API server's
    /// Priority and Fairness queues what exceeds osbx's share).
    #[arg(long)]
    pub qps: Option<std::num::NonZeroU32>,
    /// Requests in flight at most (per cluster).
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Timeout of each request, e.g. 30s.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub request_timeout: std::time::Duration,
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Output {
    /// Human-readable text.
    #[default]
    Text,
    /// One JSON document on stdout.
    Json,
}

/// Parse a duration such as `90s`, `5m` or `1h30m`.
///
/// # Errors
/// A message when the text is not a duration.
pub(crate) fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    crate::spec::syntax::parse_duration(s).ok_or_else(|| format!("{s:?} is not a duration (e.g. 90s, 5m, 1h30m)"))
}

/// `osbx lint` arguments.
#[derive(Debug, Args)]
pub struct LintArgs {
    /// Profile and templates.
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Lint every cluster of a fleet file instead.
    #[arg(long, conflicts_with = "profile")]
    pub fleet: Option<PathBuf>,
    /// The Pool CRD of the chart the profile pins (YAML), to catch Pool fields it would drop;
    /// without it, known stale chart versions are checked.
    #[arg(long)]
    pub pool_crd: Option<PathBuf>,
    /// A chart directory (the one a HelmRelease of the profile installs, at its pinned version):
    /// report values the profile sets that the chart does not read.
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// The Flux repository the profile renders into: check its layers for plaintext Secrets
    /// and its sealed Secrets (`secrets.sops`) for form, recipients and MAC.
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// age identity file: with --repo, also check that each sealed Secret opens and its MAC
    /// matches (default: SOPS_AGE_KEY_FILE, then SOPS_AGE_KEY).
    #[arg(long, value_name = "FILE", requires = "repo")]
    pub age_key_file: Option<PathBuf>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
}

/// `osbx images`.
#[derive(Debug, Args)]
pub struct ImagesArgs {
    /// Profile and templates.
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Every cluster of a fleet file instead (each image with the clusters that pull it).
    #[arg(long, conflicts_with = "profile")]
    pub fleet: Option<PathBuf>,
    /// Read charts from this copy of the chart cache and never fetch (air-gapped).
    #[arg(long, value_name = "DIR", conflicts_with = "no_charts")]
    pub charts: Option<PathBuf>,
    /// Do not expand charts: the rendered pods, the components' and the checks' images only.
    #[arg(long)]
    pub no_charts: bool,
    /// Ask each image's registry for its manifest (a HEAD, nothing downloaded) and name every
    /// image it does not hold, with who pulls it: exit 1 when one is missing or refused.
    #[arg(long, conflicts_with = "resolve")]
    pub check: bool,
    /// Read the digest of each image that has none from its registry and print the
    /// `images.digests` pins to put in the profile (existing pins kept): every image is then
    /// pulled by its digest.
    #[arg(long)]
    pub resolve: bool,
    /// With --resolve, read every pinned digest again.
    #[arg(long, requires = "resolve")]
    pub refresh: bool,
    /// With --resolve, write the pins into the profile file's `images.digests` (the rest of
    /// the file, comments included, as it was) instead of printing them.
    #[arg(long, requires = "resolve", conflicts_with = "fleet")]
    pub write: bool,
    /// Output format: text, json, skopeo-sync (the source YAML of `skopeo sync --src yaml`) or
    /// crane (a `crane copy SOURCE MIRROR` line per image, with `images.mirror`); --check and
    /// --resolve print text or json only.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: ImagesOutput,
}

/// `osbx images` output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ImagesOutput {
    /// Each image, then who pulls it.
    #[default]
    Text,
    /// `{image: [puller, …]}`.
    Json,
    /// Per registry, each repository's tags and digests, as `skopeo sync --src yaml` reads
    /// them (with `images.mirror`: of the images copied onto it).
    SkopeoSync,
    /// `crane copy SOURCE MIRROR`, one line per image copied onto `images.mirror`.
    Crane,
}

/// Which commands `osbx rbac` prints roles for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum RbacFor {
    /// `osbx apply` (without --verify).
    Apply,
    /// `osbx diff`.
    Diff,
    /// `osbx verify`.
    Verify,
    /// `osbx rollout`, on the cluster of this profile (a fleet member).
    Rollout,
    /// `osbx status` (read-only).
    Status,
    /// apply, diff and verify, and `osbx apply --verify`.
    #[default]
    All,
}

/// `osbx rbac` arguments.
#[derive(Debug, Args)]
pub struct RbacArgs {
    /// Profile and templates.
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// The commands the roles are for.
    #[arg(long = "for", value_name = "COMMAND", value_enum, default_value_t)]
    pub purpose: RbacFor,
    /// A fleet file: the roles for its cluster `--cluster` (its profile as the fleet merges it)
    /// instead of a profile's.
    #[arg(long, conflicts_with = "profile", requires = "cluster")]
    pub fleet: Option<PathBuf>,
    /// The cluster of `--fleet` the roles are for.
    #[arg(long, requires = "fleet")]
    pub cluster: Option<String>,
    /// Also what `apply --prune` deletes and `diff` shows as to be pruned: reading and deleting
    /// any object of the rendered kinds in the rendered namespaces.
    #[arg(long)]
    pub prune: bool,
    /// Also what `apply --create-decryption-secret` does: create the cluster's decryption
    /// Secret (`secrets.sops.secretRef` in the Flux namespace).
    #[arg(long)]
    pub create_decryption_secret: bool,
    /// With `--for verify`: the roles of verify's runs in the cluster (the acceptance layer's
    /// ServiceAccount is bound to exactly these): their report published to the acceptance
    /// layer's ConfigMap with Events, and that layer, their own, not among the layers checked.
    #[arg(long)]
    pub in_cluster: bool,
    /// With `--in-cluster`: the roles of the acceptance layer's serving pod (`verify --serve
    /// --read-only`), which runs only the checks that change nothing and publishes its report.
    #[arg(long, requires = "in_cluster")]
    pub serving: bool,
    /// Bind the roles to this ServiceAccount (NAMESPACE/NAME); repeatable.
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = parse_service_account)]
    pub service_account: Vec<(String, String)>,
    /// Bind the roles to this user (a client certificate's CN, an OIDC username); repeatable.
    #[arg(long, value_name = "NAME")]
    pub user: Vec<String>,
}

/// Parse `NAMESPACE/NAME`.
///
/// # Errors
/// A message when either part is missing.
pub(crate) fn parse_service_account(s: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!("{s:?} is not NAMESPACE/NAME")),
    }
}

/// The runtimes of a starter's pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum RuntimeArg {
    /// One runc pool.
    Runc,
    /// One Kata pool, and a kata layer (kata-deploy).
    Kata,
    /// A runc and a Kata pool, and a kata layer.
    #[default]
    Both,
}

/// `osbx init` arguments.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// The file to write (default: `profile.yaml`, or `fleet.yaml` with --fleet).
    pub file: Option<PathBuf>,
    /// The cluster's name.
    #[arg(long, default_value = "sandbox")]
    pub cluster: String,
    /// The pools' container runtimes.
    #[arg(long, value_enum, default_value_t)]
    pub runtime: RuntimeArg,
    /// Add SPIRE agents joined to your SPIRE server and the SPIFFE smoke identity.
    #[arg(long)]
    pub spire: bool,
    /// Write a fleet file (and its base profile, `base.yaml` beside it) instead.
    #[arg(long)]
    pub fleet: bool,
    /// Overwrite files that exist.
    #[arg(long)]
    pub force: bool,
}

/// `osbx render` arguments.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// Profile file, or the name of an embedded profile (see `osbx profiles`); default: the
    /// embedded `default` profile.
    #[arg(short, long, env = "OSBX_PROFILE", conflicts_with = "fleet")]
    pub profile: Option<String>,
    /// Render every cluster of a fleet file (`kind: Fleet`) instead of one profile.
    #[arg(long)]
    pub fleet: Option<PathBuf>,
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
    /// Also list the profile fields osbx filled in with their defaults.
    #[arg(short, long)]
    pub verbose: bool,
    /// age identity file for re-encrypting sealed Secrets when `secrets.sops.age` changed
    /// (default: SOPS_AGE_KEY_FILE, then SOPS_AGE_KEY).
    #[arg(long, value_name = "FILE")]
    pub age_key_file: Option<PathBuf>,
}

/// `osbx secret` subcommands.
#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Seal a value into the Flux repository and render the profile around it. The value is read
    /// from stdin (piped), --from-file or --from-env, never from an argument; only ciphertext
    /// reaches the disk. Setting the value a file already holds (checked when an identity is
    /// given) keeps the file byte for byte.
    Set(SecretSetArgs),
    /// List the Secrets the profile supplies: where each is sealed and for whom.
    List(SecretListArgs),
}

/// `osbx secret set` arguments.
#[derive(Debug, Args)]
pub struct SecretSetArgs {
    /// The Secret's name (`osbx secret list` names them; the API key's is
    /// `opensandbox.server.apiKey.secretRef.name`).
    pub name: String,
    /// Profile file, or the name of an embedded profile; default: the embedded `default` profile.
    #[arg(short, long, env = "OSBX_PROFILE")]
    pub profile: Option<String>,
    /// The Flux repository to write into.
    #[arg(short, long, default_value = ".")]
    pub out: PathBuf,
    /// Directory of templates that replace embedded ones with the same relative path.
    #[arg(long, env = "OSBX_TEMPLATES")]
    pub templates: Option<PathBuf>,
    /// Read the value from this file (one trailing newline is dropped).
    #[arg(long, value_name = "FILE", conflicts_with = "from_env")]
    pub from_file: Option<PathBuf>,
    /// Read the value from this environment variable.
    #[arg(long, value_name = "VAR")]
    pub from_env: Option<String>,
    /// age identity file: compares the value with the sealed one, and re-encrypts files whose
    /// recipients changed (default: SOPS_AGE_KEY_FILE, then SOPS_AGE_KEY).
    #[arg(long, value_name = "FILE")]
    pub age_key_file: Option<PathBuf>,
    /// Commit the sealed file and the render (git2).
    #[arg(long)]
    pub commit: bool,
    /// Commit message (with --commit).
    #[arg(short, long, requires = "commit")]
    pub message: Option<String>,
}

/// `osbx secret list` arguments.
#[derive(Debug, Args)]
pub struct SecretListArgs {
    /// Profile file, or the name of an embedded profile; default: the embedded `default` profile.
    #[arg(short, long, env = "OSBX_PROFILE")]
    pub profile: Option<String>,
    /// The Flux repository.
    #[arg(long, default_value = ".")]
    pub out: PathBuf,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
