//! `osbx lint`: the domain rules, for a profile or every cluster of a fleet.

use std::path::Path;

use anyhow::Context as _;
use serde_json::Value;

use crate::cli::{LintArgs, Output};
use crate::commands::ExitStatus;
use crate::lint::{self, Finding, Severity};
use crate::printer::Printer;
use crate::profile::{self, ProfileError, ProfileSource};
use crate::render::Renderer;
use crate::{fleet, render};

/// Run `osbx lint`.
///
/// # Errors
/// When the profile cannot be read or rendered at all (exit 2).
pub fn run(args: &LintArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let crd = match &args.pool_crd {
        Some(path) => Some(read_crd(path)?),
        None => None,
    };
    let renderer = Renderer::new(args.profile.templates.as_deref())?;
    let loaded = match &args.fleet {
        Some(path) => fleet::load(path).map(|f| f.members),
        None => profile::load(&ProfileSource::from_arg(args.profile.profile.as_deref())).map(|p| vec![p]),
    };
    let findings: Vec<Finding> = match loaded {
        Ok(members) => {
            let mut all = Vec::new();
            for m in &members {
                let rendered = renderer.render(m)?;
                all.extend(lint::lint(m, &rendered, crd.as_ref()));
            }
            all
        }
        // An invalid profile is a lint result (exit 1), not a failure to lint.
        Err(ProfileError::Invalid(diags)) => diags
            .into_iter()
            .map(|d| Finding {
                id: "profile.invalid",
                severity: Severity::Error,
                file: d.file,
                line: d.pos.line,
                column: d.pos.column,
                field: d.field.unwrap_or_default(),
                message: d.message,
                fix: "see the message".into(),
            })
            .collect(),
        Err(e) => return Err(e.into()),
    };
    let errors = findings.iter().filter(|f| f.severity == Severity::Error).count();
    match args.output {
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

fn read_crd(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_saphyr::from_str(&text).with_context(|| format!("{} is not a CRD document", path.display()))
}

/// Lint a rendered profile for `render`: errors refuse the render, warnings are returned (see
/// [`print_warnings`]).
///
/// # Errors
/// The errors, one per line.
pub fn gate(loaded: &profile::LoadedProfile, rendered: &render::Rendered) -> anyhow::Result<Vec<Finding>> {
    let (errors, warnings): (Vec<Finding>, Vec<Finding>) =
        lint::lint(loaded, rendered, None).into_iter().partition(|f| f.severity == Severity::Error);
    if errors.is_empty() {
        Ok(warnings)
    } else {
        let lines: Vec<String> = errors.iter().map(|f| format!("  {f}")).collect();
        anyhow::bail!("lint found errors; nothing written (run `osbx lint` for details):\n{}", lines.join("\n"))
    }
}

/// Print warnings; the same warning for many clusters of a fleet (one from the base profile) is
/// printed once, with the number of other clusters it applies to.
pub fn print_warnings(warnings: &[Finding], printer: &Printer) {
    let mut groups: Vec<(&Finding, usize)> = Vec::new();
    for w in warnings {
        match groups.iter_mut().find(|(g, _)| (g.id, &g.field, &g.message) == (w.id, &w.field, &w.message)) {
            Some((_, n)) => *n += 1,
            None => groups.push((w, 0)),
        }
    }
    for (w, more) in groups {
        if more == 0 {
            printer.warn(&w.to_string());
        } else {
            printer.warn(&format!("{w} [and {more} more cluster(s) with the same warning]"));
        }
    }
}
