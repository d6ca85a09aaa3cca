//! The settings of the commands that reach a cluster or a Flux repository's history: `diff`,
//! `apply`, `status`, `verify`, `rollout`.

use std::path::PathBuf;
use std::time::Duration;

use crate::cli::{
    ApplyArgs, DiffArgs, DiffOutput, Output, RolloutArgs, StatusArgs, StatusOutput, VerifyArgs, VerifyFlags,
};
use crate::cluster::ConnectOptions;
use crate::deploy::ApplyOptions;
use crate::profile::ProfileSource;
use crate::verify;
use crate::verify::{ApiKeyValue, Selection};

use super::{ProfileSettings, api_key, connect};

/// `osbx diff`: against a live cluster, or (`--base`) offline against a git ref.
#[derive(Debug, Clone)]
pub(in crate::commands) enum DiffSettings {
    /// Against a cluster.
    Live(LiveDiffSettings),
    /// Against what the Flux repository holds at a ref.
    Review(ReviewSettings),
}

/// `osbx diff` against a cluster.
#[derive(Debug, Clone)]
pub(in crate::commands) struct LiveDiffSettings {
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
pub(in crate::commands) struct ReviewSettings {
    /// What to review, and how.
    pub review: crate::review::Settings,
    /// Templates that replace the embedded ones (both sides render with them).
    pub templates: Option<PathBuf>,
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
        let charts = crate::review::ChartMode::of(a.charts.as_deref(), a.no_charts)?;
        Ok(Self::Review(ReviewSettings {
            review: crate::review::Settings {
                repo: a.repo.clone().unwrap_or_else(|| PathBuf::from(".")),
                base: Some(base.clone()).filter(|b| !b.is_empty()),
                subject,
                charts,
            },
            templates: a.profile.templates.clone(),
            output: a.output,
            max_size: a.max_size,
        }))
    }
}

/// `osbx apply`.
#[derive(Debug, Clone)]
pub(in crate::commands) struct ApplySettings {
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
pub(in crate::commands) struct StatusSettings {
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
pub(in crate::commands) struct VerifyRunSettings {
    /// Which checks, how the run reaches the Lifecycle API, its time limit.
    pub run: verify::Settings,
    /// Write a JUnit report here.
    pub junit: Option<PathBuf>,
    /// Publish the report to this ConfigMap, with the revision checked and who checked it (in the
    /// cluster).
    pub publish: Option<crate::verify::in_cluster::publish::Publishing>,
}

impl VerifyRunSettings {
    fn new(f: &VerifyFlags, api_key: Option<String>) -> Self {
        Self {
            run: verify::Settings {
                selection: Selection { only: f.only.clone(), skip: f.skip.clone(), bench: f.bench },
                server_url: f.server_url.clone(),
                api_key: ApiKeyValue::new(api_key),
                timeout: f.verify_timeout,
                probe_namespace: None,
                read_only: false,
            },
            junit: f.junit.clone(),
            publish: None,
        }
    }
}

/// `osbx verify`.
#[derive(Debug, Clone)]
pub(in crate::commands) struct VerifySettings {
    /// Which profile, and which templates render it.
    pub profile: ProfileSettings,
    /// The cluster.
    pub connect: ConnectOptions,
    /// The run.
    pub verify: VerifyRunSettings,
    /// Run every interval, serving the metrics on this address (`--serve`).
    pub serve: Option<crate::verify::in_cluster::serve::Serve>,
    /// Output format.
    pub output: Output,
}

impl TryFrom<&VerifyArgs> for VerifySettings {
    type Error = anyhow::Error;

    fn try_from(a: &VerifyArgs) -> anyhow::Result<Self> {
        let mut verify = VerifyRunSettings::new(&a.verify, api_key(a.verify.api_key_file.as_deref())?);
        let c = &a.in_cluster;
        if let Some(ns) = &c.probe_namespace
            && let Err(why) = crate::refs::check_dns_label(ns)
        {
            anyhow::bail!("--probe-namespace {ns:?} is not a namespace name: {why}");
        }
        verify.run.probe_namespace.clone_from(&c.probe_namespace);
        verify.run.read_only = c.read_only;
        verify.publish = c.publish.as_ref().map(|(ns, name)| crate::verify::in_cluster::publish::Publishing {
            report: crate::object::KnownKind::CONFIG_MAP.object(Some(ns), name),
            revision: c.revision.clone().unwrap_or_default(),
            writer: crate::verify::in_cluster::publish::Writer::of(
                c.pod.as_deref(),
                c.job_name.as_deref().zip(c.job_uid.as_deref()),
                c.cron_job.as_deref(),
            ),
        });
        Ok(Self {
            profile: (&a.profile).into(),
            connect: (&a.cluster).into(),
            verify,
            serve: c.serve.map(|addr| crate::verify::in_cluster::serve::Serve { addr, interval: c.interval }),
            output: a.output,
        })
    }
}

/// `osbx rollout`.
#[derive(Debug, Clone)]
pub(in crate::commands) struct RolloutSettings {
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
                    probe_namespace: None,
                    read_only: false,
                },
            },
            output: a.output,
        }
    }
}
