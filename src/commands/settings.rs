//! Every command's settings, resolved from its arguments and the environment in one place:
//! the commands themselves never see clap, and the domain never sees either.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;

use crate::chart::Chart;
use crate::cli::{
    ApplyArgs, ClusterArgs, DiffArgs, DiffOutput, InitArgs, LimitArgs, LintArgs, Output, ProfileArgs, RbacArgs,
    RbacFor, RenderArgs, RolloutArgs, RuntimeArg, StatusArgs, StatusOutput, VerifyArgs, VerifyFlags,
};
use crate::cluster::ConnectOptions;
use crate::deploy::ApplyOptions;
use crate::init::{Runtimes, Starter};
use crate::profile::ProfileSource;
use crate::rbac::{self, Purpose, Subject};
use crate::verify;
use crate::verify::{ApiKeyValue, Selection};

/// Which profile, and which templates render it.
#[derive(Debug, Clone)]
pub(super) struct ProfileSettings {
    /// The profile.
    pub source: ProfileSource,
    /// Templates that replace embedded ones.
    pub templates: Option<PathBuf>,
}

impl From<&ProfileArgs> for ProfileSettings {
    fn from(a: &ProfileArgs) -> Self {
        Self { source: ProfileSource::from_arg(a.profile.as_deref()), templates: a.templates.clone() }
    }
}

impl From<&ClusterArgs> for ConnectOptions {
    fn from(a: &ClusterArgs) -> Self {
        connect(a.kubeconfig.clone(), a.context.clone(), &a.limits)
    }
}

fn connect(kubeconfig: Option<PathBuf>, context: Option<String>, l: &LimitArgs) -> ConnectOptions {
    ConnectOptions { kubeconfig, context, qps: l.qps, concurrency: l.concurrency, request_timeout: l.request_timeout }
}

/// What to render: one profile or every cluster of a fleet.
#[derive(Debug, Clone)]
pub(super) enum Source {
    /// One profile.
    Profile(ProfileSource),
    /// Every cluster of a fleet file.
    Fleet(PathBuf),
}

/// `osbx render`.
#[derive(Debug, Clone)]
pub(super) struct RenderSettings {
    /// Which profile or fleet.
    pub source: Source,
    /// Repository root.
    pub out: PathBuf,
    /// Template overrides.
    pub templates: Option<PathBuf>,
    /// Compare only.
    pub check: bool,
    /// Commit with this message.
    pub commit: Option<String>,
    /// Adopt foreign files.
    pub force: bool,
    /// List the defaults filled in.
    pub verbose: bool,
    /// The age identity file (`--age-key-file`; else `SOPS_AGE_KEY_FILE`, `SOPS_AGE_KEY`).
    pub age_key_file: Option<PathBuf>,
    /// `osbx secret set`: the value to seal before rendering.
    pub set: Option<SecretValue>,
}

/// A Secret's value given to `osbx secret set` (never printed: `Debug` shows its length only).
#[derive(Clone)]
pub(super) struct SecretValue {
    /// The Secret's name.
    pub name: String,
    /// The value itself (never printed).
    pub value: Vec<u8>,
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretValue({}, {} bytes)", self.name, self.value.len())
    }
}

impl From<RenderArgs> for RenderSettings {
    fn from(a: RenderArgs) -> Self {
        Self {
            source: match a.fleet {
                Some(path) => Source::Fleet(path),
                None => Source::Profile(ProfileSource::from_arg(a.profile.as_deref())),
            },
            out: a.out,
            templates: a.templates,
            check: a.check,
            commit: a.commit.then(|| a.message.unwrap_or_else(|| "osbx: render the OpenSandbox platform".to_owned())),
            force: a.force,
            verbose: a.verbose,
            age_key_file: a.age_key_file,
            set: None,
        }
    }
}

/// `osbx init`.
#[derive(Debug, Clone)]
pub(super) struct InitSettings {
    /// The file to write.
    pub file: PathBuf,
    /// What the starter profile contains (cluster name, runtimes, SPIRE).
    pub starter: Starter,
    /// Write a fleet file and its base profile instead of one profile.
    pub fleet: bool,
    /// Overwrite.
    pub force: bool,
}

impl From<&InitArgs> for InitSettings {
    fn from(a: &InitArgs) -> Self {
        let default = if a.fleet { "fleet.yaml" } else { "profile.yaml" };
        Self {
            file: a.file.clone().unwrap_or_else(|| PathBuf::from(default)),
            starter: Starter {
                cluster: a.cluster.clone(),
                runtimes: match a.runtime {
                    RuntimeArg::Runc => Runtimes::Runc,
                    RuntimeArg::Kata => Runtimes::Kata,
                    RuntimeArg::Both => Runtimes::Both,
                },
                spire: a.spire,
            },
            fleet: a.fleet,
            force: a.force,
        }
    }
}

/// `osbx diff`: against a live cluster, or (`--base`) offline against a git ref.
#[derive(Debug, Clone)]
pub(super) enum DiffSettings {
    /// Against a cluster.
    Live(LiveDiffSettings),
    /// Against what the Flux repository holds at a ref.
    Review(ReviewSettings),
}

/// `osbx diff` against a cluster.
#[derive(Debug, Clone)]
pub(super) struct LiveDiffSettings {
    /// Which profile, and which templates render it.
    pub profile: ProfileSettings,
    /// The cluster.
    pub connect: ConnectOptions,
    /// Output format.
    pub output: Output,
    /// The API key Secret's value to compare (`OSBX_API_KEY`), if given.
    pub api_key: Option<String>,
    /// The Flux repository whose sealed Secrets are compared (`secrets.sops`).
    pub repo: PathBuf,
    /// The age identity that opens them (`--age-key-file`, else the environment's).
    pub age_key_file: Option<PathBuf>,
}

/// `osbx diff --base`.
#[derive(Debug, Clone)]
pub(super) struct ReviewSettings {
    /// What to review, and how.
    pub review: crate::review::Settings,
    /// Output format.
    pub output: DiffOutput,
    /// `-o markdown`'s size limit.
    pub max_size: usize,
}

impl TryFrom<&DiffArgs> for DiffSettings {
    type Error = anyhow::Error;

    fn try_from(a: &DiffArgs) -> anyhow::Result<Self> {
        let Some(base) = &a.base else {
            let output = match a.output {
                DiffOutput::Text => Output::Text,
                DiffOutput::Json => Output::Json,
                DiffOutput::Markdown => anyhow::bail!("-o markdown: a pull-request comment needs --base REF"),
            };
            return Ok(Self::Live(LiveDiffSettings {
                profile: (&a.profile).into(),
                connect: (&a.cluster).into(),
                output,
                api_key: api_key(None)?,
                repo: a.repo.clone().unwrap_or_else(|| PathBuf::from(".")),
                age_key_file: a.age_key_file.clone(),
            }));
        };
        let subject = match &a.fleet {
            Some(_) if a.profile.profile.is_some() => {
                anyhow::bail!("--fleet: give a fleet or a profile (-p), not both")
            }
            Some(fleet) => crate::review::Subject::Fleet(fleet.clone()),
            None => crate::review::Subject::Profile(ProfileSource::from_arg(a.profile.profile.as_deref())),
        };
        let charts = match (&a.charts, a.no_charts) {
            (_, true) => crate::review::ChartMode::Off,
            (Some(dir), false) => {
                anyhow::ensure!(dir.is_dir(), "--charts {}: no such directory", dir.display());
                crate::review::ChartMode::Expand { cache: dir.clone(), air_gapped: true }
            }
            (None, false) => {
                crate::review::ChartMode::Expand { cache: crate::review::charts::default_cache(), air_gapped: false }
            }
        };
        Ok(Self::Review(ReviewSettings {
            review: crate::review::Settings {
                repo: a.repo.clone().unwrap_or_else(|| PathBuf::from(".")),
                base: Some(base.clone()).filter(|b| !b.is_empty()),
                subject,
                templates: a.profile.templates.clone(),
                charts,
            },
            output: a.output,
            max_size: a.max_size,
        }))
    }
}

/// `osbx apply`.
#[derive(Debug, Clone)]
pub(super) struct ApplySettings {
    /// Which profile, and which templates render it.
    pub profile: ProfileSettings,
    /// The cluster.
    pub connect: ConnectOptions,
    /// How to apply.
    pub apply: ApplyOptions,
    /// The Flux repository: checked for uncommitted or unpushed changes, and whether its pushed
    /// HEAD holds the render.
    pub repo: PathBuf,
    /// The age identity that opens the sealed Secrets (`secrets.sops`).
    pub age_key_file: Option<PathBuf>,
    /// The cluster's own age identity, to create its decryption Secret from
    /// (`--create-decryption-secret`).
    pub decryption_key_file: Option<PathBuf>,
    /// Output format.
    pub output: Output,
    /// The API key to write to the profile's Secret (`--api-key-file`, `OSBX_API_KEY`).
    pub api_key: Option<String>,
    /// Verify after the apply is ready (`--verify`).
    pub verify: Option<VerifyRunSettings>,
}

impl TryFrom<&ApplyArgs> for ApplySettings {
    type Error = anyhow::Error;

    fn try_from(a: &ApplyArgs) -> anyhow::Result<Self> {
        let key = api_key(a.verify_flags.api_key_file.as_deref())?;
        let verify = VerifyRunSettings::new(&a.verify_flags, key.clone());
        Ok(Self {
            profile: (&a.profile).into(),
            connect: (&a.cluster).into(),
            apply: ApplyOptions {
                dry_run: a.dry_run,
                prune: a.prune,
                wait: !a.no_wait,
                timeout: a.timeout,
                interval: Duration::from_secs(2),
                force_conflicts: a.force_conflicts,
            },
            repo: a.repo.clone(),
            age_key_file: a.age_key_file.clone(),
            decryption_key_file: a.create_decryption_secret.clone(),
            output: a.output,
            api_key: key,
            verify: (a.verify && !a.dry_run).then_some(verify),
        })
    }
}

/// `osbx status`.
#[derive(Debug, Clone)]
pub(super) struct StatusSettings {
    /// Which profile, and which templates render it.
    pub profile: ProfileSettings,
    /// The cluster.
    pub connect: ConnectOptions,
    /// The Flux repository whose HEAD applied revisions are compared with.
    pub repo: PathBuf,
    /// The server's URL, instead of the service proxy.
    pub server_url: Option<String>,
    /// Output format.
    pub output: StatusOutput,
    /// Redraw on every change until interrupted.
    pub watch: bool,
    /// One line per cluster of this fleet file instead.
    pub fleet: Option<PathBuf>,
}

impl TryFrom<&StatusArgs> for StatusSettings {
    type Error = anyhow::Error;

    fn try_from(a: &StatusArgs) -> anyhow::Result<Self> {
        if a.fleet.is_some() {
            let graph = match a.output {
                StatusOutput::Mermaid => Some("mermaid"),
                StatusOutput::Dot => Some("dot"),
                StatusOutput::Text | StatusOutput::Json => None,
            };
            if let Some(graph) = graph {
                anyhow::bail!(
                    "-o {graph}: --fleet prints one line per cluster, and the layer graph is drawn for one cluster; give -o text or -o json with --fleet, or drop --fleet to draw a cluster's graph"
                );
            }
        }
        Ok(Self {
            profile: (&a.profile).into(),
            connect: (&a.cluster).into(),
            repo: a.repo.clone(),
            server_url: a.server_url.clone(),
            output: a.output,
            watch: a.watch,
            fleet: a.fleet.clone(),
        })
    }
}

/// A verify run and its report (`osbx verify`, `osbx apply --verify`).
#[derive(Debug, Clone)]
pub(super) struct VerifyRunSettings {
    /// Which checks, how the run reaches the Lifecycle API, its time limit.
    pub run: verify::Settings,
    /// Write a JUnit report here.
    pub junit: Option<PathBuf>,
}

impl VerifyRunSettings {
    fn new(f: &VerifyFlags, api_key: Option<String>) -> Self {
        Self {
            run: verify::Settings {
                selection: Selection { only: f.only.clone(), skip: f.skip.clone(), bench: f.bench },
                server_url: f.server_url.clone(),
                api_key: ApiKeyValue::new(api_key),
                timeout: f.verify_timeout,
            },
            junit: f.junit.clone(),
        }
    }
}

/// `osbx verify`.
#[derive(Debug, Clone)]
pub(super) struct VerifySettings {
    /// Which profile, and which templates render it.
    pub profile: ProfileSettings,
    /// The cluster.
    pub connect: ConnectOptions,
    /// The run.
    pub verify: VerifyRunSettings,
    /// Output format.
    pub output: Output,
}

impl TryFrom<&VerifyArgs> for VerifySettings {
    type Error = anyhow::Error;

    fn try_from(a: &VerifyArgs) -> anyhow::Result<Self> {
        Ok(Self {
            profile: (&a.profile).into(),
            connect: (&a.cluster).into(),
            verify: VerifyRunSettings::new(&a.verify, api_key(a.verify.api_key_file.as_deref())?),
            output: a.output,
        })
    }
}

/// `osbx rollout`.
#[derive(Debug, Clone)]
pub(super) struct RolloutSettings {
    /// The fleet file.
    pub fleet: PathBuf,
    /// Templates that replace embedded ones.
    pub templates: Option<PathBuf>,
    /// How to roll out.
    pub rollout: crate::rollout::Settings,
    /// Output format.
    pub output: Output,
}

impl From<&RolloutArgs> for RolloutSettings {
    fn from(a: &RolloutArgs) -> Self {
        Self {
            fleet: a.fleet.clone(),
            templates: a.templates.clone(),
            rollout: crate::rollout::Settings {
                repo: a.repo.clone(),
                push: a.push,
                resume: a.resume,
                dry_run: a.dry_run,
                connect: connect(a.kubeconfig.clone(), None, &a.limits),
                timeout: a.timeout,
                // Each cluster's key is read from the Secret its profile names.
                verify: verify::Settings {
                    selection: Selection { only: a.only.clone(), skip: a.skip.clone(), bench: false },
                    server_url: None,
                    api_key: ApiKeyValue::default(),
                    timeout: a.verify_timeout,
                },
            },
            output: a.output,
        }
    }
}

/// `osbx lint`.
#[derive(Debug, Clone)]
pub(super) struct LintSettings {
    /// Which profile or fleet.
    pub source: Source,
    /// Template overrides.
    pub templates: Option<PathBuf>,
    /// The Pool CRD of the pinned chart, parsed.
    pub pool_crd: Option<Value>,
    /// A pinned chart, read.
    pub chart: Option<Chart>,
    /// Output format.
    pub output: Output,
    /// The Flux repository to check too.
    pub repo: Option<PathBuf>,
    /// The age identity file given.
    pub age_key_file: Option<PathBuf>,
}

impl TryFrom<&LintArgs> for LintSettings {
    type Error = anyhow::Error;

    fn try_from(a: &LintArgs) -> anyhow::Result<Self> {
        Ok(Self {
            source: match &a.fleet {
                Some(path) => Source::Fleet(path.clone()),
                None => Source::Profile(ProfileSource::from_arg(a.profile.profile.as_deref())),
            },
            templates: a.profile.templates.clone(),
            pool_crd: a.pool_crd.as_deref().map(read_yaml).transpose()?,
            chart: a.chart.as_deref().map(Chart::load).transpose()?,
            repo: a.repo.clone(),
            age_key_file: a.age_key_file.clone(),
            output: a.output,
        })
    }
}

/// `osbx rbac`.
#[derive(Debug, Clone)]
pub(super) struct RbacSettings {
    /// Which profile, and which templates render it.
    pub profile: ProfileSettings,
    /// A fleet file and its cluster whose profile it is instead (`--fleet`, `--cluster`).
    pub member: Option<(PathBuf, String)>,
    /// What to print.
    pub rbac: rbac::Options,
}

impl From<&RbacArgs> for RbacSettings {
    fn from(a: &RbacArgs) -> Self {
        let accounts = a.service_account.iter().map(|(ns, name)| Subject::ServiceAccount(ns.clone(), name.clone()));
        Self {
            profile: (&a.profile).into(),
            member: a.fleet.clone().zip(a.cluster.clone()),
            rbac: rbac::Options {
                purpose: match a.purpose {
                    RbacFor::Apply => Purpose::Apply,
                    RbacFor::Diff => Purpose::Diff,
                    RbacFor::Verify => Purpose::Verify,
                    RbacFor::Rollout => Purpose::Rollout,
                    RbacFor::Status => Purpose::Status,
                    RbacFor::All => Purpose::All,
                },
                prune: a.prune,
                decryption_secret: a.create_decryption_secret,
                subjects: a.user.iter().cloned().map(Subject::User).chain(accounts).collect(),
            },
        }
    }
}

fn read_yaml(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_saphyr::from_str(&text).with_context(|| format!("{} is not a YAML document", path.display()))
}

/// The API key given to this run: `--api-key-file`, else `OSBX_API_KEY` (never an argument
/// value, which would show in `ps`).
fn api_key(file: Option<&Path>) -> anyhow::Result<Option<String>> {
    if let Some(path) = file {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading --api-key-file {}", path.display()))?;
        return Ok(Some(text.trim().to_owned()).filter(|k| !k.is_empty()));
    }
    Ok(std::env::var("OSBX_API_KEY").ok().filter(|k| !k.is_empty()))
}
