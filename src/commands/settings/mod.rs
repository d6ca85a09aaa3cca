//! Every command's settings, resolved from its arguments and the environment in one place:
//! the commands themselves never see clap, and the domain never sees either.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::Value;

use crate::chart::Chart;
use crate::cli::{
    ClusterArgs, ImagesArgs, ImagesOutput, InitArgs, LimitArgs, LintArgs, Output, ProfileArgs, RbacArgs, RbacFor,
    RenderArgs, RuntimeArg,
};
use crate::cluster::ConnectOptions;
use crate::init::{Runtimes, Starter};
use crate::profile::ProfileSource;
use crate::rbac::{self, Purpose, Subject};

mod cluster;

pub(super) use cluster::{
    ApplySettings, DiffSettings, LiveDiffSettings, ReviewSettings, RolloutSettings, StatusSettings, VerifyRunSettings,
    VerifySettings,
};

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

pub(super) fn connect(kubeconfig: Option<PathBuf>, context: Option<String>, l: &LimitArgs) -> ConnectOptions {
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

impl Source {
    /// `--fleet FILE` when given, else `-p PROFILE` (the embedded default without it).
    fn of(fleet: Option<&Path>, profile: Option<&str>) -> Self {
        fleet.map_or_else(|| Self::Profile(ProfileSource::from_arg(profile)), |path| Self::Fleet(path.to_path_buf()))
    }
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
            source: Source::of(a.fleet.as_deref(), a.profile.as_deref()),
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
            source: Source::of(a.fleet.as_deref(), a.profile.profile.as_deref()),
            templates: a.profile.templates.clone(),
            pool_crd: a.pool_crd.as_deref().map(read_yaml).transpose()?,
            chart: a.chart.as_deref().map(Chart::load).transpose()?,
            repo: a.repo.clone(),
            age_key_file: a.age_key_file.clone(),
            output: a.output,
        })
    }
}

/// `osbx images`.
#[derive(Debug, Clone)]
pub(super) struct ImagesSettings {
    /// Which profile or fleet.
    pub source: Source,
    /// Template overrides.
    pub templates: Option<PathBuf>,
    /// How charts are expanded (as the review expands them).
    pub charts: crate::review::ChartMode,
    /// Ask the registries for every image's manifest.
    pub check: bool,
    /// Pin each image's digest.
    pub resolve: Option<Resolve>,
    /// Output format.
    pub output: ImagesOutput,
}

/// `osbx images --resolve`.
#[derive(Debug, Clone)]
pub(super) struct Resolve {
    /// Read every pin again (`--refresh`).
    pub refresh: bool,
    /// The profile file to write the pins into (`--write`), instead of printing them.
    pub write: Option<PathBuf>,
}

impl TryFrom<&ImagesArgs> for ImagesSettings {
    type Error = anyhow::Error;

    fn try_from(a: &ImagesArgs) -> anyhow::Result<Self> {
        let source = Source::of(a.fleet.as_deref(), a.profile.profile.as_deref());
        let write = match (&source, a.write) {
            (_, false) => None,
            (Source::Profile(ProfileSource::File(path)), true) => Some(path.clone()),
            (Source::Profile(ProfileSource::Embedded(name)), true) => anyhow::bail!(
                "--write edits a profile file, and `{name}` is built into osbx: write a profile of your own first (`osbx init`) and name it with -p"
            ),
            (Source::Fleet(_), true) => anyhow::bail!(
                "--write edits one profile file; with --fleet, print the pins and put each cluster's in its profile"
            ),
        };
        if (a.check || a.resolve) && matches!(a.output, ImagesOutput::Crane | ImagesOutput::SkopeoSync) {
            anyhow::bail!(
                "-o {} lists the copies to make; --check and --resolve print text or json",
                if a.output == ImagesOutput::Crane { "crane" } else { "skopeo-sync" }
            );
        }
        Ok(Self {
            source,
            templates: a.profile.templates.clone(),
            charts: crate::review::ChartMode::of(a.charts.as_deref(), a.no_charts)?,
            check: a.check,
            resolve: a.resolve.then_some(Resolve { refresh: a.refresh, write }),
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
                in_cluster: a.in_cluster,
                serving: a.serving,
                subjects: a.user.iter().cloned().map(Subject::User).chain(accounts).collect(),
            },
        }
    }
}

pub(super) fn read_yaml(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_saphyr::from_str(&text).with_context(|| format!("{} is not a YAML document", path.display()))
}

/// The API key given to this run: `--api-key-file`, else `OSBX_API_KEY` (never an argument
/// value, which would show in `ps`).
pub(super) fn api_key(file: Option<&Path>) -> anyhow::Result<Option<String>> {
    if let Some(path) = file {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading --api-key-file {}", path.display()))?;
        return Ok(Some(text.trim().to_owned()).filter(|k| !k.is_empty()));
    }
    Ok(std::env::var("OSBX_API_KEY").ok().filter(|k| !k.is_empty()))
}
