//! `osbx lint`: the domain rules, for a profile or every cluster of a fleet.

use super::ExitStatus;
use super::settings::{LintSettings, Source};
use crate::cli::Output;
use crate::fleet;
use crate::lint::{self, Finding, Severity};
use crate::printer::Printer;
use crate::profile::{self, ProfileError};

/// Run `osbx lint`.
///
/// # Errors
/// When the profile cannot be read or rendered at all (exit 2).
pub(super) fn run(settings: &LintSettings, printer: Printer) -> anyhow::Result<ExitStatus> {
    let renderer = crate::commands::renderer(settings.templates.as_deref())?;
    let loaded = match &settings.source {
        Source::Fleet(path) => fleet::load(path, &printer.progress()).map(|f| f.members),
        Source::Profile(source) => profile::load(source).map(|p| vec![p]),
    };
    let identities = match &settings.repo {
        Some(_) => crate::secrets::identities(settings.age_key_file.as_deref())?,
        None => None,
    };
    let findings: Vec<Finding> = match loaded {
        Ok(mut members) => {
            let mut all = Vec::new();
            for m in &mut members {
                if let Some(repo) = &settings.repo {
                    crate::secrets::attach(m, repo)?;
                }
                let rendered = match renderer.render(m) {
                    Ok(r) => r,
                    // A sealed file that is not a SOPS file is a finding of its own (below).
                    Err(crate::render::RenderError::Sealed(_)) => {
                        let sealed = std::mem::take(&mut m.sealed);
                        let rendered = renderer.render(m);
                        m.sealed = sealed;
                        rendered?
                    }
                    Err(e) => return Err(e.into()),
                };
                let inputs = lint::Inputs {
                    pool_crd: settings.pool_crd.as_ref(),
                    chart: settings.chart.as_ref(),
                    repo: settings.repo.as_deref(),
                    identities: identities.as_ref(),
                };
                all.extend(lint::lint(m, &rendered, inputs));
            }
            all
        }
        // An invalid profile is a lint result (exit 1), not a failure to lint.
        Err(ProfileError::Invalid(diags)) => diags.into_iter().map(Finding::from).collect(),
        Err(e) => return Err(e.into()),
    };
    let errors = findings.iter().filter(|f| f.severity == Severity::Error).count();
    match settings.output {
        Output::Json => printer.json(&serde_json::json!({"findings": findings, "errors": errors,
            "warnings": findings.len() - errors})),
        Output::Text => {
            for f in &findings {
                printer.data(&f.to_string());
            }
            printer.data(&format!("{errors} error(s), {} warning(s)", findings.len() - errors));
        }
    }
    Ok(if errors > 0 { ExitStatus::Failure } else { ExitStatus::Success })
}
