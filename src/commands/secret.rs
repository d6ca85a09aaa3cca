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
use crate::sops::File;

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
    let mismatched = secrets::mismatches(&loaded)?;
    let mut rows = Vec::new();
    for slot in secrets::slots(&loaded.profile) {
        let file = loaded.sealed.0.get(&slot.path).map(|t| File::parse(t)).transpose();
        let file = file.map_err(|source| secrets::SecretsError::File { path: slot.path.clone(), source })?;
        let state = match (&file, mismatched.iter().any(|m| m.path == slot.path)) {
            (None, _) => "not set",
            (Some(_), true) => "sealed for other recipients",
            (Some(_), false) => "sealed",
        };
        rows.push(json!({
            "name": slot.name(),
            "namespace": slot.supplied.secret.namespace,
            "key": slot.supplied.key,
            "layer": slot.layer,
            "path": slot.path,
            "state": state,
            "recipients": file.as_ref().map(File::recipients).unwrap_or_default(),
        }));
    }
    match a.output {
        Output::Json => printer.json(&json!({"secrets": rows})),
        Output::Text => {
            for r in &rows {
                printer.data(&format!(
                    "{}/{} (key {}, layer {}): {} at {}",
                    r["namespace"].as_str().unwrap_or_default(),
                    r["name"].as_str().unwrap_or_default(),
                    r["key"].as_str().unwrap_or_default(),
                    r["layer"].as_str().unwrap_or_default(),
                    r["state"].as_str().unwrap_or_default(),
                    r["path"].as_str().unwrap_or_default(),
                ));
            }
        }
    }
    Ok(ExitStatus::Success)
}
