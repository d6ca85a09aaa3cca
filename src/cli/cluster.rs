//! The arguments of the commands that reach a cluster or a Flux repository's history: `diff`,
//! `apply`, `verify`, `rollout`, `status`.

use std::path::PathBuf;

use clap::Args;

use super::{ClusterArgs, LimitArgs, Output, ProfileArgs, parse_duration};

/// `osbx diff` arguments.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// Profile and templates.
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Cluster access.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Output format (`markdown`, a pull-request comment, with --base only).
    #[arg(short, long, value_enum, default_value_t)]
    pub output: DiffOutput,
    /// Review offline instead: compare the render of the profile (or fleet) in the work tree with
    /// what the Flux repository holds at REF (default: the merge base of the branch with its
    /// upstream), charts expanded; no cluster is contacted.
    #[arg(long, value_name = "REF", num_args = 0..=1, default_missing_value = "", help_heading = "Review (--base)")]
    pub base: Option<String>,
    /// With --base: review every cluster of a fleet file instead of one profile.
    #[arg(long, value_name = "FILE", requires = "base", help_heading = "Review (--base)")]
    pub fleet: Option<PathBuf>,
    /// The Flux repository (a git work tree) [default: .]: with --base, the one reviewed;
    /// without, where the sealed Secrets compared are read (`secrets.sops`).
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// age identity file that opens the sealed Secrets (`secrets.sops`; default:
    /// SOPS_AGE_KEY_FILE, then SOPS_AGE_KEY); without one they are not compared.
    #[arg(long, value_name = "FILE")]
    pub age_key_file: Option<PathBuf>,
    /// With --base: read charts from this copy of the chart cache and never fetch (air-gapped).
    #[arg(long, value_name = "DIR", requires = "base", conflicts_with = "no_charts", help_heading = "Review (--base)")]
    pub charts: Option<PathBuf>,
    /// With --base: compare the Flux objects only (no chart expansion, no helm needed).
    #[arg(long, requires = "base", help_heading = "Review (--base)")]
    pub no_charts: bool,
    /// With -o markdown: the comment's size limit in characters (what does not fit is cut, and
    /// the comment says so).
    #[arg(long, value_name = "CHARS", default_value_t = 60_000, help_heading = "Review (--base)")]
    pub max_size: usize,
}

/// `osbx diff`'s output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum DiffOutput {
    /// Human-readable text (coloured diffs on a terminal).
    #[default]
    Text,
    /// One JSON document on stdout.
    Json,
    /// A pull-request comment (with --base).
    Markdown,
}

/// `osbx apply` arguments.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Profile and templates.
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Cluster access.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Plan everything and print the change set; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Delete objects osbx created before and no longer renders.
    #[arg(long)]
    pub prune: bool,
    /// Do not wait for readiness.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for readiness in total, e.g. 10m.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub timeout: std::time::Duration,
    /// Take ownership of fields another field manager owns.
    #[arg(long)]
    pub force_conflicts: bool,
    /// The Flux repository holding the render: checked for uncommitted or unpushed changes, and
    /// whether its pushed HEAD holds this render (only then are fields Flux's applier owns taken);
    /// with `secrets.sops`, where the sealed Secrets are read.
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// age identity file that opens the sealed Secrets (`secrets.sops`; default:
    /// SOPS_AGE_KEY_FILE, then SOPS_AGE_KEY). It only opens them: the cluster's decryption
    /// Secret is never made from it.
    #[arg(long, value_name = "FILE")]
    pub age_key_file: Option<PathBuf>,
    /// Create the cluster's decryption Secret (`secrets.sops.secretRef` in the Flux namespace)
    /// from FILE when the cluster has none (an existing one is never replaced). FILE holds
    /// exactly one age identity, the cluster's own: its recipient must be one of
    /// `secrets.sops.age`. It also opens the sealed Secrets for this run.
    #[arg(long, value_name = "FILE")]
    pub create_decryption_secret: Option<PathBuf>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
    /// After the apply is ready, run `osbx verify`; Ready only if both succeed.
    #[arg(long = "verify")]
    pub verify: bool,
    /// Verify options (with --verify).
    #[command(flatten)]
    pub verify_flags: VerifyFlags,
}

/// Verify options shared by `verify` and `apply --verify`.
#[derive(Debug, Args, Clone, Default)]
pub struct VerifyFlags {
    /// Run only these checks (ids or prefixes such as `kata`); repeatable or comma-separated. An id
    /// no check of the profile has, or a selection of none, is refused (exit 2).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Skip these checks (ids or prefixes); repeatable or comma-separated; refused like --only.
    #[arg(long, value_delimiter = ',')]
    pub skip: Vec<String>,
    /// Reach the Lifecycle API at this URL instead of through the API server's service proxy.
    #[arg(long)]
    pub server_url: Option<String>,
    /// Read the API key from this file (default: env OSBX_API_KEY, else the Secret the profile
    /// names). Never passed as an argument, which would show in `ps`. With `apply`, the key is
    /// also written to (or rotated in) that Secret.
    #[arg(long)]
    pub api_key_file: Option<PathBuf>,
    /// Write a JUnit XML report here.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Also benchmark a container build: the workload probe's build in a runc pool beside each
    /// build pool's (`workload.bench.<pool>`: both times and their ratio).
    #[arg(long)]
    pub bench: bool,
    /// Overall time limit of the run, e.g. 15m.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    pub verify_timeout: std::time::Duration,
}

/// `osbx verify` arguments.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Profile and templates.
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Cluster access.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Check selection and reporting.
    #[command(flatten)]
    pub verify: VerifyFlags,
    /// In the cluster: where the run publishes its report, and the serving mode.
    #[command(flatten)]
    pub in_cluster: InClusterFlags,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
}

/// How `osbx verify` runs inside the cluster (the acceptance layer's Job and Deployment).
#[derive(Debug, Args)]
pub struct InClusterFlags {
    /// Publish each run's report to this ConfigMap (NAMESPACE/NAME: the JSON report, the
    /// revision, the time, the JUnit file), with a Warning Event for each check that failed; the
    /// profile's acceptance layer is then not among the layers checked (it is the run's own).
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = super::parse_service_account)]
    pub publish: Option<(String, String)>,
    /// The revision the run checks, recorded in the published report.
    #[arg(long, requires = "publish")]
    pub revision: Option<String>,
    /// Run the probe pods in this namespace, which must exist (the acceptance layer renders
    /// one): the run creates and deletes no namespace, only its own pods there, so its roles
    /// grant pod creation in that namespace alone.
    #[arg(long, value_name = "NAMESPACE")]
    pub probe_namespace: Option<String>,
    /// Run only the checks that change nothing in the cluster (the acceptance layer's serving
    /// pod, whose identity may create nothing); with --serve, the other checks' verdicts come
    /// from the last report of the layer's Job at the same revision and criteria.
    #[arg(long)]
    pub read_only: bool,
    /// The pod this run is in, named in the published report as its writer (the acceptance
    /// layer's pods set it from the downward API).
    #[arg(long, env = "OSBX_POD_NAME", value_name = "NAME", hide_env_values = true)]
    pub pod: Option<String>,
    /// The Job this run is of (its name), named in the published report: `osbx rollout` trusts
    /// only a report of the Job Flux applied (set from the pod's `batch.kubernetes.io/job-name`).
    #[arg(long, env = "OSBX_JOB_NAME", value_name = "NAME", hide_env_values = true)]
    pub job_name: Option<String>,
    /// The uid of that Job (set from the pod's `batch.kubernetes.io/controller-uid`).
    #[arg(long, env = "OSBX_JOB_UID", value_name = "UID", hide_env_values = true)]
    pub job_uid: Option<String>,
    /// The CronJob that Job is of (the acceptance layer's, which runs every check between
    /// revisions): its report is published beside the Job's, never as the one `osbx rollout`
    /// trusts.
    #[arg(long, value_name = "NAME", requires = "publish")]
    pub cron_job: Option<String>,
    /// Run the checks every --interval until stopped, serving their metrics on ADDR
    /// (`/metrics`, OpenMetrics; `/healthz`).
    #[arg(long, value_name = "ADDR")]
    pub serve: Option<std::net::SocketAddr>,
    /// How often --serve runs the checks (the first run after one interval; until then the
    /// metrics show the last published report of the same revision).
    #[arg(long, default_value = "15m", value_parser = parse_duration, requires = "serve")]
    pub interval: std::time::Duration,
}

/// `osbx rollout` arguments.
#[derive(Debug, Args)]
pub struct RolloutArgs {
    /// The fleet file (its `rollout.waves` order the clusters; each cluster names its
    /// kubeconfig `context`).
    #[arg(long)]
    pub fleet: PathBuf,
    /// The Flux repository's work tree the waves are committed in.
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Directory of templates that replace embedded ones with the same relative path.
    #[arg(long, env = "OSBX_TEMPLATES")]
    pub templates: Option<PathBuf>,
    /// Push each wave's commit (`git push` in the repository) before waiting for Flux.
    #[arg(long)]
    pub push: bool,
    /// Start at the last committed wave (verified again) instead of the first.
    #[arg(long)]
    pub resume: bool,
    /// Print the waves, what each changes and which are committed; write and reach nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// How long Flux may take to reconcile a wave's commit on one cluster, e.g. 10m.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub timeout: std::time::Duration,
    /// Kubeconfig file of the clusters that name none in the fleet file.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// How many requests, how fast.
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Run only these checks on each cluster (ids or prefixes); repeatable or comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Skip these checks (ids or prefixes); repeatable or comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub skip: Vec<String>,
    /// Time limit of each cluster's verify run, e.g. 15m.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    pub verify_timeout: std::time::Duration,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
}

/// `osbx status` arguments.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Profile and templates.
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// One line per cluster of a fleet file instead (each reached as `rollout` reaches it; at
    /// most 8 clusters read at once).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["watch", "server_url"])]
    pub fleet: Option<PathBuf>,
    /// Cluster access.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The Flux repository whose HEAD the applied revisions are compared with.
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// Read the server's health at this URL instead of through the API server's service proxy.
    #[arg(long)]
    pub server_url: Option<String>,
    /// Output format: text, JSON, or the layers' dependsOn graph as Mermaid or Graphviz DOT.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: StatusOutput,
    /// Redraw whenever the platform changes (watching it), until interrupted; without a
    /// terminal, print only the lines that changed.
    #[arg(long)]
    pub watch: bool,
}

/// `osbx status`'s output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum StatusOutput {
    /// Human-readable text: the layer tree, the Pools as bars.
    #[default]
    Text,
    /// One JSON document on stdout.
    Json,
    /// The dependsOn graph as a Mermaid flowchart.
    Mermaid,
    /// The dependsOn graph in Graphviz DOT.
    Dot,
}
