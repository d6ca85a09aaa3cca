//! `osbx secret`: seal a supplied Secret's value into the Flux repository (`set`, which is a
//! render with that value), and list the profile's sealed Secrets (`list`).

use std::io::{IsTerminal as _, Read as _};

use anyhow::Context as _;
use serde_json::json;

use super::ExitStatus;
use super::settings::{RenderSettings, SecretValue, Source};
use crate::cli::{Output, SecretCommand, SecretListArgs, SecretSetArgs};
use crate::printer::Printer;
use crate::profile::{self, ProfileSource};
use crate::secrets;

/// Run `osbx secret …`.
///
/// # Errors
/// Bad input (no value, an unknown name, no `secrets.sops`), and what `render` refuses.
pub(super) fn run(cmd: SecretCommand, printer: Printer) -> anyhow::Result<ExitStatus> {
    match cmd {
        SecretCommand::Set(args) => set(args, printer),
        SecretCommand::List(args) => list(&args, printer),
    }
}

fn set(a: SecretSetArgs, printer: Printer) -> anyhow::Result<ExitStatus> {
    let value = value(&a)?;
    let settings = RenderSettings {
        source: Source::Profile(ProfileSource::from_arg(a.profile.as_deref())),
        out: a.out,
        templates: a.templates,
        check: false,
        commit: a.commit.then(|| a.message.unwrap_or_else(|| format!("osbx: set Secret {}", a.name))),
        force: false,
        verbose: false,
        age_key_file: a.age_key_file,
        set: Some(SecretValue { name: a.name, value }),
    };
    super::render::run(&settings, printer)
}

/// The value: `--from-file`, `--from-env`, else stdin when it is not a terminal. One trailing
/// newline is dropped (what `echo` and editors add).
fn value(a: &SecretSetArgs) -> anyhow::Result<Vec<u8>> {
    let mut bytes = if let Some(path) = &a.from_file {
        std::fs::read(path).with_context(|| format!("reading --from-file {}", path.display()))?
    } else if let Some(var) = &a.from_env {
        std::env::var_os(var)
            .with_context(|| format!("--from-env {var}: the variable is not set"))?
            .into_encoded_bytes()
    } else {
        let mut stdin = std::io::stdin();
        anyhow::ensure!(
            !stdin.is_terminal(),
            "give the value on stdin (`… | osbx secret set {}`), --from-file or --from-env: never as an argument, which would show in `ps` and the shell's history",
            a.name
        );
        let mut buf = Vec::new();
        stdin.read_to_end(&mut buf).context("reading the value from stdin")?;
        buf
    };
    if bytes.ends_with(b"\n") {
        bytes.pop();
        if bytes.ends_with(b"\r") {
            bytes.pop();
        }
    }
    anyhow::ensure!(!bytes.is_empty(), "the value for {} is empty", a.name);
    Ok(bytes)
}

fn list(a: &SecretListArgs, printer: Printer) -> anyhow::Result<ExitStatus> {
    let mut loaded = profile::load(&ProfileSource::from_arg(a.profile.as_deref()))?;
    anyhow::ensure!(loaded.profile.secrets.sops.is_some(), secrets::SecretsError::NotConfigured);
    secrets::attach(&mut loaded, &a.out)?;
    let listed = secrets::list(&loaded)?;
    match a.output {
        Output::Json => printer.json(&json!({"secrets": listed})),
        Output::Text => {
            for s in &listed {
                printer.data(&format!(
                    "{}/{} (key {}, layer {}): {} at {}",
                    s.namespace.as_deref().unwrap_or_default(),
                    s.name,
                    s.key,
                    s.layer,
                    s.state,
                    s.path
                ));
            }
        }
    }
    Ok(ExitStatus::Success)
}
